"""Properties of every plan on random data centres: optimal, within capacity, rates sane."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.planner import InfeasibleError, solve
from cosample.planner.baseline import noncollab_pps
from cosample.planner.choices import ALL_SOLVERS
from cosample.planner.exact import optimum_pps, split
from cosample.planner.planfile import build_plan
from cosample.planner.realise import predicted_load

from strategies import datacentres  # tests/ is on sys.path (pytest pythonpath)

RELATIVE = 1e-6
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def close(a: float, b: float) -> bool:
    return abs(a - b) <= RELATIVE * max(1.0, abs(a), abs(b))


@SETTINGS
@given(datacentres())
def test_exact_equals_full_lp_optimum(dc):
    lp = solve(dc, "full", lp_backend="highs")
    exact = solve(dc, "exact")
    assert close(exact.collected_pps, lp.collected_pps)
    assert close(optimum_pps(dc), lp.collected_pps)


@SETTINGS
@given(datacentres())
def test_reduced_and_full_lp_agree(dc):
    assert close(solve(dc, "reduced", lp_backend="highs").collected_pps,
                 solve(dc, "full", lp_backend="highs").collected_pps)


@SETTINGS
@given(datacentres(), st.sampled_from(ALL_SOLVERS))
def test_plans_meet_capacity_and_rates_are_fractions(dc, solver):
    solution = solve(dc, solver, lp_backend="highs")
    load = predicted_load(dc, solution.local_pps, solution.mirror_src, solution.mirror_dst,
                          solution.mirror_pps)
    assert np.all(load <= dc.capacity_pps * (1 + 1e-7) + 1e-6)
    plan = build_plan(dc, solution)
    for name, host in plan["hosts"].items():
        assert 0 <= host["local_rate"] <= 1
        applied = 1 / host["sflow_sampling"] if host["sflow_sampling"] else 0.0
        assert applied <= host["local_rate"] * (1 + 1e-9)
        shares = [m["rate"] for m in host["mirrors"]]
        assert all(0 < rate <= 1 for rate in shares)
        assert applied + sum(shares) <= 1 + 1e-9, name
        assert host["load_pps"] <= host["capacity_pps"] * (1 + 1e-7) + 1e-6, name
    summary = plan["summary"]
    assert summary["collected_applied_pps"] <= solution.collected_pps * (1 + 1e-9) + 1e-6
    assert summary["collected_distinct_pps"] <= summary["collected_applied_pps"] * (1 + 1e-9) + 1e-6
    for host in plan["hosts"].values():  # a rate too small for sFlow is written as exactly 0
        assert (host["sflow_sampling"] is None) == (host["local_rate"] == 0)


@SETTINGS
@given(datacentres())
def test_collaboration_never_collects_less(dc):
    assert solve(dc).collected_pps >= noncollab_pps(dc) * (1 - 1e-12)


@SETTINGS
@given(datacentres())
def test_only_receivers_receive_and_they_sample_all_their_own(dc):
    solution = solve(dc)
    parts = split(dc)
    assert np.all(parts.receiver[solution.mirror_dst])
    assert np.allclose(solution.local_pps[parts.receiver], dc.own_pps[parts.receiver])


@SETTINGS
@given(datacentres())
def test_pairs_stay_few(dc):
    solution = solve(dc)
    senders = np.unique(solution.mirror_src).size
    receivers = np.unique(solution.mirror_dst).size
    assert solution.mirror_pairs <= max(0, senders + receivers - 1)


@settings(max_examples=30, deadline=None)
@given(datacentres(feasible=False))
def test_infeasible_data_centres_name_every_overloaded_server(dc):
    overloaded = {dc.names[i] for i in np.flatnonzero(dc.spare_pps < 0)}
    with pytest.raises(InfeasibleError) as raised:
        solve(dc)
    assert set(raised.value.overloads) == overloaded
    for name in overloaded:
        assert name in str(raised.value)
