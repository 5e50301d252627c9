"""One entry point for every solver, chosen by name as the CLI does."""

from __future__ import annotations

from cosample.planner.baseline import solve_noncollab
from cosample.planner.choices import (ALL_SOLVERS, DEFAULT_LP_BACKEND, DEFAULT_SOLVER, EXACT, LP_SOLVERS,
                                      NONCOLLAB, REDUCED)
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.exact import solve_exact
from cosample.planner.lp import solve_lp
from cosample.planner.solution import Solution

#: Every solver name ``solve`` accepts (``planner.choices``).
SOLVERS = ALL_SOLVERS


def solve(dc: DataCentre, solver: str = DEFAULT_SOLVER, lp_backend: str = DEFAULT_LP_BACKEND,
          time_limit: float | None = None) -> Solution:
    """Plan ``dc`` with ``solver``: exact (default), the reduced or full LP, or the baseline."""
    if solver == EXACT:
        return solve_exact(dc)
    if solver in LP_SOLVERS:
        return solve_lp(dc, reduced=solver == REDUCED, lp_backend=lp_backend,
                        time_limit=time_limit)
    if solver == NONCOLLAB:
        return solve_noncollab(dc)
    raise PlannerError(f"unknown solver {solver!r} (choose from {', '.join(ALL_SOLVERS)})")
