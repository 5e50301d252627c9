"""Throughput vs sampling (or mirroring) rate per mechanism: measurements, fitted law, paper's law.

Fits ``T(s) = T0 / (1 + a*s)`` per mechanism with the cost model's estimator
(``cosample.costmodel.fit.CostModelFit``; per-run capacities when the data have a ``block``
column) and tabulates, beside each fitted curve, the curve the paper's coefficient gives with the
same ``T0``: how far this machine is from the paper. The figure is the cost model's own
(``cosample.costmodel.figure.plot_calibration``), so ``cosample fit --figure`` and this agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cosample.costmodel.model import PAPER_COEFFICIENTS, simulate, throughput

CURVE_POINTS = 51


def synthetic_measurements(
    capacity_pps: float = 100_000.0, noise: float = 0.02, repetitions: int = 3, seed: int = 0
) -> pd.DataFrame:
    """Measurements drawn from the paper's law and coefficients, with multiplicative noise."""
    rates = np.round(np.linspace(0.0, 1.0, 11), 2)
    frame = simulate(
        PAPER_COEFFICIENTS,
        capacity_pps,
        rates=rates,
        repetitions=repetitions,
        noise=noise,
        seed=seed,
    )
    return frame.assign(source="synthetic (paper's coefficients)")


def read_measurements(path: str | Path, protocol: str | None = None) -> pd.DataFrame:
    """A validated tidy measurements CSV, optionally restricted to one ``protocol``."""
    from cosample.costmodel.data import read_measurements as read
    from cosample.experiments.errors import ExperimentError

    frame = read(path)
    if protocol is not None:
        if "protocol" not in frame.columns:
            raise ExperimentError(f"{path}: --protocol {protocol}: the file has no protocol column")
        frame = frame[frame["protocol"] == protocol]
        if frame.empty:
            raise ExperimentError(f"{path}: no measurements with protocol {protocol!r}")
    return frame


@dataclass(frozen=True)
class CurveFit:
    """Fitted coefficients (one row per mechanism), curves (one row per mechanism and rate) and
    the cost model's ``Calibration`` they come from."""

    coefficients: pd.DataFrame
    curves: pd.DataFrame
    calibration: Any


def fit_curves(measurements: pd.DataFrame, n_bootstrap: int = 1000, seed: int = 0) -> CurveFit:
    """Fit every mechanism and sample the fitted and paper curves on a fine grid of rates."""
    from cosample.costmodel.fit import CostModelFit

    calibration = (
        CostModelFit(n_bootstrap=n_bootstrap, random_state=seed).fit(measurements).calibration_
    )
    rows, curves = [], []
    rates = np.linspace(0.0, 1.0, CURVE_POINTS)
    for mechanism, fit in calibration.fits.items():
        paper = PAPER_COEFFICIENTS.get(mechanism, math.nan)
        rows.append(
            {
                "mechanism": mechanism,
                "coefficient": fit.coefficient,
                "ci_low": fit.coefficient_ci[0],
                "ci_high": fit.coefficient_ci[1],
                "paper_coefficient": paper,
                "capacity_pps": fit.capacity_pps,
                "r_squared": fit.r_squared,
                "points": fit.n_points,
                "warnings": "; ".join(fit.warnings),
            }
        )
        fitted = throughput(rates, 1.0, fit.coefficient)
        by_paper = (
            throughput(rates, 1.0, paper) if math.isfinite(paper) else np.full_like(rates, np.nan)
        )
        curves.append(
            pd.DataFrame(
                {
                    "mechanism": mechanism,
                    "rate": rates,
                    "fitted_relative": fitted,
                    "paper_relative": by_paper,
                    "fitted_pps": fitted * fit.capacity_pps,
                    "paper_pps": by_paper * fit.capacity_pps,
                }
            )
        )
    return CurveFit(pd.DataFrame(rows), pd.concat(curves, ignore_index=True), calibration)


def figure(
    measurements: pd.DataFrame, result: CurveFit, path: str | Path, title: str | None = None
) -> Path:
    """The cost model's calibration figure: relative throughput, fit with its band, paper's law."""
    from cosample.costmodel.figure import plot_calibration

    return plot_calibration(measurements, result.calibration, path, title=title)


def report(coefficients: pd.DataFrame) -> str:
    """One line per mechanism: fitted a with its 95% CI, the paper's a, T0 and R^2."""
    lines = [f"{'mechanism':<14}{'a':>8}  {'95% CI':<19}{'paper':>7}{'T0 (pps)':>12}{'R^2':>8}"]
    for row in coefficients.itertuples():
        paper = f"{row.paper_coefficient:.2f}" if math.isfinite(row.paper_coefficient) else "-"
        lines.append(
            f"{row.mechanism:<14}{row.coefficient:>8.3f}  "
            f"[{row.ci_low:>7.3f}, {row.ci_high:>7.3f}] {paper:>7}"
            f"{row.capacity_pps:>12,.0f}{row.r_squared:>8.3f}"
        )
    return "\n".join(lines)
