"""Fit the cost law ``T(s) = T0 / (1 + a*s)`` per mechanism, with uncertainty and warnings.

``CostModelFit`` follows scikit-learn's conventions: ``__init__`` only stores settings, ``fit``
validates the tidy table and returns ``self``, learned values end in ``_``. The outcome is an
immutable ``Calibration`` (one ``MechanismFit`` per mechanism, ``fitted.py``) with a text report and
a JSON-safe summary whose top-level ``alpha`` (sflow), ``beta`` (mirror) and ``capacity_pps`` the
planner reads.

Uncertainty: standard errors from the least-squares covariance, confidence intervals from a
residual bootstrap (refit on fitted values plus resampled, leverage-free rescaled residuals),
so they stay usable with one measurement per rate.
"""

from __future__ import annotations

import math
import warnings as _warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, least_squares

from cosample.costmodel.ancova import DEFAULT_COVARIATES, MIN_BLOCKS, fit_with_covariate
from cosample.costmodel.calibration_file import REQUIRED_ROLES, ROLE_OF_MECHANISM
from cosample.costmodel.data import validate_measurements
from cosample.costmodel.errors import FitError
from cosample.costmodel.fitted import Calibration, MechanismFit

MIN_POINTS = 3
#: ``a`` stays above -1 so that T(s) is finite on [0, 1].
LOWER_BOUND_A = -0.999
#: ``CostModelFit(interval=...)``: auto, the cpu method's cluster-robust fit (CR2; or CR1, what
#: calibrations made before CR2 reported), or the residual bootstrap.
INTERVALS = ("auto", "cluster", "cluster-cr1", "bootstrap")


class CostModelFit:
    """Estimator of the cost law per mechanism.

    Parameters: ``confidence`` of the intervals, ``n_bootstrap`` resamples, ``random_state``
    seeding the bootstrap, ``min_r_squared`` below which a fit is flagged, ``blocks``: give
    each block of measurements (``block`` column: e.g. one iperf3 run alternating rate 0 and
    rate s) its own capacity, so slow drift of the host's load cancels out of ``a``
    (None: when the column exists); ``alpha_from``/``beta_from``: the mechanisms whose
    coefficients become the planner's ``alpha`` and ``beta``; ``interval``: ``cluster`` fits
    cpu-method runs in logs with a per-run baseline, a covariate and a cluster-robust interval
    (``ancova.py``; CR2 with Bell-McCaffrey dof, ``cluster-cr1`` the older CR1), ``bootstrap`` the law in throughput with the residual bootstrap, ``auto``
    the first for cpu-method data with 3 or more runs, else the second; ``covariates``:
    mechanism -> covariate name or None (default ``ancova.DEFAULT_COVARIATES``).
    """

    def __init__(
        self,
        confidence: float = 0.95,
        n_bootstrap: int = 1000,
        random_state: int = 0,
        min_r_squared: float = 0.9,
        blocks: bool | None = None,
        alpha_from: str = "sflow",
        beta_from: str = "mirror",
        interval: str = "auto",
        covariates: Mapping[str, str | None] | None = None,
    ) -> None:
        self.interval = interval
        self.covariates = covariates
        self.alpha_from = alpha_from
        self.beta_from = beta_from
        self.blocks = blocks
        self.confidence = confidence
        self.n_bootstrap = n_bootstrap
        self.random_state = random_state
        self.min_r_squared = min_r_squared

    def fit(self, data: pd.DataFrame, metadata: Mapping[str, Any] | None = None) -> "CostModelFit":
        """Fit every mechanism in ``data`` (tidy: mechanism, rate, throughput_pps); returns self."""
        if not 0 < self.confidence < 1:
            raise FitError(f"confidence must be in (0, 1), got {self.confidence!r}")
        if not isinstance(self.n_bootstrap, int) or self.n_bootstrap < 50:
            raise FitError(f"n_bootstrap must be an integer >= 50, got {self.n_bootstrap!r}")
        frame = validate_measurements(data)
        if "protocol" in frame.columns and frame["protocol"].nunique() > 1:
            raise FitError(
                f"data mix protocols {', '.join(sorted(map(str, frame['protocol'].unique())))}: "
                f"capacities differ, so fit one protocol at a time (--protocol)"
            )
        if "method" in frame.columns and frame["method"].nunique() > 1:
            raise FitError(
                f"data mix methods {', '.join(sorted(map(str, frame['method'].unique())))}: "
                f"their capacities mean different things, so fit one at a time"
            )
        rng = np.random.default_rng(self.random_state)
        fits = {}
        use_blocks = self.blocks if self.blocks is not None else "block" in frame.columns
        if use_blocks and "block" not in frame.columns:
            raise FitError("blocks=True but the data have no 'block' column")
        if self.interval not in INTERVALS:
            raise FitError(f"interval must be {', '.join(INTERVALS)}, got {self.interval!r}")
        for mechanism, group in frame.groupby("mechanism", sort=True):
            block = (
                pd.factorize(group["block"])[0]
                if use_blocks
                else np.zeros(len(group), dtype=np.int64)
            )
            if self._clustered(group, use_blocks, block):
                fits[mechanism] = self._fit_cluster(str(mechanism), group, block)
                continue
            fits[mechanism] = self._fit_one(
                str(mechanism),
                group["rate"].to_numpy(),
                group["throughput_pps"].to_numpy(),
                block,
                rng,
            )
        self.results_ = fits
        if self.alpha_from == self.beta_from:
            raise FitError(f"alpha and beta cannot both come from {self.alpha_from!r}")
        roles = {self.alpha_from: "alpha", self.beta_from: "beta"}
        roles.update(
            {
                mechanism: role
                for mechanism, role in ROLE_OF_MECHANISM.items()
                if role not in REQUIRED_ROLES and mechanism in fits and mechanism not in roles
            }
        )
        self.calibration_ = Calibration(
            fits, self.confidence, self.n_bootstrap, metadata or {}, roles
        )
        self.alpha_ = self.calibration_.alpha
        self.beta_ = self.calibration_.beta
        self.capacity_pps_ = self.calibration_.capacity_pps
        return self

    def predict(self, mechanism: str, rate: np.ndarray | float) -> np.ndarray:
        if not hasattr(self, "results_"):
            raise FitError("this CostModelFit is not fitted yet: call fit(data) first")
        if mechanism not in self.results_:
            raise FitError(f"no fit for mechanism {mechanism!r} (have {', '.join(self.results_)})")
        return self.results_[mechanism].predict(rate)

    # one mechanism -----------------------------------------------------------------------
    def _clustered(self, group: pd.DataFrame, use_blocks: bool, block: np.ndarray) -> bool:
        cpu = "method" in group.columns and bool((group["method"] == "cpu").all())
        if self.interval == "bootstrap" or (self.interval == "auto" and not cpu):
            return False
        enough = use_blocks and int(block.max()) + 1 >= MIN_BLOCKS
        if self.interval.startswith("cluster") and not enough:
            raise FitError(
                f"a cluster-robust interval needs a block column and at least "
                f"{MIN_BLOCKS} blocks (runs)"
            )
        return enough

    def _fit_cluster(self, mechanism: str, group: pd.DataFrame, block: np.ndarray) -> MechanismFit:
        """The cpu method's fit: log cost, per-run baselines, a covariate when valid."""
        covariates = DEFAULT_COVARIATES if self.covariates is None else self.covariates
        small_sample = "cr1" if self.interval == "cluster-cr1" else "cr2"
        fit, check = fit_with_covariate(
            group, block, covariates.get(mechanism), self.confidence, small_sample
        )
        rate, pps = group["rate"].to_numpy(float), group["throughput_pps"].to_numpy(float)
        capacities = np.exp(-(fit.fitted_log - np.log1p(fit.coefficient * rate)))
        residual_sd = fit.residual_sd * fit.capacity
        notes = _diagnose(
            rate,
            pps * fit.capacity / capacities,
            fit.coefficient,
            fit.ci,
            fit.r_squared,
            residual_sd,
            self.min_r_squared,
            self.confidence,
            failed=0,
            total=1,
        )
        quantile_note = f"{fit.describe()}, log cost" + (
            f", covariate {check.name}" if check and check.used else ""
        )
        return MechanismFit(
            mechanism=mechanism,
            coefficient=fit.coefficient,
            coefficient_se=fit.se,
            coefficient_ci=fit.ci,
            capacity_pps=fit.capacity,
            capacity_se=fit.capacity_se,
            capacity_ci=fit.capacity_ci,
            r_squared=fit.r_squared,
            residual_sd=residual_sd,
            n_points=len(rate),
            rates=tuple(float(r) for r in np.unique(rate)),
            n_blocks=fit.n_blocks,
            warnings=tuple(notes),
            ci_method=quantile_note,
            covariate=check.to_dict() if check else None,
        )

    def _fit_one(
        self,
        mechanism: str,
        rate: np.ndarray,
        pps: np.ndarray,
        block: np.ndarray,
        rng: np.random.Generator,
    ) -> MechanismFit:
        distinct = np.unique(rate)
        n_blocks = int(block.max()) + 1
        if len(rate) < MIN_POINTS or len(distinct) < 2 or len(rate) <= n_blocks + 1:
            raise FitError(
                f"mechanism {mechanism!r}: {len(rate)} measurement(s) at "
                f"{len(distinct)} distinct rate(s) in {n_blocks} block(s); the fit "
                f"needs at least {MIN_POINTS} measurements at 2 or more rates, and "
                f"more measurements than blocks + 1"
            )
        scale = float(np.mean(pps))
        if scale <= 0:
            raise FitError(
                f"mechanism {mechanism!r}: every measurement is 0 pps; nothing was "
                f"forwarded, so there is no throughput to model"
            )
        y = pps / scale
        params, jacobian, residuals = _least_squares(rate, y, block, _start(rate, y, block))
        dof = len(rate) - len(params)
        sigma2 = float(residuals @ residuals) / dof
        try:
            covariance = np.linalg.inv(jacobian.T @ jacobian) * sigma2
        except np.linalg.LinAlgError:
            covariance = np.full((len(params), len(params)), np.nan)
        coefficient_se = math.sqrt(covariance[0, 0]) if covariance[0, 0] >= 0 else math.nan
        capacity_se = math.sqrt(max(covariance[1:, 1:].sum(), 0.0)) / n_blocks * scale
        boot = self._bootstrap(rate, y, block, params, residuals, rng)
        tail = (1 - self.confidence) / 2 * 100
        ci = (
            np.percentile(boot, [tail, 100 - tail], axis=0)
            if len(boot)
            else np.full((2, 2), np.nan)
        )
        # R^2 of the law within blocks: how much of the variation not due to drift it explains
        block_means = np.bincount(block, weights=y) / np.bincount(block)
        total = float(np.sum((y - block_means[block]) ** 2))
        r_squared = 1 - float(residuals @ residuals) / total if total > 0 else math.nan
        coefficient, capacities = float(params[0]), params[1:] * scale
        capacity = float(np.mean(capacities))
        residual_sd = math.sqrt(sigma2) * scale
        adjusted = pps * capacity / capacities[block]  # block drift removed, for the shape checks
        notes = _diagnose(
            rate,
            adjusted,
            coefficient,
            (ci[0, 0], ci[1, 0]),
            r_squared,
            residual_sd,
            self.min_r_squared,
            self.confidence,
            failed=self.n_bootstrap - len(boot),
            total=self.n_bootstrap,
        )
        return MechanismFit(
            mechanism=mechanism,
            coefficient=coefficient,
            coefficient_se=coefficient_se,
            coefficient_ci=(float(ci[0, 0]), float(ci[1, 0])),
            capacity_pps=capacity,
            capacity_se=capacity_se,
            capacity_ci=(float(ci[0, 1] * scale), float(ci[1, 1] * scale)),
            r_squared=float(r_squared),
            residual_sd=residual_sd,
            n_points=int(len(rate)),
            rates=tuple(float(r) for r in distinct),
            n_blocks=n_blocks,
            warnings=tuple(notes),
        )

    def _bootstrap(
        self,
        rate: np.ndarray,
        y: np.ndarray,
        block: np.ndarray,
        params: np.ndarray,
        residuals: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """(a, mean capacity) refitted on fitted values plus resampled rescaled residuals."""
        n = len(rate)
        fitted = y - residuals
        centred = (residuals - residuals.mean()) * math.sqrt(n / max(n - len(params), 1))
        draws = []
        for _ in range(self.n_bootstrap):
            sample = fitted + rng.choice(centred, size=n, replace=True)
            try:
                estimate, _, _ = _least_squares(rate, sample, block, params)
            except FitError:
                continue
            draws.append((estimate[0], float(np.mean(estimate[1:]))))
        return np.array(draws).reshape(-1, 2)


def quick_interval(
    rate: np.ndarray, pps: np.ndarray, block: np.ndarray, confidence: float = 0.95
) -> tuple[float, float]:
    """``(a, half-width)`` of the normal-theory interval from the least-squares covariance:
    cheap enough to decide, between runs, whether to keep measuring (the reported interval is
    the bootstrap's). ``block`` numbers the runs 0..B-1. Raises FitError when not identifiable."""
    # scipy.stats takes seconds to import: only when a fit is made
    from scipy.stats import t as student

    rate, y, block = np.asarray(rate, float), np.asarray(pps, float), np.asarray(block)
    n_params = int(block.max()) + 2
    if len(rate) <= n_params or len(np.unique(rate)) < 2 or np.mean(y) <= 0:
        raise FitError(f"{len(rate)} measurements cannot identify {n_params} parameters")
    y = y / np.mean(y)
    params, jacobian, residuals = _least_squares(rate, y, block, _start(rate, y, block))
    dof = len(rate) - n_params
    sigma2 = float(residuals @ residuals) / dof
    try:
        variance = float(np.linalg.inv(jacobian.T @ jacobian)[0, 0]) * sigma2
    except np.linalg.LinAlgError:
        raise FitError("singular least-squares problem") from None
    quantile = float(student.ppf(0.5 + confidence / 2, dof))
    return float(params[0]), quantile * math.sqrt(max(variance, 0.0))


def _start(rate: np.ndarray, y: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Start values: ``a`` from the linearised law ``1/T = 1/T0 + (a/T0) s``, then each
    block's capacity from its mean."""
    positive = y > 0  # a stall (0 pps) is data for the fit, not for the linearisation
    slope, intercept = (
        np.polyfit(rate[positive], 1.0 / y[positive], 1)
        if len(np.unique(rate[positive])) >= 2
        else (0.0, 0.0)
    )
    a = max(slope / intercept, LOWER_BOUND_A / 2) if intercept > 0 else 0.0
    undone = y * (1.0 + a * rate)
    capacities = np.bincount(block, weights=undone) / np.bincount(block)
    return np.concatenate(([a], capacities))


def _least_squares(
    rate: np.ndarray, y: np.ndarray, block: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levenberg-Marquardt with the analytic Jacobian for ``y = T0[block] / (1 + a*rate)``;
    parameters ``[a, T0_0, ..., T0_{B-1}]``; ``a`` must end above -1 and every T0 above 0."""
    rows = np.arange(len(rate))

    def residual(p: np.ndarray) -> np.ndarray:
        return y - p[1:][block] / (1.0 + p[0] * rate)

    def jacobian(p: np.ndarray) -> np.ndarray:
        denominator = 1.0 + p[0] * rate
        matrix = np.zeros((len(rate), len(p)))
        matrix[:, 0] = p[1:][block] * rate / denominator**2
        matrix[rows, 1 + block] = -1.0 / denominator
        return matrix

    start = np.array(start, dtype=float)
    start[0] = max(start[0], LOWER_BOUND_A / 2)
    start[1:] = np.maximum(start[1:], 1e-9)
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore", OptimizeWarning)
        _warnings.simplefilter("ignore", RuntimeWarning)
        result = least_squares(residual, start, jac=jacobian, method="lm")
    if (
        not result.success
        or not np.all(np.isfinite(result.x))
        or result.x[0] <= LOWER_BOUND_A
        or np.any(result.x[1:] <= 0)
    ):
        raise FitError(f"least squares did not converge to T0 > 0, a > -1: {result.message}")
    return result.x, jacobian(result.x), residual(result.x)


def _diagnose(
    rate: np.ndarray,
    pps: np.ndarray,
    coefficient: float,
    coefficient_ci: tuple[float, float],
    r_squared: float,
    residual_sd: float,
    min_r_squared: float,
    confidence: float,
    failed: int,
    total: int,
) -> list[str]:
    """Plain-language warnings when the data do not support the law."""
    notes = []
    if not math.isfinite(r_squared) or r_squared < min_r_squared:
        notes.append(
            f"R^2 = {r_squared:.3f} < {min_r_squared:g}: the law explains little of the "
            f"variation (noise large beside the effect; run longer or repeat more)"
        )
    low, high = coefficient_ci
    if math.isfinite(low) and low <= 0 <= high:
        notes.append(
            f"a is not distinguishable from 0 at {confidence:.0%} "
            f"(CI [{low:.3f}, {high:.3f}]): no measurable cost"
        )
    if coefficient < 0:
        notes.append(
            f"a = {coefficient:.3f} < 0: throughput rises with the rate; the data show no cost"
        )
    means = pd.Series(pps).groupby(rate).agg(["mean", "count", "var"])
    # pure error (spread of repeats at one rate) when there are repeats, else the residual sd
    repeat_dof = float((means["count"] - 1).sum())
    noise_sd = (
        math.sqrt(float(((means["count"] - 1) * means["var"].fillna(0)).sum()) / repeat_dof)
        if repeat_dof > 0
        else residual_sd
    )
    if len(means) < 3:
        notes.append(f"only {len(means)} distinct rates: the shape of the curve is not checked")
    elif math.isfinite(noise_sd) and noise_sd > 0:
        for (r0, m0), (r1, m1) in zip(means.iterrows(), list(means.iterrows())[1:]):
            rise = m1["mean"] - m0["mean"]
            allowance = 2 * noise_sd * math.sqrt(1 / m0["count"] + 1 / m1["count"])
            if rise > allowance:
                notes.append(
                    f"non-monotone: mean throughput rises by {rise:,.0f} pps from rate "
                    f"{r0:g} to {r1:g} (more than 2 standard errors)"
                )
    if failed > total // 10:
        notes.append(f"{failed} of {total} bootstrap refits failed; the interval is unreliable")
    return notes
