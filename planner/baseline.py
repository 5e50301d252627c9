"""The non-collaborative baseline: every server samples what its own spare capacity allows."""

from __future__ import annotations

import time

import numpy as np

from cosample.planner.choices import NONCOLLAB
from cosample.planner.datacentre import DataCentre
from cosample.planner.distinct import choose
from cosample.planner.exact import lp_bound
from cosample.planner.problem import Problem, build_problem
from cosample.planner.solution import Bounds, Solution, empty_mirrors


def local_only_pps(problem: Problem) -> np.ndarray:
    """min(U_i, spare_i / A_i) per server: sampling alone, within its planned capacity."""
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(problem.own_pps > 0, problem.spare_pps / problem.sample_cost, 0.0)
    return np.minimum(problem.own_pps, alone)


def noncollab_pps(dc: DataCentre) -> float:
    """Total traffic collected when no server mirrors, as the paper counts it (no headroom)."""
    return float(local_only_pps(build_problem(dc, margin=0.0)).sum())


def solve_noncollab(problem: Problem) -> Solution:
    """The baseline as a plan-able solution (no mirrors), with collaboration's bounds beside it."""
    started = time.perf_counter()
    bounds = Bounds(lp=lp_bound(problem), envelope=choose(problem).envelope,
                    method="no collaboration", optimal=False)
    return _noncollab(problem, bounds, started)


def noncollab_applied_pps(problem: Problem) -> float:
    """Distinct packets the baseline collects after 1-in-N (``Solution.baseline_pps``): its
    plan alone, without the bounds ``solve_noncollab`` states beside it (a knapsack and the
    LP bound, 0.12 s at 10^6 servers, which a plan's summary never reads for the baseline)."""
    unbounded = Bounds(lp=float("nan"), envelope=float("nan"), method="no collaboration",
                       optimal=False)
    return _noncollab(problem, unbounded, time.perf_counter()).applied.collected_pps


def _noncollab(problem: Problem, bounds: Bounds, started: float) -> Solution:
    return Solution(NONCOLLAB, local_only_pps(problem), *empty_mirrors(), problem=problem,
                    bounds=bounds, seconds=time.perf_counter() - started)
