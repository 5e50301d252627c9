"""The continuous distinct-packet optimum (the bound of the applied plan) against brute force.

Two independent checks of ``distinct.choose``: every vertex of the offload polytope enumerated
in plain Python (each sender mirrors nothing, all it usefully can, or what is left of the
room), and a grid over every sender's offload that does not rely on the vertex argument at all.
The plan must reach the vertex optimum, beat or tie every grid point, and stay below the
concave-envelope bound it reports.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import planning_inputs  # tests/ is on sys.path (pytest pythonpath)

from cosample.planner.distinct import ENUMERATE_UP_TO, choose, senders_of
from cosample.planner.exact import solve_continuous
from cosample.planner.problem import build_problem

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GRID = 24


def sender_value(problem, i: int, mirrored: float) -> float:
    """w (x + y - x y / U) with the best local x next to y, from the model's constraints."""
    own, spare = problem.own_pps[i], problem.spare_pps[i]
    cost, beta = problem.sample_cost[i], problem.beta[i]
    local = min(own, max(spare - beta * mirrored, 0.0) / cost)
    return problem.weight[i] * (local + mirrored - local * mirrored / own)


def brute_vertices(problem) -> float:
    """Best weighted distinct volume over all vertices, sender by sender in plain Python."""
    senders = [int(i) for i in np.flatnonzero(~problem.receiver & (problem.own_pps > 0))]
    room = float(problem.room_pps.sum())
    fixed = float((problem.weight * problem.own_pps)[problem.receiver].sum())
    top = {
        i: min(
            problem.own_pps[i], problem.spare_pps[i] / problem.beta[i], problem.mirror_cap_pps[i]
        )
        for i in senders
    }
    best = -1.0
    for states in itertools.product(("none", "all", "rest"), repeat=len(senders)):
        if states.count("rest") > 1:
            continue
        used = sum(top[i] for i, state in zip(senders, states) if state == "all")
        if used > room * (1 + 1e-12):
            continue
        total = fixed
        for i, state in zip(senders, states):
            amount = {"none": 0.0, "all": top[i], "rest": min(max(room - used, 0.0), top[i])}[state]
            total += sender_value(problem, i, amount)
        best = max(best, total)
    return best


def brute_grid(problem) -> float:
    """Best over a grid of offloads (at most three competing senders), no structure assumed."""
    senders = [int(i) for i in np.flatnonzero(~problem.receiver & (problem.own_pps > 0))]
    room = float(problem.room_pps.sum())
    fixed = float((problem.weight * problem.own_pps)[problem.receiver].sum())
    axes = [
        np.linspace(
            0,
            min(
                problem.own_pps[i],
                problem.spare_pps[i] / problem.beta[i],
                problem.mirror_cap_pps[i],
            ),
            GRID,
        )
        for i in senders
    ]
    best = -1.0
    for point in itertools.product(*axes):
        if sum(point) <= room:
            best = max(
                best, fixed + sum(sender_value(problem, i, y) for i, y in zip(senders, point))
            )
    return best


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(1.0, abs(a), abs(b))


@SETTINGS
@given(planning_inputs(max_servers=6))
def test_plan_reaches_the_vertex_optimum_and_its_bound_holds(dc):
    problem = build_problem(dc)
    solution = solve_continuous(problem)
    optimum = brute_vertices(problem)
    assert relative(solution.objective, optimum) < 1e-9
    assert solution.optimal  # few senders: proved by enumeration or because all fit
    assert solution.objective <= solution.bounds.envelope * (1 + 1e-9)
    assert solution.bounds.envelope <= solution.bounds.lp * (1 + 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_servers=4))
def test_no_grid_point_beats_the_plan(dc):
    problem = build_problem(dc)
    senders = np.flatnonzero(~problem.receiver & (problem.own_pps > 0))
    if senders.size > 3:
        return
    assert solve_continuous(problem).objective >= brute_grid(problem) * (1 - 1e-9) - 1e-9


@settings(max_examples=40, deadline=None)
@given(st.integers(ENUMERATE_UP_TO + 1, 60), st.integers(0, 2**32 - 1))
def test_greedy_stays_within_its_reported_gap(servers, seed):
    # Many equal senders compete for scarce room: the greedy fills it whole sender by whole
    # sender; what it may miss is below the envelope bound, and the plan says how much.
    rng = np.random.default_rng(seed)
    own = rng.uniform(5e5, 9e5, servers)
    capacity = np.concatenate((np.full(servers, 1e6), rng.uniform(1e5, 1e6, 3)))
    from cosample.planner import DataCentre

    dc = DataCentre.from_arrays(capacity, 1.54, 0.46, np.arange(servers), np.arange(servers), own)
    problem = build_problem(dc)
    choice = choose(problem, senders_of(problem))
    solution = solve_continuous(problem)
    assert choice.method == "greedy"
    assert solution.objective <= solution.bounds.envelope * (1 + 1e-12)
    assert (
        solution.gap == 0.0
        or solution.gap
        == (solution.bounds.envelope - solution.objective) / solution.bounds.envelope
    )
    assert solution.gap < 0.02  # one partial sender among many: a small loss
