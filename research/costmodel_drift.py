"""What a two-minute calibration's interval means while the coefficient drifts.

A cpu-method calibration reports a cluster-robust 95% interval over the runs of *its* two
minutes: the uncertainty of the server's coefficient in the state it was in then. Calibrations of
the same mechanism minutes apart disagree by more than those intervals allow, because ``a``
moves with the host's state. This treats a day's calibrations as a random-effects
meta-analysis: each reports ``a_i`` with standard error ``se_i`` of a true ``a`` of its own
minutes, and those vary around a mean with a between-calibration sd ``tau``.

- ``tau`` by the DerSimonian-Laird moment estimator, generalised to a meta-regression
  (Raudenbush 2009: ``tau^2 = (Q_E - (k - p)) / tr(P)``; with only an intercept it is the
  classic DL), the coefficients by weighted least squares with weights ``1 / (se_i^2 + tau^2)``
  and the Knapp-Hartung covariance (scaled by the weighted residual variance, at least 1;
  Student's t on ``k - p`` dof), which keeps its coverage with a handful of calibrations where
  the normal interval does not;
- the 95% prediction interval for the coefficient of the next calibration's minutes (Higgins,
  Thompson and Spiegelhalter 2009): ``mean +- t(k - 2) * sqrt(tau^2 + se(mean)^2)``;
- the state: the same model with the calibration's mean host busy (``cpu_host_busy``, everyone's
  work) or others' work (``cpu_host_busy - cpu_counted``) as predictor; the slope with its
  interval, the residual ``tau`` and the share of ``tau^2`` the predictor explains.

Both for ``a`` and for ``a * c0`` (CPU nanoseconds per copy; ``c0`` the median cost per packet
of the rate-0 phases, taken as known: its noise is small beside ``a``'s). Only calibrations
whose interval is cluster-robust are used (older ones with a residual bootstrap report a
standard error that ignores the runs, and are listed as skipped).

    nice -n 19 .venv/bin/python -m research.costmodel_drift docs/data/cpu-*.json

Prints three Markdown tables: the calibrations, the spread per mechanism and day (and over all
days), and the regressions on the host's state.

The estimator is written here rather than taken from a library: statsmodels (not a dependency)
pools a mean by DL but has no meta-regression with a residual ``tau``; PyMARE has both but is
alpha software that pulls in sympy. The formulas are a dozen lines of linear algebra, tested
against synthetic data with a known ``tau`` and slope.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from cosample.costmodel.calibration_file import read_calibration_file
from cosample.costmodel.compare import mean_host_busy, rate0_cost_ns
from cosample.costmodel.data import read_measurements
from cosample.costmodel.errors import DataError
from cosample.experiments.errors import ExperimentError

#: The state variables a calibration's ``a`` is regressed on (column of the calibration table).
STATES = {"host_busy": "host busy", "others": "others' work"}
#: What is pooled: the relative coefficient and the absolute extra CPU per copy.
QUANTITIES = {"a": ("a", "se"), "a·c0": ("extra_ns", "extra_se_ns")}


@dataclass(frozen=True)
class RandomEffects:
    """A random-effects (meta-)regression: ``coef`` (intercept first), its Knapp-Hartung
    covariance ``cov`` on ``dof = k - p`` degrees of freedom, and the between-study ``tau2``."""

    coef: np.ndarray
    cov: np.ndarray
    tau2: float
    dof: int

    @property
    def tau(self) -> float:
        return math.sqrt(self.tau2)

    def se(self, j: int = 0) -> float:
        return math.sqrt(self.cov[j, j])

    def interval(self, j: int = 0, confidence: float = 0.95) -> tuple[float, float]:
        half = stats.t.ppf(0.5 + confidence / 2, self.dof) * self.se(j)
        return self.coef[j] - half, self.coef[j] + half

    def prediction_interval(self, predictors=(), confidence: float = 0.95) -> tuple[float, float]:
        """Where the true value of a next study with these ``predictors`` falls: the fitted mean
        +- ``t(k - p - 1) * sqrt(tau^2 + its variance)`` (NaN with fewer than ``p + 2`` studies)."""
        if self.dof < 2:
            return math.nan, math.nan
        row = np.concatenate([[1.0], np.asarray(predictors, float)])
        centre = float(row @ self.coef)
        half = stats.t.ppf(0.5 + confidence / 2, self.dof - 1) * math.sqrt(
            self.tau2 + row @ self.cov @ row
        )
        return centre - half, centre + half


def random_effects(estimates, variances, predictors=None) -> RandomEffects:
    """DerSimonian-Laird ``tau^2`` (residual, with ``predictors``) and the Knapp-Hartung fit."""
    y = np.asarray(estimates, float)
    v = np.asarray(variances, float)
    columns = [np.ones_like(y)]
    if predictors is not None:
        columns += [np.asarray(p, float) for p in np.atleast_2d(np.asarray(predictors, float))]
    X = np.column_stack(columns)
    k, p = X.shape
    if k <= p or not (np.all(np.isfinite(y)) and np.all(v > 0)):
        raise ValueError(
            f"needs more than {p} studies with finite estimates and positive variances"
        )
    w = 1 / v
    # P = W - W X (X'WX)^-1 X'W: the fixed-effect fit's residual-maker, weighted
    WX = X * w[:, None]
    P = np.diag(w) - WX @ np.linalg.solve(X.T @ WX, WX.T)
    q = float(y @ P @ y)
    tau2 = max(0.0, (q - (k - p)) / float(np.trace(P)))
    w_star = 1 / (v + tau2)
    WX = X * w_star[:, None]
    information = X.T @ WX
    coef = np.linalg.solve(information, WX.T @ y)
    residual = y - X @ coef
    scale = max(1.0, float(w_star @ residual**2) / (k - p))
    return RandomEffects(coef, np.linalg.inv(information) * scale, tau2, k - p)


def calibration_rows(paths: list[Path]) -> tuple[pd.DataFrame, list[str]]:
    """One row per (calibration, mechanism) with a cluster-robust interval; and the skipped."""
    rows, skipped = [], []
    for path in paths:
        document = read_calibration_file(path, error=ExperimentError)
        meta = document.metadata
        if meta.method != "cpu":
            skipped.append(f"{path.name}: method {meta.method}, not cpu")
            continue
        if not meta.data:
            raise ExperimentError(f"{path}: metadata.data does not name the measurements CSV")
        try:
            data = read_measurements(path.parent / meta.data)
        except DataError as exc:
            raise ExperimentError(f"{path}: metadata.data: {exc}") from None
        for mechanism, fit in document.mechanisms.items():
            ci_method = fit.ci_method or document.ci_method or "an unnamed method"
            if not ci_method.startswith("cluster-robust"):
                skipped.append(
                    f"{path.name} {mechanism}: interval by {ci_method}, not cluster-robust"
                )
                continue
            if fit.coefficient is None or fit.coefficient_se is None or fit.interval() is None:
                skipped.append(f"{path.name} {mechanism}: no estimate")
                continue
            phases = data[data["mechanism"] == mechanism]
            missing = {"cpu_host_busy", "cpu_counted"} - set(phases.columns)
            if missing:
                raise ExperimentError(f"{path.parent / meta.data}: no column {sorted(missing)[0]}")
            c0 = rate0_cost_ns(phases)
            low, high = fit.interval()
            started = meta.started or meta.date or ""
            covariate = fit.covariate or {}
            rows.append(
                {
                    "data": path.name,
                    "mechanism": mechanism,
                    "day": started[:10],
                    "started": started[11:16],
                    "a": fit.coefficient,
                    "half_width": (high - low) / 2,
                    "se": fit.coefficient_se,
                    "covariate": covariate.get("name") if covariate.get("used") else "none",
                    "runs": fit.n_blocks,
                    "host_busy": mean_host_busy(phases),
                    "others": float((phases["cpu_host_busy"] - phases["cpu_counted"]).mean()),
                    "c0_ns": c0,
                    "extra_ns": fit.coefficient * c0,
                    "extra_se_ns": fit.coefficient_se * c0,
                }
            )
    if not rows:
        raise ExperimentError(
            "no cpu-method calibration with a cluster-robust interval among "
            f"the {len(paths)} file(s)"
        )
    frame = pd.DataFrame(rows).sort_values(["mechanism", "day", "started"], ignore_index=True)
    return frame, skipped


def groups(frame: pd.DataFrame):
    """``(mechanism, day, rows)`` for every day, then ``all`` days of each mechanism."""
    for (mechanism, day), rows in frame.groupby(["mechanism", "day"], sort=True):
        yield mechanism, day, rows
    for mechanism, rows in frame.groupby("mechanism", sort=True):
        if rows["day"].nunique() > 1:
            yield mechanism, "all", rows


def spread_row(rows: pd.DataFrame, quantity: str) -> dict[str, float]:
    """The spread of ``quantity`` across calibrations against their own standard errors."""
    value, se = (rows[c].to_numpy(float) for c in QUANTITIES[quantity])
    row = {
        "n": len(rows),
        "low": value.min(),
        "high": value.max(),
        "sd": value.std(ddof=1) if len(rows) > 1 else math.nan,
        "median_se": float(np.median(se)),
    }
    row["ratio"] = row["sd"] / row["median_se"]
    fit = random_effects(value, se**2) if len(rows) >= 2 else None
    row["tau"] = fit.tau if fit else math.nan
    row["mean"] = fit.coef[0] if fit else math.nan
    row["relative_tau"] = row["tau"] / row["mean"]
    row["ci"] = fit.interval() if fit else (math.nan, math.nan)
    row["pi"] = fit.prediction_interval() if fit else (math.nan, math.nan)
    return row


def state_row(rows: pd.DataFrame, quantity: str, state: str) -> dict[str, float]:
    """``quantity`` regressed on the calibrations' mean ``state``: slope, tau without and with."""
    value, se = (rows[c].to_numpy(float) for c in QUANTITIES[quantity])
    plain = random_effects(value, se**2)
    fit = random_effects(value, se**2, rows[state].to_numpy(float))
    explained = max(0.0, 1 - fit.tau2 / plain.tau2) if plain.tau2 > 0 else math.nan
    return {
        "slope": fit.coef[1],
        "ci": fit.interval(1),
        "tau": plain.tau,
        "tau_res": fit.tau,
        "explained": explained,
        "range": (rows[state].min(), rows[state].max()),
    }


def cross_day_rows(frame: pd.DataFrame, quantity: str, state: str, min_calibrations: int):
    """The state model of one day predicting another day's calibrations, against the day's
    pooled mean: RMS error and the share of calibrations inside each 95% prediction interval."""
    value_column, se_column = QUANTITIES[quantity]
    for mechanism, rows in frame.groupby("mechanism", sort=True):
        for train_day, train in rows.groupby("day", sort=True):
            test = rows[rows["day"] != train_day]
            if len(train) < min_calibrations or test.empty:
                continue
            y, v = train[value_column].to_numpy(float), train[se_column].to_numpy(float) ** 2
            plain = random_effects(y, v)
            fit = random_effects(y, v, train[state].to_numpy(float))
            actual = test[value_column].to_numpy(float)
            by_state = np.array([fit.prediction_interval([x]) for x in test[state]])
            low, high = plain.prediction_interval()
            yield {
                "mechanism": mechanism,
                "train": train_day,
                "n_train": len(train),
                "test": ", ".join(sorted(test["day"].unique())),
                "n_test": len(test),
                "rms_state": float(np.sqrt(np.mean((actual - by_state.mean(axis=1)) ** 2))),
                "rms_plain": float(np.sqrt(np.mean((actual - plain.coef[0]) ** 2))),
                "inside_state": float(
                    np.mean((by_state[:, 0] <= actual) & (actual <= by_state[:, 1]))
                ),
                "inside_plain": float(np.mean((low <= actual) & (actual <= high))),
            }


def _number(value: float, digits: int) -> str:
    return "-" if not math.isfinite(value) else f"{value:,.{digits}f}"


def _pair(pair: tuple[float, float], digits: int) -> str:
    return (
        "-"
        if not all(map(math.isfinite, pair))
        else f"[{pair[0]:,.{digits}f}, {pair[1]:,.{digits}f}]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibrations", nargs="+", type=Path, help="calibration JSON files")
    parser.add_argument(
        "--min-regression",
        type=int,
        default=5,
        help="calibrations needed for a regression on the state (default 5)",
    )
    parser.add_argument(
        "--min-runs",
        type=int,
        default=1,
        help="leave out calibrations of fewer runs (default 1: none)",
    )
    args = parser.parse_args(argv)
    try:
        frame, skipped = calibration_rows(args.calibrations)
    except ExperimentError as exc:
        print(f"costmodel_drift: error: {exc}", file=sys.stderr)
        return 2
    few = frame["runs"] < args.min_runs
    skipped += [
        f"{r.data} {r.mechanism}: {r.runs} runs < --min-runs" for r in frame[few].itertuples()
    ]
    frame = frame[~few]
    print(
        "| data | mechanism | day | started (UTC) | covariate | runs | a | half-width | se | "
        "host busy | others' work | c0 (ns) | a·c0 (ns per copy) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in frame.itertuples():
        print(
            f"| {r.data} | {r.mechanism} | {r.day} | {r.started} | {r.covariate} | {r.runs} | "
            f"{r.a:.3f} | {r.half_width:.3f} | {r.se:.4f} | {r.host_busy:.2f} | "
            f"{r.others:.2f} | {r.c0_ns:,.0f} | {r.extra_ns:,.0f} |"
        )
    for line in skipped:
        print(f"skipped: {line}")
    print()
    print(
        "| mechanism | day | quantity | calibrations | range | sd | median se | sd / se | tau | "
        "tau / mean | pooled mean [95% CI] | 95% prediction interval |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mechanism, day, rows in groups(frame):
        for quantity in QUANTITIES:
            digits = 3 if quantity == "a" else 0
            s = spread_row(rows, quantity)
            print(
                f"| {mechanism} | {day} | {quantity} | {s['n']} | "
                f"{_number(s['low'], digits)}–{_number(s['high'], digits)} | "
                f"{_number(s['sd'], digits)} | {_number(s['median_se'], digits + 1)} | "
                f"{_number(s['ratio'], 1)} | {_number(s['tau'], digits)} | "
                f"{_number(100 * s['relative_tau'], 0)}% | "
                f"{_number(s['mean'], digits)} {_pair(s['ci'], digits)} | "
                f"{_pair(s['pi'], digits)} |"
            )
    print()
    print(
        "| mechanism | day | quantity | state (range, CPUs) | calibrations | slope per CPU "
        "[95% CI] | tau → residual tau | share of tau² explained |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mechanism, day, rows in groups(frame):
        if len(rows) < args.min_regression:
            continue
        for quantity in QUANTITIES:
            digits = 3 if quantity == "a" else 0
            for state, label in STATES.items():
                r = state_row(rows, quantity, state)
                print(
                    f"| {mechanism} | {day} | {quantity} | {label} ({_pair(r['range'], 2)}) | "
                    f"{len(rows)} | {_number(r['slope'], digits)} {_pair(r['ci'], digits)} | "
                    f"{_number(r['tau'], digits)} → {_number(r['tau_res'], digits)} | "
                    f"{_number(100 * r['explained'], 0)}% |"
                )
    print()
    print(
        "| mechanism | quantity | fitted on (calibrations) | predicting (calibrations) | "
        "RMS error, pooled mean | RMS error, host-busy model | inside 95% PI, pooled | "
        "inside 95% PI, host busy |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for quantity in QUANTITIES:
        digits = 3 if quantity == "a" else 0
        for r in cross_day_rows(frame, quantity, "host_busy", args.min_regression):
            print(
                f"| {r['mechanism']} | {quantity} | {r['train']} ({r['n_train']}) | "
                f"{r['test']} ({r['n_test']}) | {_number(r['rms_plain'], digits)} | "
                f"{_number(r['rms_state'], digits)} | {r['inside_plain']:.0%} | "
                f"{r['inside_state']:.0%} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
