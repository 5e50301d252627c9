"""The non-collaborative baseline: every server samples what its own spare capacity allows."""

from __future__ import annotations

import time

import numpy as np

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.planner.choices import NONCOLLAB
from cosample.planner.datacentre import DataCentre
from cosample.planner.distinct import choose
from cosample.planner.exact import lp_bound
from cosample.planner.problem import Problem, build_problem
from cosample.planner.realise import sample_probability, sampling_interval
from cosample.planner.solution import Bounds, Solution, empty_mirrors


def local_only_pps(problem: Problem) -> np.ndarray:
    """min(U_i, spare_i / A_i) per server: sampling alone, within its planned capacity."""
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(problem.own_pps > 0, problem.spare_pps / problem.sample_cost, 0.0)
    return np.minimum(problem.own_pps, alone)


def sample_alone(problem: Problem) -> tuple[np.ndarray, np.ndarray | None]:
    """Each server's own packets sampled alone, as applied (1-in-N, or K/65535 where the sample
    action may be used and collects more), and where the sample action does; None: sFlow only."""
    local = local_only_pps(problem)
    if problem.can_sample is None:
        return local, None
    assert problem.alpha_sample is not None  # (``can_sample`` is None without it)
    own = problem.own_pps
    with np.errstate(divide="ignore", invalid="ignore"):
        flow = np.where(own > 0, local / own, 0.0)
        interval = sampling_interval(flow)
        flow = np.where(interval > 0, 1.0 / np.maximum(interval, 1), 0.0)
        sample = np.where(
            own > 0,
            problem.spare_pps
            / (np.nan_to_num(problem.alpha_sample, nan=np.inf) * problem.bridge_pps),
            0.0,
        )
    sample = sample_probability(np.nan_to_num(sample)) / SAMPLE_PROBABILITY_SCALE
    better = problem.can_sample & (sample > flow)
    return own * np.where(better, sample, flow), better


def noncollab_pps(dc: DataCentre) -> float:
    """Total traffic collected when no server mirrors, as the paper counts it (no headroom)."""
    return float(local_only_pps(build_problem(dc, margin=0.0)).sum())


def solve_noncollab(problem: Problem) -> Solution:
    """The baseline as a plan-able solution (no mirrors), with collaboration's bounds beside it."""
    started = time.perf_counter()
    bounds = Bounds(
        lp=lp_bound(problem),
        envelope=choose(problem).envelope,
        method="no collaboration",
        optimal=False,
    )
    return _noncollab(problem, bounds, started)


def noncollab_applied_pps(problem: Problem) -> float:
    """Distinct packets the baseline collects as applied (``stated.baseline_pps``): its
    plan alone, without the bounds ``solve_noncollab`` states beside it (a knapsack and the
    LP bound, costly at 10^6 servers, which a plan's summary never reads for the baseline)."""
    unbounded = Bounds(
        lp=float("nan"), envelope=float("nan"), method="no collaboration", optimal=False
    )
    return _noncollab(problem, unbounded, time.perf_counter()).applied.collected_pps


def _noncollab(problem: Problem, bounds: Bounds, started: float) -> Solution:
    local, sample_hosts = sample_alone(problem)
    return Solution(
        NONCOLLAB,
        local,
        *empty_mirrors(),
        problem=problem,
        bounds=bounds,
        seconds=time.perf_counter() - started,
        sample_hosts=sample_hosts,
    )
