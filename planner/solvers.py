"""One entry point for every solver, chosen by name as the CLI does."""

from __future__ import annotations

from cosample.planner.baseline import solve_noncollab
from cosample.planner.choices import (
    ALL_SOLVERS,
    DEFAULT_LP_BACKEND,
    DEFAULT_SOLVER,
    EXACT,
    LP_SOLVERS,
    REDUCED,
)
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.exact import solve_exact
from cosample.planner.lp import solve_lp
from cosample.planner.problem import Problem, build_problem
from cosample.planner.solution import Solution

#: Every solver name ``solve`` accepts (``planner.choices``).
SOLVERS = ALL_SOLVERS


def solve(
    dc: DataCentre | Problem,
    solver: str = DEFAULT_SOLVER,
    lp_backend: str = DEFAULT_LP_BACKEND,
    time_limit: float | None = None,
    *,
    margin: float | None = None,
    robust: bool = False,
) -> Solution:
    """Plan ``dc`` with ``solver``: exact (default), the reduced or full LP, or the baseline.

    ``margin`` (a fraction of capacity kept free) overrides the description's per-server margins
    and the default; ``robust`` plans with the calibration intervals' pessimistic ends. A
    ``Problem`` (``build_problem``) may be given instead of a description to reuse it.
    """
    if solver not in ALL_SOLVERS:
        raise PlannerError(f"unknown solver {solver!r} (choose from {', '.join(ALL_SOLVERS)})")
    problem = dc if isinstance(dc, Problem) else build_problem(dc, margin=margin, robust=robust)
    if solver == EXACT:
        return solve_exact(problem)
    if solver in LP_SOLVERS:
        return solve_lp(
            problem, reduced=solver == REDUCED, lp_backend=lp_backend, time_limit=time_limit
        )
    return solve_noncollab(problem)
