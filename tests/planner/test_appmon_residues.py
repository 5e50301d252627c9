"""The application part as the agents apply it: shares in whole client-port residues.

The agents copy ``selected_share(share)`` = floor(256 x share) (at least 1) of 256 residues
(``cosample.plan.appmon``); the plan's shares, loads, byte rates and objective are those, and
stay within every capacity and byte cap, and at or above every minimum share.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.plan.appmon import selected_share
from cosample.planner.appmon import DEFAULT_COSTS, NONE, ONSITE, Services, loads
from cosample.planner.appmon_residues import plan_services
from cosample.planner.errors import ShareInfeasibleError
from tests.planner.test_appmon_plan import check_feasible, random_case

COST = DEFAULT_COSTS["onsite"]


def one_service(rate: float = 1000.0, min_share: float = 0.0) -> Services:
    return Services(
        host=np.array([0]),
        rate=np.array([rate]),
        packets=np.array([5.0]),
        weight=np.array([1.0]),
        min_share=np.array([min_share]),
        onsite_ok=np.array([True]),
        bytes_per_request=np.array([500.0]),
    )


def test_a_share_is_the_residues_the_agents_select():
    svc = one_service()
    # room on-site for 30 % of the requests: 76.8 residues, the agents take 76
    plan = plan_services(svc, np.array([0.3 * 1000 * COST]), np.array([np.inf]), DEFAULT_COSTS)
    assert plan.to[0] == ONSITE
    assert plan.share[0] == 76 / 256 == selected_share(plan.share[0]) / 256
    assert plan.load[0] == pytest.approx(76 / 256 * 1000 * COST, rel=1e-12)
    assert plan.objective == pytest.approx(1000 * 76 / 256, rel=1e-12)


def test_less_than_one_residue_is_one_where_it_fits_and_none_where_not():
    svc = one_service()
    fits = plan_services(
        svc, np.array([1.5 / 256 * 1000 * COST]), np.array([np.inf]), DEFAULT_COSTS
    )
    assert fits.share[0] == 1 / 256 and fits.to[0] == ONSITE
    short = plan_services(
        svc, np.array([0.5 / 256 * 1000 * COST]), np.array([np.inf]), DEFAULT_COSTS
    )
    assert short.to[0] == NONE and short.share[0] == 0 and short.load[0] == 0


def test_a_minimum_share_takes_the_residue_above_it():
    svc = one_service(min_share=0.3)  # 76.8 residues: at least 77
    room = np.array([0.3015 * 1000 * COST])  # 77.2 residues of room: 77
    assert plan_services(svc, room, np.array([np.inf]), DEFAULT_COSTS).share[0] == 77 / 256
    # room for 0.3004 (76.9 residues): the minimum fits continuously, not in whole residues
    with pytest.raises(ShareInfeasibleError, match="whole residues"):
        plan_services(svc, np.array([0.3004 * 1000 * COST]), np.array([np.inf]), DEFAULT_COSTS)


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    services=st.integers(1, 12),
    min_share=st.booleans(),
)
def test_every_planned_share_is_applied_as_planned(seed, n, services, min_share):
    svc, residual, caps = random_case(seed, n, services, min_share=min_share)
    try:
        plan = plan_services(svc, residual, caps, DEFAULT_COSTS)
    except ShareInfeasibleError:
        return
    check_feasible(svc, plan, residual, caps)
    monitored = plan.to != NONE
    residues = plan.share * 256
    assert np.all(residues == np.round(residues)) and np.all(residues[monitored] >= 1)
    for share in plan.share[monitored]:
        assert selected_share(float(share)) / 256 == share
    load, sent, value = loads(svc, plan.to, plan.share, DEFAULT_COSTS, n)
    assert np.allclose(plan.load, load) and np.allclose(plan.mirror_bytes, sent)
    assert plan.objective == pytest.approx(value) and plan.bound >= plan.objective
