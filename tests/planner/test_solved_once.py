"""The serialiser decides nothing: a solution is rounded (``realise``), its baseline solved and
its continuous optimum solved at most once, however many documents are written from it."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from cosample.experiments.bench_planner import random_datacentre
from cosample.planner import baseline, exact, solve
from cosample.planner import realise as realise_module
from cosample.planner.planfile import build_plan, host_report

MOMENT = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=400)


@pytest.fixture
def counted(monkeypatch):
    """Calls of the three computations, by the solution (``realise``) or problem they got."""
    calls: Counter = Counter()

    def counting(module, name):
        original = getattr(module, name)

        def wrapper(arg, *rest, **kwargs):
            calls[name] += 1
            return original(arg, *rest, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(realise_module, "realise")
    counting(baseline, "noncollab_applied_pps")  # the baseline a summary states
    counting(exact, "solve_continuous")
    return calls


@pytest.mark.parametrize("solver", ["exact", "reduced", "noncollab"])
def test_documents_reuse_what_the_solution_carries(counted, solver):
    dc = random_datacentre(300, seed=3)
    solution = solve(dc, solver)
    counted.clear()  # what the solver itself did does not count
    first = build_plan(dc, solution, created=MOMENT, version=1)
    after_first = dict(counted)
    # one rounding of this plan, one of the baseline's (unless it is the baseline)
    assert after_first.get("realise", 0) == (1 if solver == "noncollab" else 2)
    assert after_first.get("noncollab_applied_pps", 0) == (0 if solver == "noncollab" else 1)
    assert after_first.get("solve_continuous", 0) <= (1 if solver == "exact" else 0)
    lean = build_plan(dc, solution, created=MOMENT, version=1, report=False, lazy_hosts=True)
    host_report(solution, lean)
    assert dict(counted) == after_first  # the second document and the report computed nothing
    assert (
        first["summary"]["noncollab_pps"]
        == build_plan(dc, solve(dc, "noncollab"), created=MOMENT)["summary"]["collected_pps"]
    )


def test_the_exact_solvers_continuous_optimum_is_handed_over(counted, monkeypatch):
    """When the exact solver solved the continuous optimum itself (its fallback), the plan's
    rounding summary uses that one instead of solving it again."""
    monkeypatch.setattr(exact, "FALLBACK_GAP", -1.0)  # always take the fallback's path
    dc = random_datacentre(200, seed=5)
    solution = solve(dc, "exact")
    if solution.known_continuous is None:
        pytest.skip("this instance was proved optimal (no fallback)")
    solved = counted["solve_continuous"]
    plan = build_plan(dc, solution, created=MOMENT)
    assert counted["solve_continuous"] == solved
    assert plan["summary"]["rounding"]["continuous_pps"] == pytest.approx(
        solution.known_continuous.collected_pps, rel=1e-11
    )
