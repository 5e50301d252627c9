"""What a plan's summary states beside the plan, solved once per solution and kept on it
(``Solution.stated``): the continuous optimum its applied plan is measured against
(``summary.rounding``) and what no collaboration collects (``summary.noncollab_pps`` and the
gain).

Both solve (``exact``, ``baseline``), and solvers return solutions, so these live above the
solvers rather than on ``Solution``, which every solver imports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cosample.planner import baseline, exact
from cosample.planner.choices import EXACT, NONCOLLAB
from cosample.planner.solution import Solution


def continuous(solution: Solution) -> Solution:
    """The continuous plan the applied one is compared with (``summary.rounding``): the
    exact solver's continuous optimum (solved once, or handed over by the solver); any
    other solver's plan is continuous itself."""
    if solution.solver != EXACT:
        return solution
    if solution.known_continuous is not None:
        return solution.known_continuous
    return _once(solution, "continuous", lambda: exact.solve_continuous(solution.problem))


def baseline_pps(solution: Solution) -> float:
    """Distinct packets the no-collaboration baseline collects, after 1-in-N as this plan
    (``summary.noncollab_pps`` and the gain): this plan's own when it is the baseline."""
    if solution.solver == NONCOLLAB:
        return solution.applied.collected_pps
    return _once(solution, "baseline_pps", lambda: baseline.noncollab_applied_pps(solution.problem))


def _once(solution: Solution, name: str, solve: Callable[[], Any]) -> Any:
    if name not in solution.stated:
        solution.stated[name] = solve()
    return solution.stated[name]
