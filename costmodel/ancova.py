"""The cpu method's estimator: per-run baselines, an optional covariate, a cluster-robust interval.

Each phase of a paired run gives a cost per packet ``c``; the law is ``c = c0_b (1 + a s)`` with
a baseline ``c0_b`` per run (block). Under contention the cost of *all* the work moves together
from phase to phase, so a per-phase measurement of work the mechanism does not touch (a
*covariate*, e.g. the iperf3 receiver's CPU per packet) explains much of the noise — the
control-variate / ANCOVA idea (CUPED):

    log c = mu_b + log(1 + a s) + gamma (x - mean_b x) + e,      x = log(covariate per packet)

fitted by least squares. A covariate is valid only if the mechanism does not move it: its own
dependence on ``s`` (``x = nu_b + delta s + u``) is estimated with an interval, and when that
interval excludes 0 the covariate is refused and the fit falls back to none. (The check has the
power of the data: a shift smaller than its interval cannot be excluded, and would bias ``a`` by
``gamma * delta``; the fit reports that bound.)

Interval: phases within a run are correlated (lag-1 autocorrelation about 0.5 here) and the
effect itself varies from run to run, so neither the least-squares covariance nor a residual
bootstrap is honest. The runs are independent, so the interval is cluster-robust: the sandwich
covariance with the scores summed per run. With the 6-20 runs of a calibration the plain
sandwich is biased low, so by default it is the small-sample corrected one of Bell and McCaffrey
(2002), **CR2**: each run's residuals are scaled by ``(I - H_gg)^(-1/2)`` (``H`` the hat matrix of
the linearised fit, a pseudo-inverse because the run's own baseline makes ``I - H_gg`` singular;
Pustejovsky and Tipton 2018), which makes the variance exactly unbiased when the phases' errors
are independent and equal, with Student's t on the **Satterthwaite degrees of freedom** of
that variance under the same working model (Bell-McCaffrey; Imbens and Kolesar 2016). Imbens
and Kolesar's random-effects working model gives the same degrees of freedom here, because the
per-run baselines absorb a run effect. The older CR1 (the sandwich times B/(B-1), t on B - 1
dof) stays available (``small_sample="cr1"``) to refit the files it made.
"""

from __future__ import annotations

import math
import warnings as _warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, least_squares

from cosample.costmodel.errors import FitError

#: Covariates the harness records: name -> (CPU column, column subtracted from it or None).
COVARIATES = {
    "receiver": ("cpu_receiver", None),
    "sender": ("cpu_sender", None),
    "ovs": ("cpu_ovs", None),
    "non_ovs": ("cpu_counted", "cpu_ovs"),
}
#: Which covariate each mechanism uses unless told otherwise (docs/costmodel.md says why:
#: sFlow makes the switch batch more, and the receiver's cost per packet falls with it).
DEFAULT_COVARIATES: dict[str, str | None] = {
    "sflow": None,
    "mirror": "receiver",
    "mirror_vxlan": None,
}
MIN_BLOCKS = 3
#: Adaptive stopping decides on a cluster-robust interval only from this many runs on: with
#: fewer, the interval's own width is too noisy, and stopping on a narrow one favours luck
#: (from 6 runs on, coverage fell 3 points on average on real noise; from 12, 1.3: docs/costmodel.md).
MIN_STOPPING_BLOCKS = 12
#: The small-sample correction of the cluster-robust interval: ``cr2`` (Bell-McCaffrey, the
#: default) or ``cr1`` (B/(B-1), t on B-1 dof; what calibrations before CR2 reported).
SMALL_SAMPLE = ("cr2", "cr1")


def covariate_values(frame: pd.DataFrame, name: str) -> np.ndarray | None:
    """``log(CPUs of the covariate / packets forwarded)`` per row; None when not recorded or
    not positive everywhere (then no covariate can be used)."""
    if name not in COVARIATES:
        raise FitError(f"unknown covariate {name!r}: choose from {', '.join(COVARIATES)}")
    column, minus = COVARIATES[name]
    if (
        column not in frame.columns
        or (minus and minus not in frame.columns)
        or "forwarded_pps" not in frame.columns
    ):
        return None
    cpus = frame[column].to_numpy(float) - (frame[minus].to_numpy(float) if minus else 0.0)
    packets = frame["forwarded_pps"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.log(cpus / packets)
    return values if np.all(np.isfinite(values)) else None


@dataclass(frozen=True)
class CovariateCheck:
    """Whether a covariate may be used: the mechanism's effect on it, and what it bought."""

    name: str
    used: bool
    reason: str
    shift: float = math.nan  # delta: log-change of the covariate per unit rate
    shift_ci: tuple[float, float] = (math.nan, math.nan)
    gamma: float = math.nan  # slope of log cost on the covariate
    bias_bound: float = math.nan  # |gamma| * the largest shift the interval allows
    coefficient_without: float = math.nan
    ci_without: tuple[float, float] = (math.nan, math.nan)

    def to_dict(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "name": self.name,
            "used": self.used,
            "reason": self.reason,
            "shift": clean(self.shift),
            "shift_ci": [clean(x) for x in self.shift_ci],
            "gamma": clean(self.gamma),
            "bias_bound": clean(self.bias_bound),
            "coefficient_without": clean(self.coefficient_without),
            "ci_without": [clean(x) for x in self.ci_without],
        }


@dataclass(frozen=True)
class ContrastFit:
    """``a`` with its cluster-robust interval, the per-run capacities' mean and interval."""

    coefficient: float
    se: float
    ci: tuple[float, float]
    capacity: float
    capacity_se: float
    capacity_ci: tuple[float, float]
    residual_sd: float  # of log cost: relative noise per phase
    r_squared: float  # within runs
    n_blocks: int
    fitted_log: np.ndarray  # mu_b + log(1 + a s) per row (covariate at its run mean)
    gamma: float = math.nan
    dof: float = math.nan  # of the Student t the interval uses
    small_sample: str = "cr2"

    def describe(self) -> str:
        """How the interval was made, for the calibration JSON's ``ci_method``."""
        if self.small_sample == "cr1":
            return (
                f"cluster-robust (CR1) over {self.n_blocks} runs, Student t "
                f"({self.n_blocks - 1} dof)"
            )
        return (
            f"cluster-robust (CR2, Bell-McCaffrey) over {self.n_blocks} runs, Student t "
            f"({self.dof:.1f} dof, Satterthwaite)"
        )


def fit_contrast(
    rate: np.ndarray,
    throughput: np.ndarray,
    block: np.ndarray,
    covariate: np.ndarray | None = None,
    confidence: float = 0.95,
    small_sample: str = "cr2",
) -> ContrastFit:
    """Fit ``log T = -mu_b - log(1 + a s) - gamma (x - mean_b x)`` (``T`` = budget / cost);
    ``block`` numbers the runs 0..B-1. Raises FitError when the data cannot identify it."""
    # scipy.stats takes seconds to import: only when a fit is made
    from scipy.stats import t as student

    _check_small_sample(small_sample)
    rate = np.asarray(rate, float)
    block = np.asarray(block)
    throughput = np.asarray(throughput, float)
    n_blocks = int(block.max()) + 1 if len(block) else 0
    if n_blocks < MIN_BLOCKS:
        raise FitError(f"{n_blocks} run(s): a cluster-robust interval needs at least {MIN_BLOCKS}")
    if np.any(throughput <= 0) or not np.all(np.isfinite(throughput)):
        raise FitError("every phase needs a positive cost per packet")
    if len(np.unique(rate)) < 2:
        raise FitError("a single rate cannot identify a")
    y = -np.log(throughput)
    counts = np.bincount(block, minlength=n_blocks)
    x = None
    if covariate is not None:
        covariate = np.asarray(covariate, float)
        x = covariate - (np.bincount(block, weights=covariate, minlength=n_blocks) / counts)[block]
    params, jacobian, residuals = _solve(rate, y, block, n_blocks, x)
    k = 1 if x is None else 2
    n = len(y)
    if n <= n_blocks + k:
        raise FitError(f"{n} phases cannot identify {n_blocks + k} parameters")
    variance, t_dof = cluster_variance(jacobian, residuals, block, n_blocks, small_sample)
    se = math.sqrt(variance)
    quantile = float(student.ppf(0.5 + confidence / 2, t_dof))
    a = float(params[0])
    capacities = np.exp(-params[k:])
    capacity = float(np.mean(capacities))
    capacity_se = float(np.std(capacities, ddof=1) / math.sqrt(n_blocks))
    runs_quantile = float(student.ppf(0.5 + confidence / 2, n_blocks - 1))  # mean of B runs
    dof = max(n - n_blocks - k, 1)
    block_means = np.bincount(block, weights=y, minlength=n_blocks) / counts
    within = float(np.sum((y - block_means[block]) ** 2))
    ssr = float(residuals @ residuals)
    fitted = params[k:][block] + np.log1p(a * rate)
    return ContrastFit(
        coefficient=a,
        se=se,
        ci=(a - quantile * se, a + quantile * se),
        capacity=capacity,
        capacity_se=capacity_se,
        capacity_ci=(
            capacity - runs_quantile * capacity_se,
            capacity + runs_quantile * capacity_se,
        ),
        residual_sd=math.sqrt(ssr / dof),
        r_squared=1 - ssr / within if within > 0 else math.nan,
        n_blocks=n_blocks,
        fitted_log=fitted,
        gamma=float(params[1]) if x is not None else math.nan,
        dof=t_dof,
        small_sample=small_sample,
    )


def covariate_shift(
    rate: np.ndarray,
    covariate: np.ndarray,
    block: np.ndarray,
    confidence: float = 0.95,
    small_sample: str = "cr2",
) -> tuple[float, tuple[float, float]]:
    """The mechanism's effect on the covariate, ``delta`` in ``x = nu_b + delta s + u``, with
    the same cluster-robust interval as ``a``."""
    # scipy.stats takes seconds to import: only when a fit is made
    from scipy.stats import t as student

    _check_small_sample(small_sample)
    rate, x, block = np.asarray(rate, float), np.asarray(covariate, float), np.asarray(block)
    n_blocks = int(block.max()) + 1
    counts = np.bincount(block, minlength=n_blocks)
    s_c = rate - (np.bincount(block, weights=rate, minlength=n_blocks) / counts)[block]
    x_c = x - (np.bincount(block, weights=x, minlength=n_blocks) / counts)[block]
    denominator = float(s_c @ s_c)
    if denominator <= 0:
        raise FitError("the rate does not vary within any run")
    delta = float(s_c @ x_c) / denominator
    residuals = x_c - delta * s_c
    design = np.zeros((len(x), 1 + n_blocks))
    design[:, 0] = rate
    design[np.arange(len(x)), 1 + block] = 1.0
    variance, dof = cluster_variance(design, residuals, block, n_blocks, small_sample)
    half = float(student.ppf(0.5 + confidence / 2, dof)) * math.sqrt(variance)
    return delta, (delta - half, delta + half)


def cluster_variance(
    design: np.ndarray,
    residuals: np.ndarray,
    block: np.ndarray,
    n_blocks: int,
    small_sample: str = "cr2",
) -> tuple[float, float]:
    """Cluster-robust variance of the first coefficient of a least-squares fit with Jacobian
    ``design`` (its per-run baseline columns included) and its degrees of freedom.

    ``cr1``: ``B/(B-1) sum_g (w_g' e_g)^2`` with ``w = X (X'X)^-1 c``, B - 1 dof.
    ``cr2``: ``sum_g (w_g' A_g e_g)^2`` with ``A_g = (I - H_gg)^(+1/2)``; dof
    ``tr(G'G)^2 / tr((G'G)^2)``, ``G``'s column g being ``(I - H)[:, g] A_g w_g`` — the
    Satterthwaite approximation of the variance's distribution when the errors are iid."""
    _check_small_sample(small_sample)
    bread = np.linalg.pinv(design.T @ design)
    weights = design @ bread[:, 0]  # the coefficient is weights' y
    members = [np.flatnonzero(block == g) for g in range(n_blocks)]
    if small_sample == "cr1":
        per_block = np.array([weights[m] @ residuals[m] for m in members])
        return float(per_block @ per_block) * n_blocks / (n_blocks - 1), float(n_blocks - 1)
    hat = design @ bread @ design.T
    scaled = np.zeros((len(residuals), n_blocks))  # column g: A_g w_g on run g's rows
    variance = 0.0
    for g, m in enumerate(members):
        values, vectors = np.linalg.eigh(np.eye(len(m)) - hat[np.ix_(m, m)])
        keep = values > 1e-10 * max(float(values.max()), 1e-300)
        adjust = (vectors[:, keep] / np.sqrt(values[keep])) @ vectors[:, keep].T
        scaled[m, g] = adjust @ weights[m]
        variance += float(scaled[m, g] @ residuals[m]) ** 2
    spread = scaled - hat @ scaled  # (I - H) A w, per run
    gram = spread.T @ spread
    dof = float(np.trace(gram) ** 2 / np.sum(gram * gram)) if np.any(gram) else math.nan
    return variance, dof


def _check_small_sample(name: str) -> None:
    if name not in SMALL_SAMPLE:
        raise FitError(
            f"small-sample correction must be one of {', '.join(SMALL_SAMPLE)}, got {name!r}"
        )


def fit_with_covariate(
    frame: pd.DataFrame,
    block: np.ndarray,
    name: str | None,
    confidence: float = 0.95,
    small_sample: str = "cr2",
) -> tuple[ContrastFit, CovariateCheck | None]:
    """The fit with covariate ``name`` when it is recorded and the mechanism does not move it,
    else without; the check says which and why."""
    rate = frame["rate"].to_numpy(float)
    throughput = frame["throughput_pps"].to_numpy(float)
    plain = fit_contrast(rate, throughput, block, None, confidence, small_sample)
    if name is None:
        return plain, None
    values = covariate_values(frame, name)
    if values is None:
        return plain, CovariateCheck(
            name,
            False,
            f"not recorded (needs {COVARIATES[name][0]} "
            f"and forwarded_pps, positive in every phase)",
        )
    delta, (low, high) = covariate_shift(rate, values, block, confidence, small_sample)
    adjusted = fit_contrast(rate, throughput, block, values, confidence, small_sample)
    bound = abs(adjusted.gamma) * max(abs(low), abs(high))
    common: dict[str, Any] = dict(  # (CovariateCheck's fields either way)
        shift=delta,
        shift_ci=(low, high),
        gamma=adjusted.gamma,
        bias_bound=bound,
        coefficient_without=plain.coefficient,
        ci_without=plain.ci,
    )
    if low > 0 or high < 0:
        return plain, CovariateCheck(
            name,
            False,
            f"refused: the mechanism moves it ({delta:+.3f} per unit rate in log, "
            f"{confidence:.0%} CI [{low:+.3f}, {high:+.3f}] excludes 0)",
            **common,
        )
    return adjusted, CovariateCheck(
        name,
        True,
        f"used: the mechanism's effect on it, {delta:+.3f} [{low:+.3f}, {high:+.3f}], "
        f"is not distinguishable from 0",
        **common,
    )


def _solve(
    rate: np.ndarray, y: np.ndarray, block: np.ndarray, n_blocks: int, x: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares for ``[a, (gamma,) mu_0..mu_{B-1}]``; returns params, Jacobian, residuals."""
    k = 1 if x is None else 2
    rows = np.arange(len(y))

    def model(p: np.ndarray) -> np.ndarray:
        value = p[k:][block] + np.log1p(p[0] * rate)
        return value + p[1] * x if x is not None else value

    def jacobian(p: np.ndarray) -> np.ndarray:
        matrix = np.zeros((len(y), k + n_blocks))
        matrix[:, 0] = rate / (1.0 + p[0] * rate)
        if x is not None:
            matrix[:, 1] = x
        matrix[rows, k + block] = 1.0
        return matrix

    start = np.zeros(k + n_blocks)
    start[k:] = np.bincount(block, weights=y, minlength=n_blocks) / np.bincount(
        block, minlength=n_blocks
    )
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore", OptimizeWarning)
        _warnings.simplefilter("ignore", RuntimeWarning)
        result = least_squares(
            lambda p: model(p) - y,
            start,
            jac=jacobian,
            method="trf",
            bounds=(
                np.r_[-0.999, np.full(k - 1 + n_blocks, -np.inf)],
                np.full(k + n_blocks, np.inf),
            ),
        )
    if not result.success or not np.all(np.isfinite(result.x)):
        raise FitError(f"least squares did not converge: {result.message}")
    return result.x, jacobian(result.x), y - model(result.x)
