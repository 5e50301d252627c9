"""Calibrate until every interval is narrow enough or the time budget is spent.

``cosample calibrate --target-ci 0.1 --max-time 360`` measures in rounds: one paired run per
trial rate of every mechanism still measuring, in a seeded random order. After each round the
harness refits each mechanism's coefficient (for the cpu method the cluster-robust interval the
calibration reports, with the mechanism's covariate when valid, ``ancova.py``; for the throughput
method the cheap covariance interval of ``fit.quick_interval``, the report using the bootstrap)
and retires the mechanisms whose
interval half-width is at most ``max(relative * |a|, absolute)``. A run that would not end
within the budget is not started. The progress bar shows every mechanism's current estimate and
half-width against its target.

Stopping when an interval first looks narrow favours intervals that happen to look narrow (their
spread underestimated by chance), and those cover less than they claim. At least ``min_rounds``
rounds are always measured, and for the cpu method ``MIN_STOPPING_BLOCKS`` (12) runs: on this
machine's real noise, stopping from the sixth run on lowered the 95% interval's coverage by
3 points on average against never stopping early, from the twelfth by 1.3, while stopping early
as often (``research/costmodel_stopping.py``, docs/costmodel.md). The final interval is what
the calibration reports, with whether it met the target.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from cosample.costmodel.ancova import DEFAULT_COVARIATES, MIN_STOPPING_BLOCKS, fit_with_covariate
from cosample.costmodel.errors import FitError, HarnessError
from cosample.costmodel.fit import quick_interval
from cosample.costmodel.harness import Calibrator
from cosample.costmodel.trials import TAIL_S, Trial


@dataclass(frozen=True)
class Target:
    """When a coefficient is known well enough, and how long to try."""

    relative: float = 0.10
    absolute: float = 0.02
    max_time_s: float = 360.0
    min_rounds: int = 2
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not (0 < self.relative < 10 and 0 <= self.absolute < 10):
            raise HarnessError(
                f"target interval: relative must be in (0, 10) and absolute in "
                f"[0, 10), got {self.relative!r} and {self.absolute!r}"
            )
        if not 10 <= self.max_time_s <= 24 * 3600:
            raise HarnessError(f"max time must be 10 s to 24 h, got {self.max_time_s!r} s")
        if not isinstance(self.min_rounds, int) or self.min_rounds < 1:
            raise HarnessError(f"min rounds must be an integer >= 1, got {self.min_rounds!r}")

    def allowed(self, estimate: float) -> float:
        """The largest acceptable half-width for an estimate."""
        return max(self.relative * abs(estimate), self.absolute)

    def met(self, estimate: float, half_width: float) -> bool:
        return (
            math.isfinite(estimate)
            and math.isfinite(half_width)
            and half_width <= self.allowed(estimate)
        )


@dataclass
class Status:
    """Where one mechanism stands: its estimate, half-width, rounds measured, and whether done."""

    estimate: float = math.nan
    half_width: float = math.inf
    rounds: int = 0
    done: bool = False
    seconds: float = 0.0  # wall time of this mechanism's runs

    def text(self, name: str, target: Target) -> str:
        if not math.isfinite(self.estimate):
            return f"{name} (measuring)"
        mark = "done" if self.done else f"need ±{target.allowed(self.estimate):.3f}"
        return f"{name} a={self.estimate:.3f}±{self.half_width:.3f} ({mark})"


def interval_of(
    rows: pd.DataFrame,
    mechanism: str,
    confidence: float,
    covariates: Mapping[str, str | None] | None = None,
) -> tuple[float, float]:
    """``(a, half-width)`` of one mechanism from the rows so far (NaN/inf when not
    identifiable): for the cpu method the very interval the calibration reports (cluster-robust,
    with the mechanism's covariate when valid; from 3 runs on), else the quick normal-theory one."""
    group = rows[rows["mechanism"] == mechanism]
    if group.empty:
        return math.nan, math.inf
    block = pd.factorize(group["block"])[0]
    try:
        if "method" in group.columns and (group["method"] == "cpu").all():
            name = (DEFAULT_COVARIATES if covariates is None else covariates).get(mechanism)
            fit, _ = fit_with_covariate(group, block, name, confidence)
            return fit.coefficient, (fit.ci[1] - fit.ci[0]) / 2
        return quick_interval(
            group["rate"].to_numpy(), group["throughput_pps"].to_numpy(), block, confidence
        )
    except FitError:
        return math.nan, math.inf


@dataclass
class AdaptiveRun:
    """Drives a ``Calibrator`` (paired design) round by round until ``target`` is met."""

    calibrator: Calibrator
    target: Target
    clock: Callable[[], float] = time.monotonic
    status: dict[str, Status] = field(default_factory=dict)
    elapsed_s: float = 0.0
    #: mechanism -> covariate of its fit (None: ``ancova.DEFAULT_COVARIATES``)
    covariates: Mapping[str, str | None] | None = None

    def run(self, show_progress: bool = True) -> pd.DataFrame:
        # rich (not in the lean install) loads only to draw the progress bar
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        c, settings = self.calibrator, self.calibrator.settings
        if settings.design != "paired":
            raise HarnessError("adaptive stopping needs the paired design (one block per run)")
        self.status = {name: Status() for name in settings.mechanisms}
        start = self.clock()
        trial_s = settings.duration_s + TAIL_S + 1.0  # first guess, then the measured mean
        order, runs = 0, 0
        shuffler = random.Random(settings.seed)
        columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        try:
            with Progress(*columns, disable=not show_progress, transient=False) as progress:
                task = progress.add_task("warm-up", total=self.target.max_time_s)
                c._set_active(None, 0.0)
                if settings.warmup_s >= 1:
                    c._load(settings.warmup_s).wait()
                measuring = list(settings.mechanisms)
                while measuring:
                    cells = [(m, r) for m in measuring for r in settings.trial_rates]
                    shuffler.shuffle(cells)
                    for mechanism, rate in cells:
                        if self.clock() - start + trial_s > self.target.max_time_s:
                            measuring = []
                            break
                        status, began = self.status[mechanism], self.clock()
                        c.rows.extend(
                            c.measure_paired(Trial(order, mechanism, rate, status.rounds))
                        )
                        status.seconds += self.clock() - began
                        order, runs = order + 1, runs + 1
                        trial_s = (self.clock() - start) / runs
                        progress.update(
                            task, completed=min(self.clock() - start, self.target.max_time_s)
                        )
                    else:
                        measuring = self._after_round(measuring)
                    progress.update(task, description=self.describe())
        finally:
            for state in c.mechanisms.values():
                state.clear()
        self.elapsed_s = self.clock() - start
        return pd.DataFrame(c.rows)

    def _after_round(self, measuring: list[str]) -> list[str]:
        """Refit the mechanisms measured in the round just finished; keep the unfinished."""
        rows = pd.DataFrame(self.calibrator.rows)
        still = []
        for mechanism in measuring:
            status = self.status[mechanism]
            status.rounds += 1
            status.estimate, status.half_width = interval_of(
                rows, mechanism, self.target.confidence, self.covariates
            )
            status.done = status.rounds >= self._min_rounds(rows) and self.target.met(
                status.estimate, status.half_width
            )
            if not status.done:
                still.append(mechanism)
        return still

    def _min_rounds(self, rows: pd.DataFrame) -> int:
        """The target's minimum, and for the cpu method enough runs per trial rate for the
        cluster-robust interval's width to be worth deciding on (``MIN_STOPPING_BLOCKS``)."""
        if "method" in rows.columns and (rows["method"] == "cpu").all():
            per_round = max(len(self.calibrator.settings.trial_rates), 1)
            return max(self.target.min_rounds, -(-MIN_STOPPING_BLOCKS // per_round))
        return self.target.min_rounds

    def describe(self) -> str:
        return " | ".join(status.text(name, self.target) for name, status in self.status.items())

    def summary(self) -> dict[str, object]:
        """For the calibration's metadata: the target and what each mechanism reached."""
        return {
            "target_ci": {
                "relative": self.target.relative,
                "absolute": self.target.absolute,
                "max_time_s": self.target.max_time_s,
            },
            "measured_s": round(self.elapsed_s, 1),
            "rounds": {name: status.rounds for name, status in self.status.items()},
            "seconds": {name: round(status.seconds, 1) for name, status in self.status.items()},
        }


def target_report(calibration, target: Target) -> tuple[dict[str, bool], list[str]]:
    """Whether each final (bootstrap) interval met the target, and a line per mechanism."""
    met, lines = {}, []
    for name, fit in calibration.fits.items():
        low, high = fit.coefficient_ci
        half = (high - low) / 2
        met[name] = target.met(fit.coefficient, half)
        lines.append(
            f"{name}: a = {fit.coefficient:.3f}, CI half-width {half:.3f} "
            f"{'<=' if met[name] else '>'} {target.allowed(fit.coefficient):.3f}: "
            f"target {'met' if met[name] else 'NOT met'}"
        )
    return met, lines
