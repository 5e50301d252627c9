"""Throughput against rate per mechanism: the measurements, their means, the fitted law, and
the paper's coefficient drawn through the same capacity for comparison. Saved with the Agg backend."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from cosample.costmodel.fit import Calibration
from cosample.costmodel.model import PAPER_COEFFICIENTS, throughput


def plot_calibration(data: pd.DataFrame, calibration: Calibration, path: str | os.PathLike[str],
                     title: str | None = None) -> Path:
    """One panel per mechanism; returns the written file (PNG, SVG or PDF by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    names = list(calibration.fits)
    figure, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 3.8), squeeze=False,
                                sharey=True)
    grid = np.linspace(0, 1, 101)
    for axis, name in zip(axes[0], names):
        fit = calibration.fits[name]
        rows = data[data["mechanism"] == name]
        axis.scatter(rows["rate"], rows["throughput_pps"] / 1e3, s=14, alpha=0.5,
                     color="tab:gray", label="trials")
        means = rows.groupby("rate")["throughput_pps"].agg(["mean", "std"])
        axis.errorbar(means.index, means["mean"] / 1e3, yerr=means["std"].fillna(0) / 1e3,
                      fmt="o", color="black", capsize=3, label="mean ± sd")
        low, high = fit.coefficient_ci
        axis.plot(grid, fit.predict(grid) / 1e3, color="tab:blue",
                  label=f"fit a={fit.coefficient:.2f} [{low:.2f}, {high:.2f}]")
        if name in PAPER_COEFFICIENTS:
            axis.plot(grid, throughput(grid, fit.capacity_pps, PAPER_COEFFICIENTS[name]) / 1e3,
                      "--", color="tab:red", label=f"paper a={PAPER_COEFFICIENTS[name]}")
        axis.set_title(f"{name} (R²={fit.r_squared:.2f}, n={fit.n_points})")
        axis.set_xlabel("rate s (fraction sampled/mirrored)")
        axis.set_xlim(-0.03, 1.03)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="lower left")
    axes[0][0].set_ylabel("throughput (kpps delivered)")
    axes[0][0].set_ylim(bottom=0)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    temporary = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        figure.savefig(temporary, dpi=120)
        os.replace(temporary, path)
    finally:
        plt.close(figure)
        temporary.unlink(missing_ok=True)
    return path
