"""The column-wise plan writer is the per-host one it replaced, bit for bit.

``planfile._hosts`` builds 10^5 host entries from whole columns (the controller's publishing
cycle); the reference below is the loop it replaced, one host and one ``float(f"{v:.12g}")``
at a time. Both must give the same document on random data centres, with every planning
option, and ``significant`` must equal the string rounding on every value, edge cases included.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.planner import solve
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.planfile import _roles, build_plan, significant
from cosample.planner.problem import build_problem
from cosample.planner.realise import realise

from strategies import planning_inputs  # tests/ is on sys.path (pytest pythonpath)


def _num(value):
    return float(f"{float(value):.12g}")


def reference_hosts(problem, applied):
    """The per-host writer as it was (planner/planfile.py before the column-wise one)."""
    dc = problem.dc
    own = problem.own_pps
    mirrors, receives = {}, {}
    for i, k, pps in zip(applied.mirror_src.tolist(), applied.mirror_dst.tolist(),
                         applied.mirror_pps.tolist()):
        if pps <= 0:
            continue
        rate = pps / own[i]
        mirrors.setdefault(i, []).append({"to": dc.names[k], "rate": _num(rate)})
        receives.setdefault(k, []).append({"from": dc.names[i], "rate": _num(rate),
                                           "pps": _num(pps)})
    planned_mirrors = {}
    for i, k, amount in zip(applied.mirror_src.tolist(), applied.mirror_dst.tolist(),
                            applied.planned_mirror_pps.tolist()):
        if amount > 0:
            planned_mirrors.setdefault(i, []).append({"to": dc.names[k],
                                                      "rate": _num(amount / own[i])})
    roles = _roles(problem, applied)
    hosts = {}
    for i, name in enumerate(dc.names):
        interval = int(applied.sflow_sampling[i])
        capacity = float(problem.capacity_pps[i])
        load = float(applied.load_pps[i])
        hosts[name] = {
            "role": str(roles[i]), "capacity_pps": _num(capacity), "margin": _num(problem.margin[i]),
            "forwarding_pps": _num(dc.forwarding_pps[i]), "own_pps": _num(own[i]),
            "sampled_pps": _num(problem.bridge_pps[i]), "local_rate": _num(applied.local_rate[i]),
            "sflow_sampling": interval or None,
            "mirrors": sorted(mirrors.get(i, []), key=lambda m: m["to"]),
            "receives": sorted(receives.get(i, []), key=lambda m: m["from"]),
            "planned": {"local_rate": _num(applied.planned_rate[i]),
                        "mirrors": sorted(planned_mirrors.get(i, []), key=lambda m: m["to"])},
            "distinct_pps": _num(applied.distinct_pps[i]), "load_pps": _num(load),
            "capacity_use": _num(load / capacity if capacity > 0 else 0.0),
            "headroom_pps": _num(capacity - load), "alpha": _num(problem.alpha[i]),
            "beta": _num(problem.beta[i]), "weight": _num(problem.weight[i]),
            **dc.server_extras.get(name, {})}
    return hosts


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_servers=9), st.sampled_from(["exact", "reduced", "noncollab"]))
def test_columns_equal_the_per_host_writer(dc, solver):
    solution = solve(dc, solver, lp_backend="highs") if solver == "reduced" else solve(dc, solver)
    plan = build_plan(dc, solution)
    expected = reference_hosts(solution.problem, realise(solution))
    got = plan["hosts"]
    assert got == expected
    for name, host in got.items():  # same types too (an int is not a float in JSON)
        assert {k: type(v) for k, v in host.items()} == \
            {k: type(v) for k, v in expected[name].items()}


def test_floor_samples_hosts_that_sample_nothing():
    matrix = np.array([[9e5, 1e5, 0.0], [0.0, 2e5, 0.0], [0.0, 0.0, 0.0]])  # s3 sends nothing
    dc = DataCentre.from_matrix(np.array([2e6, 2e6, 2e6]), 1.54, 0.46, matrix)
    solution = solve(dc)
    plain = build_plan(dc, solution)
    idle = [name for name, host in plain["hosts"].items() if host["sflow_sampling"] is None]
    assert idle
    floored = build_plan(dc, solution, floor=4096)
    for name, host in floored["hosts"].items():
        if name in idle:
            assert (host["sflow_sampling"], host["local_rate"]) == (4096, 1 / 4096)
            assert {**host, "sflow_sampling": None, "local_rate": 0.0} == plain["hosts"][name]
        else:
            assert host == plain["hosts"][name]
    assert floored["plan_id"] != plain["plan_id"]
    assert floored["summary"] == plain["summary"]


EDGES = [0.0, -0.0, 5e-324, 1e-300, 1e300, 1.7976931348623157e308, 0.5, 1e12 - 0.5,
         999999999999.5, 9999999999995.0, 0.1, 1 / 3, 2 / 3, 1e22, 1e23, 1e-22, 1e-23, 123456.5]


@pytest.mark.parametrize("seed", range(4))
def test_significant_is_the_string_rounding(seed):
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.lognormal(0, 30, 200_000), -rng.lognormal(5, 5, 50_000),
                             1.0 / np.arange(1, 50_000), np.arange(50_000) * 0.1,
                             np.round(rng.uniform(0, 1e6, 50_000), 1) + 0.05, EDGES])
    got = significant(values, None, "x")
    expected = np.array([_num(v) for v in values.tolist()])
    assert np.array_equal(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_significant_names_a_non_finite_value():
    with pytest.raises(PlannerError, match=r"^hosts\.s2\.load_pps: not a finite number \(nan\)$"):
        significant(np.array([1.0, 2.0, np.nan]), ("s0", "s1", "s2"), "load_pps")
    with pytest.raises(PlannerError, match=r"^mirrors\.rate: not a finite number \(inf\)$"):
        significant(np.array([np.inf]), None, "mirrors.rate")


def test_compact_bytes_splice_the_hosts_serialised_once():
    """The published bytes equal a fresh serialisation of the whole plan, version changed."""
    import orjson

    from cosample.planner.planfile import compact_json, plan_id, serialised_hosts
    matrix = np.array([[9e5, 1e5, 0.0], [0.0, 2e5, 3e4], [1e3, 0.0, 5e4]])
    dc = DataCentre.from_matrix(np.array([2e6, 1.5e6, 2e6]), 1.54, 0.46, matrix)
    plan = build_plan(dc, solve(dc), floor=64)
    assert serialised_hosts(plan) == orjson.dumps(plan["hosts"], option=orjson.OPT_SORT_KEYS)
    published = dict(plan, version=12)
    assert compact_json(published, serialised_hosts(plan)) == orjson.dumps(
        published, option=orjson.OPT_SORT_KEYS)
    assert plan["plan_id"] == plan_id(dict(plan))  # the same id from a plain dict
    assert serialised_hosts(dict(plan)) is None
