"""Properties of every plan on random data centres: bounds met, within capacity, rates sane.

The LPs are the reference: the exact solver's closed-form bound equals the reduced LP's optimum
(and the full LP's with equal weights) with margins, weights, mirror caps and bridges that sample
inbound traffic; every plan meets
the LP's capacity, cap and budget constraints; with a collector budget the LP optimum bounds the
exact plan where ``exact.lp_bounds_applied`` says it bounds every plan OVS can apply (with a
heavier sender, servers that take copies at their own 1-in-N may beat it: issue 44, the exact
plan is then held to its own ``bounds.applied``). Distinct packets are checked against brute
force (``test_distinct.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from strategies import datacentres, planning_inputs  # tests/ is on sys.path (pytest pythonpath)

from cosample.planner import InfeasibleError, solve
from cosample.planner.baseline import local_only_pps, solve_noncollab
from cosample.planner.budgets import samples_pps
from cosample.planner.choices import ALL_SOLVERS
from cosample.planner.datacentre import DataCentre
from cosample.planner.exact import lp_bound, lp_bounds_applied, optimum_pps, solve_continuous
from cosample.planner.lp import lp_optimum
from cosample.planner.planfile import build_plan
from cosample.planner.problem import build_problem
from cosample.planner.realise import predicted_load, realise

RELATIVE = 1e-6
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def close(a: float, b: float) -> bool:
    return abs(a - b) <= RELATIVE * max(1.0, abs(a), abs(b))


def below(a: float, b: float) -> bool:
    return a <= b + RELATIVE * max(1.0, abs(a), abs(b))


def lp_bounds(problem, solution) -> bool:
    """Whether the paper's LP bounds this plan: always for plans whose receivers sample 1-in-1;
    for a plan over every applied plan (the exact solver's rates) only where
    ``lp_bounds_applied`` says so (issue 44: a receiver at 1-in-2 beat it by 1.2 %, weights 1, 2,
    5)."""
    return solution.rates is None or lp_bounds_applied(problem)


@SETTINGS
@given(datacentres())
def test_paper_optimum_equals_full_lp(dc):
    assert close(optimum_pps(dc), solve(dc, "full", lp_backend="highs", margin=0.0).bounds.lp)


@SETTINGS
@given(planning_inputs())
def test_lp_bound_equals_the_lps_with_every_planning_input(dc):
    # With weights, or when a bridge also samples inbound traffic (an own packet then costs a
    # receiver more than alpha), the full LP may let a receiver sample part of its own traffic
    # while taking others'; one sFlow rate per bridge forbids that, and so does the reduced LP.
    problem = build_problem(dc)
    full = solve(problem, "full", lp_backend="highs")
    reduced = solve(problem, "reduced", lp_backend="highs")
    assert close(lp_bound(problem), reduced.bounds.lp)
    assert below(reduced.bounds.lp, full.bounds.lp)
    if problem.uniform_weight and np.array_equal(problem.bridge_pps, problem.own_pps):
        assert close(full.bounds.lp, reduced.bounds.lp)


@SETTINGS
@given(planning_inputs(collector_cap=True))
def test_collector_budget_is_met_and_the_lp_bounds_the_exact_plan(dc):
    problem = build_problem(dc)
    exact = solve(problem)
    assert below(
        samples_pps(problem, exact.local_pps, exact.offload_pps, exact.received_pps),
        problem.collector_cap_pps,
    )
    assert below(realise(exact).samples_pps, problem.collector_cap_pps)
    if lp_bounds(problem, exact):
        assert below(exact.objective, lp_optimum(problem, reduced=False))
    assert below(exact.objective, exact.bounds.envelope)
    if exact.bounds.applied is not None:
        assert below(exact.objective, exact.bounds.applied)


#: A data centre where the exact plan beats the paper's LP (found by CI's random draws): s3,
#: weight 5, mirrors to s1 and s2, which take the copies at their own 1-in-2.
HEAVY_SENDER = DataCentre(
    names=("s1", "s2", "s3"),
    capacity_pps=np.array([20234.86756233, 26429.86433088, 40930.89551351]),
    alpha=np.full(3, 3.0),
    beta=np.full(3, 0.5),
    traffic_src=np.repeat(np.arange(3), 3),
    traffic_dst=np.tile(np.arange(3), 3),
    traffic_pps=np.array(
        [
            3163.59578,
            1182.80637,
            927.561126,
            412.215404,
            768.928165,
            6338.37130,
            3.57571261,
            1812.06749,
            14092.0962,
        ]
    ),
    weight=np.array([1.0, 2.0, 5.0]),
)


@SETTINGS
@given(planning_inputs(), st.sampled_from(ALL_SOLVERS))
@example(HEAVY_SENDER, "exact")
def test_plans_meet_capacity_caps_and_rates_are_fractions(dc, solver):
    problem = build_problem(dc)
    solution = solve(problem, solver, lp_backend="highs")
    rates = np.where(
        problem.own_pps > 0, solution.local_pps / np.maximum(problem.own_pps, 1e-300), 0
    )
    if solution.rates is None:  # a continuous plan: its receivers sample 1-in-1
        rates = np.where(solution.received_pps > 0, 1.0, rates)
    else:  # the rates the solver chose: a receiver samples copies at its own
        rates = solution.rates
    load = predicted_load(
        problem, rates, solution.mirror_src, solution.mirror_dst, solution.mirror_pps
    )
    # a server whose forwarding alone passes its margin samples nothing: its load is forwarding
    limit = np.maximum(problem.usable_pps, problem.forwarding_pps)
    assert np.all(load <= limit * (1 + 1e-7) + 1e-6)
    assert np.all(solution.offload_pps <= problem.mirror_cap_pps * (1 + 1e-7) + 1e-6)
    if lp_bounds(problem, solution):
        assert below(solution.objective, solution.bounds.lp)
    assert below(solution.objective, solution.bounds.envelope)
    if solution.bounds.applied is not None:
        assert below(solution.objective, solution.bounds.applied)
    plan = build_plan(dc, solution)
    for name, host in plan["hosts"].items():
        assert 0 <= host["local_rate"] <= 1 and 0 <= host["planned"]["local_rate"] <= 1
        applied = 1 / host["sflow_sampling"] if host["sflow_sampling"] else 0.0
        assert applied == pytest.approx(host["local_rate"], rel=1e-9)
        if host["role"] != "receiver":
            assert applied <= host["planned"]["local_rate"] * (1 + 1e-9)
        shares = [m["rate"] for m in host["mirrors"]]
        assert all(0 < rate <= 1 for rate in shares)
        assert sum(shares) <= 1 + 1e-9, name
        limit = max(host["capacity_pps"] * (1 - host["margin"]), host["forwarding_pps"])
        assert host["load_pps"] <= limit * (1 + 1e-7) + 1e-6, name
        assert (host["sflow_sampling"] is None) == (host["local_rate"] == 0)
    summary = plan["summary"]
    assert summary["collected_pps"] <= summary["samples_pps"] * (1 + 1e-9) + 1e-6
    assert all(
        host["distinct_pps"] <= host["own_pps"] * (1 + 1e-9) for host in plan["hosts"].values()
    )
    if solution.optimal and np.all(problem.weight == 1):  # the applied plan is a feasible plan too
        own_distinct = sum(host["distinct_pps"] for host in plan["hosts"].values())
        assert below(own_distinct, solution.bounds.envelope)


@SETTINGS
@given(planning_inputs())
def test_collaboration_never_collects_less(dc):
    # both as applied (1-in-N): the baseline is one of the plans the exact solver chooses from
    problem = build_problem(dc)
    baseline = float((problem.weight * realise(solve_noncollab(problem)).distinct_pps).sum())
    applied = float((problem.weight * realise(solve(problem)).distinct_pps).sum())
    if not np.isfinite(problem.collector_cap_pps):
        assert applied >= baseline * (1 - 1e-9) - 1e-9
    continuous = float((problem.weight * local_only_pps(problem)).sum())
    assert solve_continuous(problem).objective >= continuous * (1 - 1e-12) - 1e-9


@SETTINGS
@given(planning_inputs())
def test_only_receivers_receive_and_they_sample_all_their_own(dc):
    # in a plan that keeps senders and receivers apart; where the solver chose every rate
    # (issue 44) a server takes copies at its own sFlow rate, whatever it is, and may send too
    problem = build_problem(dc)
    solution = solve(problem)
    if solution.rates is not None:
        assert np.all(solution.rates[solution.mirror_dst] > 0)
        if solution.sample_hosts is not None:
            assert not np.any(solution.sample_hosts[solution.mirror_dst])
        return
    assert np.all(problem.receiver[solution.mirror_dst])
    assert np.allclose(solution.local_pps[problem.receiver], problem.own_pps[problem.receiver])


@SETTINGS
@given(planning_inputs())
def test_pairs_stay_few(dc):
    """Per rate copies are taken at, the pairs are a vertex of a transportation problem: at
    most senders + receivers - 1 (a plan over every applied plan has receivers at several
    rates: found, a 6-server plan with 7 pairs over 2 senders and 5 receivers at 3 rates)."""
    solution = solve(dc)
    src, dst = solution.mirror_src, solution.mirror_dst
    rate = solution.rates[dst] if solution.rates is not None else np.ones(dst.size)
    most = sum(
        np.unique(src[rate == t]).size + np.unique(dst[rate == t]).size - 1 for t in np.unique(rate)
    )
    assert solution.mirror_pairs <= most


@settings(max_examples=30, deadline=None)
@given(datacentres(feasible=False))
def test_infeasible_data_centres_name_every_overloaded_server(dc):
    overloaded = {dc.names[i] for i in np.flatnonzero(dc.spare_pps < 0)}
    with pytest.raises(InfeasibleError) as raised:
        solve(dc)
    assert set(raised.value.overloads) == overloaded
    for name in overloaded:
        assert name in str(raised.value)
