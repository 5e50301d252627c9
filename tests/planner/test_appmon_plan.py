"""The application-monitoring planner: the exact on-site knapsack, the MILP, its LP relaxation
and the greedy method checked against each other on random data centres (seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.planner.appmon import (
    DEFAULT_COSTS,
    NONE,
    ONSITE,
    Services,
    solve_greedy,
    solve_milp,
    solve_onsite,
)
from cosample.planner.appmon_residues import plan_services
from cosample.planner.errors import ShareInfeasibleError

SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
TOL = 1e-6


def random_case(
    seed: int, n: int, services: int, *, sniffers: bool = True, min_share: bool = False
):
    rng = np.random.default_rng(seed)
    svc = Services(
        host=rng.integers(0, n, services),
        rate=rng.uniform(10, 2000, services),
        packets=rng.uniform(2, 10, services),
        weight=rng.uniform(0.5, 3, services),
        min_share=(rng.uniform(0, 0.05, services) if min_share else np.zeros(services)),
        onsite_ok=(np.ones(services, bool) if sniffers else rng.random(services) < 0.7),
        bytes_per_request=rng.uniform(200, 1500, services),
    )
    residual = rng.uniform(0, 4e4, n) * (rng.random(n) < 0.8)
    caps = np.where(rng.random(n) < 0.3, rng.uniform(1e5, 1e6, n), np.inf)
    return svc, residual, caps


def check_feasible(svc, plan, residual, caps):
    assert np.all(plan.load <= np.maximum(residual, 0) * (1 + TOL) + TOL)
    assert np.all(plan.mirror_bytes <= caps * (1 + TOL) + TOL)
    assert np.all((plan.share >= svc.min_share - TOL) & (plan.share <= 1 + TOL))
    assert np.all((plan.to == NONE) == (plan.share <= 0))
    assert not np.any((plan.to == ONSITE) & ~svc.onsite_ok)
    mirrored = plan.to >= 0
    assert np.all(plan.to[mirrored] != svc.host[mirrored])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6), services=st.integers(1, 12))
def test_onsite_knapsack_equals_the_lp_without_mirrors(seed, n, services):
    """Exact where the structure allows: with one host per service the LP is a knapsack per host."""
    svc, residual, _ = random_case(seed, n, services)
    exact = solve_onsite(svc, residual, DEFAULT_COSTS)
    lp = solve_milp(
        svc, residual, np.full(n, np.inf), {**DEFAULT_COSTS}, analysis_hosts=0, relaxed=True
    )
    assert exact.objective == pytest.approx(lp.objective, rel=1e-6, abs=1e-6)
    check_feasible(svc, exact, residual, np.full(n, np.inf))


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 6),
    services=st.integers(1, 12),
    budget=st.sampled_from([None, 0, 1, 2]),
    sniffers=st.booleans(),
    min_share=st.booleans(),
)
def test_greedy_le_milp_le_lp(seed, n, services, budget, sniffers, min_share):
    svc, residual, caps = random_case(seed, n, services, sniffers=sniffers, min_share=min_share)
    try:
        milp_plan = solve_milp(svc, residual, caps, DEFAULT_COSTS, budget)
    except ShareInfeasibleError:
        with pytest.raises(ShareInfeasibleError):
            solve_greedy(svc, residual, caps, DEFAULT_COSTS, budget)
        return
    lp = solve_milp(svc, residual, caps, DEFAULT_COSTS, budget, relaxed=True)
    check_feasible(svc, milp_plan, residual, caps)
    if budget is not None:
        assert len(set(milp_plan.to[milp_plan.to >= 0].tolist())) <= budget
    assert milp_plan.objective <= lp.objective * (1 + TOL) + TOL
    try:
        greedy = solve_greedy(svc, residual, caps, DEFAULT_COSTS, budget)
    except ShareInfeasibleError:
        return  # the heuristic may miss minimum shares the MILP meets
    check_feasible(svc, greedy, residual, caps)
    assert greedy.objective <= milp_plan.objective * (1 + TOL) + TOL
    if sniffers and not min_share:  # collaboration never loses against on-site analysis
        assert (
            milp_plan.objective
            >= solve_onsite(svc, residual, DEFAULT_COSTS).objective * (1 - TOL) - TOL
        )


def test_busy_host_offloads_its_analysis():
    svc = Services(
        host=np.array([0]),
        rate=np.array([1000.0]),
        packets=np.array([5.0]),
        weight=np.ones(1),
        min_share=np.zeros(1),
        onsite_ok=np.ones(1, bool),
        bytes_per_request=np.array([1500.0]),
    )
    volume = 1000  # requests/s: the costs are per request
    residual = np.array([volume * DEFAULT_COSTS["mirror_sender"], 1e9])
    onsite = solve_onsite(svc, residual, DEFAULT_COSTS)
    plan = plan_services(svc, residual, np.full(2, np.inf), DEFAULT_COSTS)
    assert onsite.share[0] == pytest.approx(
        DEFAULT_COSTS["mirror_sender"] / DEFAULT_COSTS["onsite"]
    )
    assert plan.to[0] == 1 and plan.share[0] == pytest.approx(1.0)
    assert plan.gap == pytest.approx(0.0, abs=1e-9)
    capped = plan_services(svc, residual, np.array([1000 * 1500 * 0.25, np.inf]), DEFAULT_COSTS)
    assert capped.share.sum() == pytest.approx(max(0.25, onsite.share[0]))


def test_unmeetable_minimum_share_is_infeasible():
    svc = Services(
        host=np.array([0]),
        rate=np.array([1000.0]),
        packets=np.array([5.0]),
        weight=np.ones(1),
        min_share=np.array([0.5]),
        onsite_ok=np.ones(1, bool),
        bytes_per_request=np.array([1500.0]),
    )
    with pytest.raises(ShareInfeasibleError):
        plan_services(svc, np.array([10.0]), np.full(1, np.inf), DEFAULT_COSTS)
