"""Relative throughput against rate per mechanism: the measurements, their means, the fitted
law and the paper's coefficient. Saved with the Agg backend, atomically.

With paired data (a ``block`` column holding rate-0 phases) each measurement is divided by the
mean rate-0 throughput of its own run, which removes the drift the fit also removes; otherwise
by the fitted capacity. Either way the curves are ``1 / (1 + a*s)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from cosample.costmodel.fitted import Calibration
from cosample.costmodel.model import PAPER_COEFFICIENTS, throughput
from cosample.files import write_atomic


def relative_throughput(rows: pd.DataFrame, capacity_pps: float) -> pd.Series:
    """Each row's throughput over its run's rate-0 mean (paired data) or over ``capacity_pps``."""
    if "block" in rows.columns:
        baseline = rows[rows["rate"] == 0].groupby("block")["throughput_pps"].mean()
        if rows["block"].isin(baseline.index).all():
            return rows["throughput_pps"] / rows["block"].map(baseline)
    return rows["throughput_pps"] / capacity_pps


def plot_calibration(
    data: pd.DataFrame,
    calibration: Calibration,
    path: str | os.PathLike[str],
    title: str | None = None,
) -> Path:
    """One panel per mechanism; returns the written file (PNG, SVG or PDF by suffix)."""
    import matplotlib  # over a second to import: loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # once the backend is chosen

    path = Path(path)
    names = list(calibration.fits)
    figure, axes = plt.subplots(
        1, len(names), figsize=(4.6 * len(names), 3.8), squeeze=False, sharey=True
    )
    grid = np.linspace(0, 1, 101)
    for axis, name in zip(axes[0], names):
        fit = calibration.fits[name]
        rows = data[data["mechanism"] == name]
        relative = relative_throughput(rows, fit.capacity_pps)
        axis.scatter(
            rows["rate"], relative, s=12, alpha=0.45, color="tab:gray", label="measurements"
        )
        means = relative.groupby(rows["rate"]).agg(["mean", "sem"])
        axis.errorbar(
            means.index,
            means["mean"],
            yerr=1.96 * means["sem"].fillna(0),
            fmt="o",
            color="black",
            capsize=3,
            label="mean ± 95% CI",
        )
        low, high = fit.coefficient_ci
        axis.plot(
            grid,
            throughput(grid, 1.0, fit.coefficient),
            color="tab:blue",
            label=f"fit a={fit.coefficient:.2f} [{low:.2f}, {high:.2f}]",
        )
        axis.fill_between(
            grid,
            throughput(grid, 1.0, high),
            throughput(grid, 1.0, low),
            color="tab:blue",
            alpha=0.15,
            linewidth=0,
        )
        if name in PAPER_COEFFICIENTS:
            axis.plot(
                grid,
                throughput(grid, 1.0, PAPER_COEFFICIENTS[name]),
                "--",
                color="tab:red",
                label=f"paper a={PAPER_COEFFICIENTS[name]}",
            )
        axis.axhline(1.0, color="black", linewidth=0.5)
        axis.set_title(
            f"{name}: R²={fit.r_squared:.2f}, n={fit.n_points}, "
            f"T0≈{fit.capacity_pps / 1e3:,.0f} kpps",
            fontsize=9,
        )
        axis.set_xlabel("rate s (fraction sampled / mirrored)")
        axis.set_xlim(-0.03, 1.03)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="lower left")
    cpu = "method" in data.columns and (data["method"] == "cpu").all()
    axes[0][0].set_ylabel(
        "cost per packet at s=0 / cost per packet" if cpu else "throughput / throughput at s=0"
    )
    axes[0][0].set_ylim(0, max(1.6, float(axes[0][0].get_ylim()[1])))
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    try:
        return write_atomic(
            path, lambda stream: figure.savefig(stream, format="png", dpi=120), binary=True
        )
    finally:
        plt.close(figure)
