"""The column-wise plan writer is the per-host one it replaced, bit for bit.

``planfile._host_table`` writes 10^5 host entries from whole columns, as bytes, without a dict
per host (the controller's publishing cycle); the reference below is the loop it replaced, one
host and one ``float(f"{v:.12g}")`` at a time, serialised by orjson. Both must give the same
bytes on random data centres, with every planning option and any inventory extras, and
``significant`` must equal the string rounding on every value, edge cases included.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import planning_inputs  # tests/ is on sys.path (pytest pythonpath)

from cosample.plan.formats import REPORT_FORMAT
from cosample.planner import hostjson, hostlists, jsonpieces, solve
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.planbytes import HostTable, compact_json
from cosample.planner.planfile import AGENT_FIELDS, _roles, build_plan, host_report, significant
from cosample.planner.realise import realise


def _num(value):
    return float(f"{float(value):.12g}")


def reference_hosts(problem, applied):
    """The per-host writer as it was (planner/planfile.py before the column-wise one)."""
    dc = problem.dc
    own = problem.own_pps
    mirrors, receives = {}, {}
    for i, k, pps in zip(
        applied.mirror_src.tolist(), applied.mirror_dst.tolist(), applied.mirror_pps.tolist()
    ):
        if pps <= 0:
            continue
        rate = pps / own[i]
        mirrors.setdefault(i, []).append({"to": dc.names[k], "rate": _num(rate)})
        receives.setdefault(k, []).append(
            {"from": dc.names[i], "rate": _num(rate), "pps": _num(pps)}
        )
    planned_mirrors = {}
    for i, k, amount in zip(
        applied.mirror_src.tolist(),
        applied.mirror_dst.tolist(),
        applied.planned_mirror_pps.tolist(),
    ):
        if amount > 0:
            planned_mirrors.setdefault(i, []).append(
                {"to": dc.names[k], "rate": _num(amount / own[i])}
            )
    roles = _roles(problem, applied)
    hosts = {}
    for i, name in enumerate(dc.names):
        interval = int(applied.sflow_sampling[i])
        capacity = float(problem.capacity_pps[i])
        load = float(applied.load_pps[i])
        hosts[name] = {
            "role": str(roles[i]),
            "capacity_pps": _num(capacity),
            "margin": _num(problem.margin[i]),
            "forwarding_pps": _num(dc.forwarding_pps[i]),
            "own_pps": _num(own[i]),
            "sampled_pps": _num(problem.bridge_pps[i]),
            "local_rate": _num(applied.local_rate[i]),
            "sflow_sampling": interval or None,
            "mirrors": sorted(mirrors.get(i, []), key=lambda m: m["to"]),
            "receives": sorted(receives.get(i, []), key=lambda m: m["from"]),
            "planned": {
                "local_rate": _num(applied.planned_rate[i]),
                "mirrors": sorted(planned_mirrors.get(i, []), key=lambda m: m["to"]),
            },
            "distinct_pps": _num(applied.distinct_pps[i]),
            "load_pps": _num(load),
            "capacity_use": _num(load / capacity if capacity > 0 else 0.0),
            "headroom_pps": _num(capacity - load),
            "alpha": _num(problem.alpha[i]),
            "beta": _num(problem.beta[i]),
            "weight": _num(problem.weight[i]),
            **dc.server_extras.get(name, {}),
        }
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
        assert {k: type(v) for k, v in host.items()} == {
            k: type(v) for k, v in expected[name].items()
        }
    lazy = build_plan(dc, solution, created=plan_time(plan), lazy_hosts=True)
    assert isinstance(lazy["hosts"], HostTable)
    assert lazy["hosts"].json == orjson.dumps(expected, option=orjson.OPT_SORT_KEYS)
    assert lazy["plan_id"] == plan["plan_id"]
    assert (
        compact_json(lazy)
        == compact_json(plan)
        == orjson.dumps({**plan, "hosts": expected}, option=orjson.OPT_SORT_KEYS)
    )
    assert lazy["hosts"] == expected  # parsed on first lookup
    check_lean_plan_and_report(dc, solution, plan, expected)


def check_lean_plan_and_report(dc, solution, plan, expected):
    """``report=False``: the entries keep the agents' fields and the extras, bit for bit, and
    ``host_report`` holds the rest in columns, the same numbers."""
    lean = build_plan(dc, solution, created=plan_time(plan), lazy_hosts=True, report=False)
    again = build_plan(dc, solution, created=plan_time(plan) + timedelta(hours=1), report=False)
    assert again["plan_id"] == lean["plan_id"] != plan["plan_id"]  # stable for the same input
    agents = {
        name: {
            key: value
            for key, value in host.items()
            if key in AGENT_FIELDS or key in dc.server_extras.get(name, {})
        }
        for name, host in expected.items()
    }
    assert lean["hosts"].json == orjson.dumps(agents, option=orjson.OPT_SORT_KEYS)
    assert {key: value for key, value in lean.items() if key not in ("hosts", "plan_id")} == {
        key: value for key, value in plan.items() if key not in ("hosts", "plan_id")
    }
    report = orjson.loads(host_report(solution, lean))
    assert (report["format"], report["plan_id"], report["version"]) == (
        REPORT_FORMAT,
        lean["plan_id"],
        lean["version"],
    )
    assert report["names"] == list(dc.names)
    left = (
        {key for host in expected.values() for key in host}
        - set(AGENT_FIELDS)
        - {key for extra in dc.server_extras.values() for key in extra}
    )
    assert left == set(report) - {"format", "format_version", "plan_id", "version", "names"}
    for key in left - {"planned"}:
        assert report[key] == [expected[name][key] for name in dc.names]
    planned = report["planned"]
    assert planned["local_rate"] == [expected[name]["planned"]["local_rate"] for name in dc.names]
    pairs = sorted(
        zip(planned["mirrors"]["from"], planned["mirrors"]["to"], planned["mirrors"]["rate"])
    )
    assert pairs == sorted(
        (name, mirror["to"], mirror["rate"])
        for name in dc.names
        for mirror in expected[name]["planned"]["mirrors"]
    )


def plan_time(plan):
    return datetime.fromisoformat(plan["created"].replace("Z", "+00:00"))


NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)
EXTRA_KEYS = st.sampled_from(
    ["bridge", "tunnel_ip", "vm_ports", "role", "alpha", "zz", "%s", 'a"b', "\u00e9"]
)
EXTRA_VALUES = st.one_of(
    st.text(max_size=5),
    st.integers(-10, 10),
    st.none(),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.sampled_from(["b", "a", ","]), st.integers(-5, 5), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(NAMES, min_size=0, max_size=8, unique=True), st.data())
def test_host_table_is_orjson_of_the_dicts(names, data):
    """Names with quotes, commas, % and any Unicode; extras on some hosts, with different key
    sets, some named like a field (the extra wins, as ``dict.update``); numbers as arrays and
    as JSON, a column with one value throughout (folded into the block's text: 0.0 and -0.0
    are two values), a nested object of columns."""
    n = len(names)
    floats = data.draw(
        st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=n, max_size=n)
    )
    counts = data.draw(
        st.lists(st.one_of(st.none(), st.integers(1, 2**40)), min_size=n, max_size=n)
    )
    same = data.draw(st.lists(st.sampled_from([0.0, -0.0, 1.5]), min_size=n, max_size=n))
    extras = {
        name: data.draw(st.dictionaries(EXTRA_KEYS, EXTRA_VALUES, max_size=3))
        for name in names
        if data.draw(st.booleans())
    }
    fields = {
        "alpha": jsonpieces.numbers(floats),
        "beta": np.asarray(floats, dtype=float),
        "margin": np.asarray(same, dtype=float),
        "sflow_sampling": np.array(counts, dtype=object),
        "role": jsonpieces.strings(["sender"] * n),
        "mirrors": {
            "to": jsonpieces.strings(names),
            "rate": jsonpieces.numbers(floats),
            "inner": {"k": np.asarray(same, dtype=float)},
        },
    }
    expected = {
        name: {
            "alpha": f,
            "beta": f,
            "margin": m,
            "sflow_sampling": c,
            "role": "sender",
            "mirrors": {"to": name, "rate": f, "inner": {"k": m}},
            **extras.get(name, {}),
        }
        for name, f, m, c in zip(names, floats, same, counts)
    }
    for block in (1, 2, 4096):  # written a block of hosts at a time
        got = b"".join(hostjson.table(names, fields, extras, block=block))
        assert got == orjson.dumps(expected, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize(
    "names", [["a", "b\\u0000c", "d"], ["a\x00", "b"], ["\\", "\\u0000"], ["é", "\n"]]
)
def test_strings_are_orjsons(names):
    assert jsonpieces.strings(names) == [orjson.dumps(name) for name in names]


def test_grouped_lists_follow_the_peer_order():
    owner, peer = np.array([2, 0, 2, 2]), np.array([5, 1, 3, 4])
    fields = {"to": [b'"a"', b'"b"', b'"c"', b'"d"'], "rate": [b"1", b"2", b"3", b"4"]}
    assert hostlists.grouped(owner, peer, fields, 4) == [
        b'[{"rate":2,"to":"b"}]',
        b"[]",
        b'[{"rate":3,"to":"c"},{"rate":4,"to":"d"},{"rate":1,"to":"a"}]',
        b"[]",
    ]
    assert hostlists.grouped(owner[:0], peer[:0], {"to": [], "rate": []}, 2) == [b"[]", b"[]"]
    assert hostlists.grouped(np.array([1]), np.array([0]), {}, 2) == [b"[]", b"[{}]"]


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


EDGES = [
    0.0,
    -0.0,
    5e-324,
    1e-300,
    1e300,
    1.7976931348623157e308,
    0.5,
    1e12 - 0.5,
    999999999999.5,
    9999999999995.0,
    0.1,
    1 / 3,
    2 / 3,
    1e22,
    1e23,
    1e-22,
    1e-23,
    123456.5,
]


@pytest.mark.parametrize("seed", range(4))
def test_significant_is_the_string_rounding(seed):
    rng = np.random.default_rng(seed)
    values = np.concatenate(
        [
            rng.lognormal(0, 30, 200_000),
            -rng.lognormal(5, 5, 50_000),
            1.0 / np.arange(1, 50_000),
            np.arange(50_000) * 0.1,
            np.round(rng.uniform(0, 1e6, 50_000), 1) + 0.05,
            EDGES,
        ]
    )
    got = significant(values, None, "x")
    expected = np.array([_num(v) for v in values.tolist()])
    assert np.array_equal(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("value", EDGES + [1.54, -0.46, 1e-7 / 3])
def test_significant_of_one_value_throughout(value):
    """A column of one value (alpha, margin, weight in most fleets) is rounded once: the same
    bits, the sign of zero included, as every element rounded alone."""
    got = significant(np.full(1000, value), None, "x")
    assert np.array_equal(got.view(np.int64), np.full(1000, _num(value)).view(np.int64))


def test_significant_names_a_non_finite_value():
    with pytest.raises(PlannerError, match=r"^hosts\.s2\.load_pps: not a finite number \(nan\)$"):
        significant(np.array([1.0, 2.0, np.nan]), ("s0", "s1", "s2"), "load_pps")
    with pytest.raises(PlannerError, match=r"^mirrors\.rate: not a finite number \(inf\)$"):
        significant(np.array([np.inf]), None, "mirrors.rate")


def test_compact_bytes_splice_the_host_table():
    """The published bytes, a plan's or a plan set's, equal a fresh serialisation of the whole
    document with its host tables parsed; plan_id is the same from the parsed plan."""
    from cosample.planner.planbytes import plan_id

    matrix = np.array([[9e5, 1e5, 0.0], [0.0, 2e5, 3e4], [1e3, 0.0, 5e4]])
    dc = DataCentre.from_matrix(np.array([2e6, 1.5e6, 2e6]), 1.54, 0.46, matrix)
    plan = build_plan(dc, solve(dc), floor=64, lazy_hosts=True)
    parsed = {**plan, "hosts": dict(plan["hosts"])}
    published = dict(plan, version=12)
    assert compact_json(published) == orjson.dumps(
        {**parsed, "version": 12}, option=orjson.OPT_SORT_KEYS
    )
    other = dict(plan, version=13, note="\u0000 and \x00 in a string")
    document = {"format": "cosample.planset", "plans": [parsed, published, other]}
    assert compact_json(document) == orjson.dumps(
        {
            "format": "cosample.planset",
            "plans": [
                parsed,
                {**parsed, "version": 12},
                {**parsed, "version": 13, "note": "\u0000 and \x00 in a string"},
            ],
        },
        option=orjson.OPT_SORT_KEYS,
    )
    assert plan["plan_id"] == plan_id(parsed)


@given(
    st.lists(st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0, 7.5]), max_size=60),
    st.integers(min_value=1, max_value=8),
)
def test_the_summarys_biggest_losers_are_a_stable_sorts_first(values, count):
    """``rounding._most`` (a partition, then a sort of the few) names the servers a full
    stable sort would, in its order, ties included."""
    from cosample.planner.rounding import _most

    array = np.asarray(values, dtype=float)
    assert _most(array, count).tolist() == np.argsort(-array, kind="stable")[:count].tolist()
