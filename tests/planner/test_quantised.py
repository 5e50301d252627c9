"""The plan that keeps senders and receivers apart (sFlow 1-in-N), against brute force, the LPs
and itself; the plan over every applied plan (test_applied_space.py) collects at least as much.

Brute force: every sender's N in 1..N_MAX or off (receivers 1-in-1), and for each choice the
mirror shares by the LP for fixed N (a fractional knapsack: the senders with the highest
``w (1 - 1/N)`` first), in plain Python. The split solver (``quantised.choose_applied``) must
reach the best of them, and equal it when its own N are in that range; its bound must hold; the
exact solver's plan must collect at least as much. Then: never worse than the reduced and full
LP plans rounded by ``realise``, monotone in margin and capacity, and the plan file says what
rounding costs.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import planning_inputs  # tests/ is on sys.path (pytest pythonpath)

from cosample.planner import DataCentre, quantised, quantised_milp, solve
from cosample.planner.exact import solve_continuous
from cosample.planner.lp import backend_available
from cosample.planner.planfile import build_plan
from cosample.planner.problem import build_problem
from cosample.planner.realise import predicted_load, realise
from cosample.planner.report import summary_lines

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
N_MAX = 10
MAX_SENDERS = 4


def senders(problem) -> list[int]:
    return [int(i) for i in np.flatnonzero(~problem.receiver & (problem.own_pps > 0))]


def brute_force(problem, n_max: int = N_MAX) -> float:
    """Best weighted distinct own packets over every N <= n_max (or off) per sender."""
    own, spare, beta, weight = problem.own_pps, problem.spare_pps, problem.beta, problem.weight
    full = problem.alpha * problem.bridge_pps
    listed = senders(problem)
    fixed = float((weight * own)[problem.receiver & (own > 0)].sum())
    room = float(problem.room_pps.sum())
    best = -1.0
    # per sender, each affordable N (0: off) with its local value and its item, once
    options = []
    for i in listed:
        affordable = []
        for n in range(n_max + 1):
            rate = 0.0 if n == 0 else 1.0 / n
            left = spare[i] - full[i] * rate
            if left < -1e-9 * full[i]:
                continue
            top = min(own[i], problem.mirror_cap_pps[i], max(left, 0.0) / beta[i])
            affordable.append((weight[i] * own[i] * rate, (weight[i] * (1 - rate), top)))
        options.append(affordable)
    for choice in itertools.product(*options):
        total, items = fixed, []
        for local, item in choice:
            total += local
            items.append(item)
        left_room = room
        for slope, top in sorted(items, reverse=True):
            take = min(top, left_room)
            total += slope * take
            left_room -= take
        best = max(best, total)
    return best


def weighted_applied(problem, solution) -> float:
    return float((problem.weight * realise(solution).distinct_pps).sum())


def applied_intervals(problem, solution) -> np.ndarray:
    return realise(solution).sflow_sampling[senders(problem)]


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(1.0, abs(a), abs(b))


@SETTINGS
@given(planning_inputs(max_servers=6), st.sampled_from([0.0, 0.1, None]))
def test_split_plan_equals_brute_force_over_n(dc, margin):
    problem = build_problem(dc, margin=margin)
    if len(senders(problem)) > MAX_SENDERS:
        return
    chosen = quantised.choose_applied(problem)
    best = brute_force(problem)
    assert chosen.optimal
    assert chosen.objective >= best * (1 - 1e-7) - 1e-6
    intervals = np.where(chosen.rate > 0, 1 / np.where(chosen.rate > 0, chosen.rate, 1), 0)
    if np.all(intervals <= N_MAX + 1e-9):
        assert relative(chosen.objective, best) < 1e-7
    assert chosen.bound >= best * (1 - 1e-9)
    # the exact solver's plan: at least the split one, and what realise applies
    solution = solve(problem)
    assert solution.objective >= chosen.objective * (1 - 1e-9) - 1e-6
    assert solution.bounds.applied >= solution.objective * (1 - 1e-9)
    assert relative(weighted_applied(problem, solution), solution.objective) < 1e-9
    assert solution.bounds.applied <= solution.bounds.envelope * (1 + 1e-9)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_servers=6), st.sampled_from([0.0, 0.1]))
def test_milp_refined_from_few_candidates_still_equals_brute_force(dc, margin):
    # only N_min, N_c - 1, N_c and off explicit at first: the gap items must lead the MILP to
    # every N it needs (the refinement loop), and the result must not depend on the start
    problem = build_problem(dc, margin=margin)
    if len(senders(problem)) > 3:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quantised_milp, "DENSE", 1)
        patch.setattr(quantised_milp, "LADDER", 1)
        sparse = quantised.choose_applied(problem)
    dense = quantised.choose_applied(problem)
    assert sparse.proved and relative(sparse.objective, dense.objective) < 1e-7
    best = brute_force(problem)
    assert sparse.objective >= best * (1 - 1e-7) - 1e-6


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_servers=6))
def test_greedy_stays_below_its_bound_and_reports_its_gap(dc):
    problem = build_problem(dc)
    if len(senders(problem)) > MAX_SENDERS:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quantised, "MILP_UP_TO", 0)
        chosen = quantised.choose_applied(problem)
    best = brute_force(problem)
    assert chosen.bound >= best * (1 - 1e-9)
    intervals = np.where(chosen.rate > 0, 1 / np.where(chosen.rate > 0, chosen.rate, 1), 0)
    if np.all(intervals <= N_MAX + 1e-9):  # a plan the brute force tried: it cannot beat it
        assert chosen.objective <= best * (1 + 1e-9) + 1e-9
    if chosen.method == "greedy" and not chosen.optimal:
        assert chosen.objective < chosen.bound


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_servers=6), st.sampled_from([0.0, 0.1]))
def test_never_worse_than_the_lps_rounded(dc, margin):
    if backend_available("highs"):
        pytest.skip(backend_available("highs"))
    problem = build_problem(dc, margin=margin)
    exact = solve(problem)
    for solver in ("reduced", "full"):
        rounded = solve(problem, solver, lp_backend="highs")
        assert (
            weighted_applied(problem, exact)
            >= weighted_applied(problem, rounded) * (1 - 1e-9) - 1e-6
        )
    continuous = solve_continuous(problem)
    assert (
        weighted_applied(problem, exact)
        >= weighted_applied(problem, continuous) * (1 - 1e-9) - 1e-6
    )


@SETTINGS
@given(planning_inputs(max_servers=6), st.floats(0.0, 0.3), st.floats(0.0, 0.3))
def test_monotone_in_margin(dc, first, second):
    low, high = sorted((first, second))
    relaxed, tight = solve(dc, margin=low), solve(dc, margin=high)
    if relaxed.optimal and tight.optimal:  # proved over every applied plan: monotone
        assert relaxed.objective >= tight.objective * (1 - 1e-9) - 1e-6
    assert relaxed.bounds.applied >= tight.objective * (1 - 1e-9) - 1e-6


@SETTINGS
@given(planning_inputs(max_servers=6), st.integers(0, 2**32 - 1))
def test_monotone_in_capacity(dc, seed):
    rng = np.random.default_rng(seed)
    more = dc.capacity_pps * np.where(
        rng.uniform(size=dc.size) < 0.5, rng.uniform(1, 2, dc.size), 1
    )
    bigger = DataCentre(
        **{**{f: getattr(dc, f) for f in dc.__dataclass_fields__}, "capacity_pps": more}
    )
    before, after = solve(dc), solve(bigger)
    if before.optimal and after.optimal:
        assert after.objective >= before.objective * (1 - 1e-9) - 1e-6
    assert after.bounds.applied >= before.objective * (1 - 1e-9) - 1e-6


@SETTINGS
@given(planning_inputs(max_servers=8))
def test_applied_plan_stays_within_capacity(dc):
    problem = build_problem(dc)
    applied = realise(solve(problem))
    load = predicted_load(
        problem, applied.local_rate, applied.mirror_src, applied.mirror_dst, applied.mirror_pps
    )
    assert np.all(
        load <= np.maximum(problem.usable_pps, problem.forwarding_pps) * (1 + 1e-9) + 1e-6
    )
    rate = applied.local_rate
    interval = applied.sflow_sampling
    assert np.all((interval == 0) == (rate == 0))
    assert np.allclose(rate[interval > 0], 1.0 / interval[interval > 0], rtol=1e-12)


def test_many_competing_senders_take_the_greedy_and_state_the_gap():
    # 40 equal senders, scarce room: too many for either MILP; the plan states its gap to the
    # bound on every applied plan (the senders could also take one another's copies), and the
    # split plan's own gap to its hull bound stays small
    rng = np.random.default_rng(7)
    own = rng.uniform(5e5, 9e5, 40)
    capacity = np.concatenate((np.full(40, 1e6), rng.uniform(1e5, 1e6, 3)))
    dc = DataCentre.from_arrays(capacity, 1.54, 0.46, np.arange(40), np.arange(40), own)
    solution = solve(dc)
    split = quantised.choose_applied(build_problem(dc))
    assert solution.bounds.method == "greedy (receivers 1-in-1)"
    assert split.method == "greedy" and split.objective >= split.bound * (1 - 0.01)
    assert solution.objective <= solution.bounds.applied * (1 + 1e-12)
    assert not solution.optimal and solution.bounds.applied > split.bound
    assert solution.gap == pytest.approx(
        (solution.bounds.applied - solution.objective) / solution.bounds.applied, abs=1e-15
    )
    assert solution.bounds.applied <= solution.bounds.envelope * (1 + 1e-12)


def test_lp_plan_reports_what_its_own_rounding_costs():
    dc = DataCentre.from_matrix([1e6, 1e6], 1.54, 0.46, [[600e3, 0], [0, 0]])
    if backend_available("highs"):
        pytest.skip(backend_available("highs"))
    solution = solve(dc, "reduced", lp_backend="highs", margin=0.0)
    summary = build_plan(dc, solution)["summary"]
    rounding = summary["rounding"]
    assert rounding["continuous_pps"] == pytest.approx(solution.collected_pps, rel=1e-9)
    assert rounding["applied_pps"] == pytest.approx(realise(solution).distinct_pps.sum(), rel=1e-9)
    # the LP stops at l + m = 1 (485k mirrored beside 0.19 local); rounding to 1-in-6 frees
    # capacity the top-up spends on the receiver's room left: here rounding gains
    assert rounding["cost_pps"] == pytest.approx(
        rounding["continuous_pps"] - rounding["applied_pps"]
    )
    assert rounding["applied_pps"] <= solve(dc, margin=0.0).collected_pps * (1 + 1e-9)
    assert summary["objective"]["bound_applied"] is None


def test_plan_says_what_rounding_costs_and_who_loses():
    # s1: 600k own on 1 Mpps, s2 takes 500k mirrored; continuously s1 samples 0.184 locally
    # (110k) beside the 500k; as applied 1-in-6 (100k) beside them
    dc = DataCentre.from_matrix([1e6, 1e6], 1.54, 0.46, [[600e3, 0], [0, 0]])
    solution = solve(dc, margin=0.0)
    plan = build_plan(dc, solution)
    rounding = plan["summary"]["rounding"]
    y, x = 500e3, (400e3 - 0.46 * 500e3) / 1.54
    continuous, applied = x + y - x * y / 600e3, 600e3 / 6 + y * 5 / 6
    assert rounding["continuous_pps"] == pytest.approx(continuous, rel=1e-9)
    assert rounding["applied_pps"] == pytest.approx(applied, rel=1e-9)
    assert rounding["cost_pps"] == pytest.approx(continuous - applied, rel=1e-6)
    assert [s["name"] for s in rounding["servers"]] == [dc.names[0]]
    assert plan["summary"]["objective"]["bound_applied"] == pytest.approx(applied, rel=1e-9)
    assert plan["summary"]["objective"]["optimal"]
    line = next(line for line in summary_lines(plan) if line.startswith("rounding"))
    assert f"{continuous - applied:,.0f} pps" in line and dc.names[0] in line
