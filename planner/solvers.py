"""One entry point for every solver, chosen by name as the CLI does."""

from __future__ import annotations

from cosample.planner.baseline import solve_noncollab
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.exact import solve_exact
from cosample.planner.lp import solve_lp
from cosample.planner.solution import Solution

SOLVERS = ("exact", "reduced", "full", "noncollab")


def solve(dc: DataCentre, solver: str = "exact", lp_backend: str = "highs",
          time_limit: float | None = None) -> Solution:
    """Plan ``dc`` with ``solver``: exact (default), the reduced or full LP, or the baseline."""
    if solver == "exact":
        return solve_exact(dc)
    if solver in ("reduced", "full"):
        return solve_lp(dc, reduced=solver == "reduced", lp_backend=lp_backend,
                        time_limit=time_limit)
    if solver == "noncollab":
        return solve_noncollab(dc)
    raise PlannerError(f"unknown solver {solver!r} (choose from {', '.join(SOLVERS)})")
