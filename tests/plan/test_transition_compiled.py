"""The compiled first phase (cosample/plan/_transition.c) against the Python transition it
stands in for: the same host table bytes, plan set bytes and plan_id on plans the planner
writes (sFlow and ``sample`` servers, traffic moved between the two plans), on random host
tables, and by hand on each rule of ``_lower``; None (the Python path) where it must not
guess, and the Python path then gives the plan set."""

from __future__ import annotations

import dataclasses
import math
import random
import struct
from datetime import datetime, timedelta, timezone

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import datacentres, moved  # tests/ is on sys.path (pytest pythonpath)

from cosample.controller.publish import render
from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan import transition
from cosample.plan.document import parse_document, plan_head
from cosample.planner import solve
from cosample.planner.planbytes import HostTable, compact_json
from cosample.planner.planfile import build_plan

_transition = transition._transition
SORTED = orjson.OPT_SORT_KEYS
# whole seconds from the test run's start: nothing here ages as CI runs on later days
START = datetime.now(timezone.utc).replace(microsecond=0)


def test_the_transition_is_compiled():
    # setup.py builds it with pip install; without it the controller parses both host tables
    # and lowers them in Python (about 6 s of a 17 s cycle at 10^6 hosts)
    assert _transition is not None


def lower(old: dict, new: dict) -> bytes | None:
    return _transition.lower(
        orjson.dumps(old, option=SORTED), orjson.dumps(new, option=SORTED), SAMPLE_PROBABILITY_SCALE
    )


def python_phase1(old: dict, new: dict) -> bytes:
    """Phase 1's host table as the Python path writes it (plan_set on parsed tables)."""
    document = transition.plan_set(
        {"hosts": old}, {"hosts": new}, 1, 2, START + timedelta(hours=1), START, 60.0
    )
    return orjson.dumps(document["plans"][0]["hosts"], option=SORTED)


def same_as_python(old: dict, new: dict) -> bool:
    """Asserts the compiled table equals the Python one; False if it declined (None)."""
    got = lower(old, new)
    try:
        expected = python_phase1(old, new)
    except (KeyError, TypeError, ValueError):
        assert got is None  # Python refuses it: the compiled path must not have an answer
        return False
    if got is None:
        return False
    assert got == expected
    return True


# numbers ---------------------------------------------------------------------------------------
def _random_doubles(count: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(x):
            out.append(x)
        out.append(rng.uniform(-1, 1) * 10.0 ** rng.randint(-25, 25))
    return out


EDGES = [
    0.0,
    -0.0,
    1e-5,
    9.999999999999999e-6,
    1e-6,
    1e16,
    9999999999999998.0,
    1e15,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    0.1,
    1 / 3,
    123.0,
    1.5e16,
    1e-300,
]


#: drawn when the test runs, not at collection: every pytest-xdist worker collects this module
FLOATS = {
    "edges": lambda: EDGES,
    "random": lambda: _random_doubles(100_000, 1),
    "probabilities": lambda: [p / SAMPLE_PROBABILITY_SCALE for p in range(65536)],
}


@pytest.mark.parametrize("floats", list(FLOATS))
def test_floats_are_written_as_orjson_writes_them(floats):
    values = FLOATS[floats]()
    wrong = [x for x in values if _transition.format_float(x) != orjson.dumps(x)]
    assert wrong == []


@settings(max_examples=300, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False),
)
def test_a_minimum_is_written_as_python_writes_it(a, b):
    # the text of each is orjson's (any digits count, exponent or not): the smaller is written
    # from its own digits or from repr's, the same bytes either way
    old = {
        "h": {"local_rate": a, "sflow_sampling": 4, "mirrors": [{"to": "p", "rate": a}]},
        "p": {
            "local_rate": 1.0,
            "sflow_sampling": 1,
            "receives": [{"from": "h", "rate": a, "pps": b}],
        },
    }
    new = {
        "h": {"local_rate": b, "sflow_sampling": 8, "mirrors": [{"to": "p", "rate": b}]},
        "p": {
            "local_rate": 1.0,
            "sflow_sampling": 1,
            "receives": [{"from": "h", "rate": b, "pps": a}],
        },
    }
    assert same_as_python(old, new)


# plans the planner writes ----------------------------------------------------------------------
def _with_sample(dc, rng: np.random.Generator):
    """Some servers may use the ``sample`` mechanism (cheaper than sFlow: often chosen)."""
    n = dc.size
    may = rng.uniform(size=n) < 0.5
    alpha_sample = np.where(
        may, np.asarray(dc.alpha, dtype=float) * rng.uniform(0.1, 0.8, n), np.nan
    )
    domains = np.where(may, np.arange(1, n + 1), 0).astype(np.int64)
    return dataclasses.replace(dc, alpha_sample=alpha_sample, observation_domain=domains)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datacentres(max_servers=9),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.sampled_from(["exact", "noncollab"]),
    st.sampled_from(["none", "old", "new", "both"]),
    st.booleans(),
)
def test_planned_transitions_are_the_python_ones(dc, seed, drop, old_solver, sample, report):
    rng = np.random.default_rng(seed)
    now = START + timedelta(seconds=seed % 10**6)
    next_dc = moved(dc, seed, drop)
    if sample in ("old", "both"):
        dc = _with_sample(dc, rng)
    if sample in ("new", "both"):
        next_dc = _with_sample(next_dc, rng)
    old = build_plan(
        dc, solve(dc, old_solver), created=now, version=10, lazy_hosts=True, report=report
    )
    new = build_plan(
        next_dc, solve(next_dc), created=now, version=11, lazy_hosts=True, report=report
    )
    head = plan_head(new, "new plan")
    expires = head.expires
    parsed_old = {**old, "hosts": orjson.loads(old["hosts"].json)}
    parsed_new = {**new, "hosts": orjson.loads(new["hosts"].json)}
    expected = transition.plan_set(parsed_old, parsed_new, 10, 11, expires, now, 120.0)
    lowered = transition.compiled_lower(old["hosts"], new["hosts"])
    assert lowered is not None  # the planner's tables are the fast case
    assert lowered == compact_json(expected["plans"][0]["hosts"])
    got = transition.plan_set(
        old, new, 10, 11, expires, now, 120.0, table=lambda data: HostTable([data])
    )
    assert isinstance(got["plans"][0]["hosts"], HostTable)
    assert got["plans"][0]["plan_id"] == expected["plans"][0]["plan_id"]
    assert compact_json(got) == compact_json(expected)
    # the controller's render: the same bytes from HostTables as from parsed tables
    rendered = render(new, 11, None, previous=old, now=now, settle_s=120.0)
    assert (
        rendered.data
        == render(parsed_new, 11, None, previous=parsed_old, now=now, settle_s=120.0).data
    )
    assert [p.version for p in parse_document(rendered.data)] == [11, 12]


# random host tables ----------------------------------------------------------------------------
NAMES = st.text(alphabet="abs01._-é€", min_size=1, max_size=4)
FLOAT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(0, 1),
    st.integers(0, 65535).map(lambda p: p / 65535),
)


APPMON = st.fixed_dictionaries(
    {
        "share": st.sampled_from([1, 1.0, True, 0.5, -0.0, 0, False]),
        "to": st.sampled_from([None, "a", "b"]),
    },
    optional={
        "service": st.fixed_dictionaries({"port": st.sampled_from([80, 80.0, 8080])}),
        "segments": st.lists(st.sampled_from([0, 0.0, 1]), max_size=2),
    },
)


@st.composite
def host_tables(draw):
    pool = draw(st.lists(NAMES, min_size=1, max_size=8, unique=True))
    peers = st.lists(st.sampled_from(pool), max_size=len(pool), unique=True).map(sorted)

    def entry():
        out = {"role": draw(st.sampled_from(["sender", "receiver", "idle"]))}
        mechanism = draw(st.sampled_from([None, "sflow", "sample"]))
        if mechanism is not None:
            out["local_mechanism"] = mechanism
        if mechanism == "sample":
            probability = draw(st.integers(0, 65535))
            out.update(
                sample_probability=probability,
                local_rate=probability / 65535,
                observation_domain=draw(st.integers(1, 9)),
                sflow_sampling=None,
            )
        else:
            out["local_rate"] = draw(FLOAT)
            if draw(st.integers(0, 4)):
                out["sflow_sampling"] = draw(st.one_of(st.none(), st.integers(0, 4096)))
            if mechanism == "sflow" and draw(st.booleans()):
                out.update(sample_probability=None, observation_domain=None)
        for key, other in (("mirrors", "to"), ("receives", "from")):
            if draw(st.integers(0, 5)):
                items = []
                for peer in draw(peers):
                    item = {other: peer, "rate": draw(FLOAT)}
                    if key == "receives" or draw(st.booleans()):
                        item["pps"] = draw(FLOAT)
                    if draw(st.integers(0, 4)) == 0:
                        item["x"] = draw(st.sampled_from([1, "y", None, [1, {"b": 2}]]))
                    items.append(item)
                out[key] = items
            elif draw(st.booleans()):
                out[key] = None
        if draw(st.integers(0, 2)) == 0:  # application mirrors: values that compare equal
            out["appmon"] = draw(st.lists(APPMON, max_size=3))  # across texts (1, 1.0, true)
        if draw(st.booleans()):
            out["tunnel_ip"] = "10.0.0.1"
        return out

    old = {name: entry() for name in draw(st.lists(st.sampled_from(pool), unique=True))}
    new = {name: entry() for name in draw(st.lists(st.sampled_from(pool), unique=True))}
    for table in (old, new):  # sometimes a pair both sides keep, so that pruning has work
        names = sorted(table)
        if len(names) > 1 and draw(st.booleans()):
            a, b = names[0], names[-1]
            table[a]["mirrors"] = [{"rate": 0.5, "to": b}]
            table[b]["receives"] = [{"from": a, "pps": 10.0, "rate": 0.5}]
    return old, new


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host_tables())
def test_random_tables_are_the_python_ones(tables):
    old, new = tables
    compiled = same_as_python(old, new)
    # everything drawn here is the fast case (floats, ints, sorted lists, no appmon)
    assert compiled


# by hand ---------------------------------------------------------------------------------------
def sflow(rate, n, **more):
    return {"local_rate": rate, "sflow_sampling": n, "mirrors": [], "receives": [], **more}


def sample(probability, domain=7, **more):
    return {
        "local_mechanism": "sample",
        "sample_probability": probability,
        "observation_domain": domain,
        "sflow_sampling": None,
        "local_rate": probability / 65535,
        "mirrors": [],
        "receives": [],
        **more,
    }


def phase1(old, new) -> dict:
    got = lower(old, new)
    assert got is not None and got == python_phase1(old, new)
    return orjson.loads(got)


def test_both_sample_take_the_smaller_probability():
    got = phase1({"h": sample(20000), "g": sample(7)}, {"h": sample(13107), "g": sample(9)})
    assert got["h"]["sample_probability"] == 13107 and got["g"]["sample_probability"] == 7
    assert got["h"]["local_rate"] == 13107 / 65535 and got["h"]["local_mechanism"] == "sample"


def test_mechanisms_that_differ_switch_local_sampling_off_without_sample_keys():
    for old, new in (
        (sflow(0.5, 2), sample(100)),
        (sample(100), sflow(0.5, 2, local_mechanism="sflow")),
    ):
        got = phase1({"h": old}, {"h": new})["h"]
        assert got["local_rate"] == 0.0 and got["sflow_sampling"] is None
        assert not {"local_mechanism", "sample_probability", "observation_domain"} & set(got)


def test_both_sflow_take_the_sparser_sampling_or_none():
    got = phase1(
        {"a": sflow(0.25, 4), "b": sflow(0.5, 2), "c": sflow(0.5, None), "d": sflow(0.0, 8)},
        {"a": sflow(0.5, 2), "b": sflow(0.125, 8), "c": sflow(0.5, 2), "d": sflow(0.5, 2)},
    )
    assert (got["a"]["local_rate"], got["a"]["sflow_sampling"]) == (0.25, 4)
    assert (got["b"]["local_rate"], got["b"]["sflow_sampling"]) == (0.125, 8)
    for off in "cd":
        assert (got[off]["local_rate"], got[off]["sflow_sampling"]) == (0.0, None)


def test_hosts_only_in_one_plan():
    got = phase1(
        {"gone": sflow(1.0, 1), "both": sflow(1.0, 1), "empty": {}},
        {
            "both": sflow(0.5, 2),
            "new": sflow(1.0, 1),
            "newsample": sample(9),
            "empty": sflow(1.0, 1),
        },
    )
    assert set(got) == {"both", "new", "newsample", "empty"}
    assert got["new"]["sflow_sampling"] is None and got["empty"]["local_rate"] == 0.0
    assert "sample_probability" not in got["newsample"]


def test_members_lower_adds_are_inserted_in_key_order():
    new = {"h": {"a": 1, "local_rate": 0.5, "role": "sender", "z": 2}}  # no sflow_sampling,
    got = lower({"h": sflow(0.5, 2)}, new)  # no lists
    assert got == python_phase1({"h": sflow(0.5, 2)}, new)
    assert (
        got == b'{"h":{"a":1,"local_rate":0.0,"mirrors":[],"receives":[],"role":"sender",'
        b'"sflow_sampling":null,"z":2}}'
    )


def pair(rate_m, rate_r, pps=10.0):
    return ({"rate": rate_m, "to": "r"}, {"from": "s", "pps": pps, "rate": rate_r})


def test_pairs_take_the_smaller_rate_and_pps_and_are_pruned_on_both_sides():
    m_old, r_old = pair(0.5, 0.5, 30.0)
    m_new, r_new = pair(0.25, 0.25, 40.0)
    old = {
        "s": sflow(1.0, 1, mirrors=[m_old]),
        "r": sflow(1.0, 1, receives=[r_old]),
        "t": sflow(1.0, 1, mirrors=[{"rate": 0.1, "to": "r"}]),
    }
    new = {
        "s": sflow(1.0, 1, mirrors=[m_new]),
        "r": sflow(1.0, 1, receives=[r_new]),
        "t": sflow(1.0, 1, mirrors=[{"rate": 0.2, "to": "r"}]),
    }
    got = phase1(old, new)
    assert got["s"]["mirrors"] == [{"rate": 0.25, "to": "r"}]
    assert got["r"]["receives"] == [{"from": "s", "pps": 30.0, "rate": 0.25}]
    assert got["t"]["mirrors"] == []  # r receives nothing from t in either plan
    # the receiver's side only in NEW: the sender's mirror goes too
    old["r"]["receives"] = []
    got = phase1(old, new)
    assert got["s"]["mirrors"] == [] and got["r"]["receives"] == []
    # the sender's side only in OLD: the receiver's receive goes
    old["r"]["receives"], new["s"]["mirrors"] = [r_old], []
    got = phase1(old, new)
    assert got["s"]["mirrors"] == [] and got["r"]["receives"] == []


def test_a_pps_only_new_has_is_kept_as_it_is():
    old = {
        "s": sflow(1.0, 1, mirrors=[{"rate": 0.5, "to": "r"}]),
        "r": sflow(1.0, 1, receives=[{"from": "s", "rate": 0.5}]),
    }
    new = {
        "s": sflow(1.0, 1, mirrors=[{"rate": 0.75, "to": "r"}]),
        "r": sflow(1.0, 1, receives=[{"from": "s", "pps": 1e-7, "rate": 0.75}]),
    }
    assert phase1(old, new)["r"]["receives"] == [{"from": "s", "pps": 1e-7, "rate": 0.5}]


def raw(table: dict) -> bytes:
    return orjson.dumps(table, option=SORTED)


@pytest.mark.parametrize(
    "old, new",
    [
        # an integer literal where _lower reads a float (Python writes 1.0)
        ({"h": sflow(1, 2)}, {"h": sflow(0.5, 2)}),
        (
            {
                "s": sflow(
                    1.0, 1, mirrors=[{"rate": 1, "to": "s"}], receives=[{"from": "s", "rate": 1.0}]
                )
            },
            {
                "s": sflow(
                    1.0,
                    1,
                    mirrors=[{"rate": 0.5, "to": "s"}],
                    receives=[{"from": "s", "rate": 0.5}],
                )
            },
        ),
        # a float where _lower reads an integer
        ({"h": sample(5)}, {"h": {**sample(5), "sample_probability": 5.0}}),
        ({"h": sflow(0.5, 2.0)}, {"h": sflow(0.5, 2)}),
        # an unknown mechanism, a peer that is not a string, lists out of order or repeated
        ({"h": sflow(0.5, 2)}, {"h": sflow(0.5, 2, local_mechanism="tc")}),
        ({"h": sflow(0.5, 2, mirrors=[{"rate": 0.5, "to": 3}])}, {"h": sflow(0.5, 2)}),
        (
            {"h": sflow(0.5, 2)},
            {"h": sflow(0.5, 2, mirrors=[{"rate": 0.5, "to": "b"}, {"rate": 0.5, "to": "a"}])},
        ),
        (
            {"h": sflow(0.5, 2, mirrors=[{"rate": 0.5, "to": "a"}, {"rate": 0.5, "to": "a"}])},
            {"h": sflow(0.5, 2)},
        ),
        # application mirrors null (Python iterates None), or not objects
        ({"h": sflow(0.5, 2, appmon=None)}, {"h": sflow(0.5, 2, appmon=[])}),
        ({"h": sflow(0.5, 2)}, {"h": sflow(0.5, 2, appmon=None)}),
        ({"h": sflow(0.5, 2, appmon=[1])}, {"h": sflow(0.5, 2, appmon=[1])}),
        # an appmon value equal or not only beyond a double's exact integers
        (
            {"h": sflow(0.5, 2, appmon=[{"n": 2**60}])},
            {"h": sflow(0.5, 2, appmon=[{"n": 2.0**60}])},
        ),
        # a name with an escape (a backslash): names would not compare as their bytes
        ({"a\\b": sflow(0.5, 2)}, {"a\\b": sflow(0.5, 2)}),
        # a value _lower reads missing: Python raises (KeyError)
        ({"h": sflow(0.5, 2)}, {"h": {"sflow_sampling": 2}}),
        ({"h": sample(5)}, {"h": {**sample(5), "sample_probability": None}}),
    ],
)
def test_unusual_tables_are_left_to_python(old, new):
    assert lower(old, new) is None


def test_unsorted_keys_are_left_to_python():
    old = raw({"h": sflow(0.5, 2)})
    assert _transition.lower(old, b'{"h":{"sflow_sampling":2,"local_rate":0.5}}', 65535) is None
    assert _transition.lower(old, b'{"h":{"local_rate":0.5,"sflow_sampling":2}}', 65535) is not None
    unsorted = (
        b'{"h":{"local_rate":0.5,"mirrors":[{"to":"h","rate":0.5}],'
        b'"receives":[{"from":"h","rate":0.5}],"sflow_sampling":2}}'
    )  # a kept item
    mirrored = raw(
        {
            "h": sflow(
                0.5, 2, mirrors=[{"rate": 0.5, "to": "h"}], receives=[{"from": "h", "rate": 0.5}]
            )
        }
    )
    assert _transition.lower(mirrored, unsorted, 65535) is None
    assert (
        _transition.lower(
            mirrored, unsorted.replace(b'"to":"h","rate":0.5', b'"rate":0.5,"to":"h"'), 65535
        )
        == mirrored
    )
    assert _transition.lower(b'{"b":{},"a":{}}', raw({"a": {}}), 65535) is None


def test_where_the_compiled_path_declines_plan_set_lowers_in_python():
    old = {"h": sflow(1, 2)}  # an integer: Python's float() reads it, the compiled path not
    new = {"h": sflow(0.25, 4)}
    tables = [HostTable([raw(old)]), HostTable([raw(new)])]
    assert transition.compiled_lower(*tables) is None
    got = transition.plan_set(
        {"hosts": tables[0]},
        {"hosts": tables[1]},
        1,
        2,
        START + timedelta(hours=1),
        START,
        60.0,
        table=lambda data: HostTable([data]),
    )
    assert not isinstance(got["plans"][0]["hosts"], HostTable)
    assert orjson.dumps(got["plans"][0]["hosts"], option=SORTED) == python_phase1(old, new)


def test_signed_zeros_follow_pythons_min():
    # min(a, b) is a unless b < a: -0.0 and 0.0 are equal, so the first (NEW's rate) stays
    for first, second in ((-0.0, 0.0), (0.0, -0.0)):
        old = {
            "s": sflow(
                1.0,
                1,
                mirrors=[{"rate": second, "to": "s"}],
                receives=[{"from": "s", "rate": second}],
            )
        }
        new = {
            "s": sflow(
                1.0,
                1,
                mirrors=[{"rate": first, "to": "s"}],
                receives=[{"from": "s", "rate": first}],
            )
        }
        got = lower(old, new)
        assert got == python_phase1(old, new)
        assert got.count(b'"rate":' + orjson.dumps(first)) == 2


def test_a_number_written_with_more_digits_than_it_needs_is_written_shortest():
    # 0.10000000000000001 is the double 0.1: Python writes 0.1 (from repr's digits)
    old = b'{"s":{"local_rate":0.10000000000000001,"sflow_sampling":2}}'
    new = raw({"s": sflow(0.5, 4)})
    got = _transition.lower(old, new, SAMPLE_PROBABILITY_SCALE)
    assert got == python_phase1(orjson.loads(old), orjson.loads(new))
    assert b'"local_rate":0.1,' in got


def test_application_mirrors_are_those_both_plans_have():
    entry = {"service": {"address": "10.1.0.5", "port": 80}, "share": 1.0, "to": None}
    old = {
        "h": sflow(0.5, 2, appmon=[entry, {**entry, "share": 0.5}]),
        "g": sflow(0.5, 2, appmon=[entry]),
        "f": sflow(0.5, 2),
    }
    new = {
        "h": sflow(0.5, 2, appmon=[{**entry, "share": 0.25}, {**entry, "share": 1}]),
        "g": sflow(0.5, 2),
        "f": sflow(0.5, 2, appmon=[entry]),
        "e": sflow(0.5, 2, appmon=[entry]),
    }
    got = phase1(old, new)
    # 1 == 1.0: NEW's entry kept as NEW writes it; 0.25 is below the share of OLD's first entry
    # that differs in its share only (1.0): NEW's; a key only OLD has is inserted (empty)
    assert got["h"]["appmon"] == [{**entry, "share": 0.25}, {**entry, "share": 1}]
    assert b'"share":1,' in lower(old, new)
    assert got["g"]["appmon"] == [] and got["f"]["appmon"] == [] and got["e"]["appmon"] == []


MIRROR = {"mechanism": "port_mirror", "service": {"address": "10.1.0.5", "port": 80}, "to": "a"}


@pytest.mark.parametrize(
    "was, now, phase_1",
    [
        ({**MIRROR, "share": 0.25}, {**MIRROR, "share": 0.5}, {**MIRROR, "share": 0.25}),
        ({**MIRROR, "share": 0.5}, {**MIRROR, "share": 0.25}, {**MIRROR, "share": 0.25}),
        (MIRROR, {**MIRROR, "share": 0.5}, {**MIRROR, "share": 0.5}),  # no share: every connection
        ({**MIRROR, "share": 0.5}, {**MIRROR, "share": None}, {**MIRROR, "share": 0.5}),
        ({**MIRROR, "share": 0.5}, {**MIRROR, "to": "b", "share": 0.25}, None),  # another host
        ({**MIRROR, "share": 0.5}, {**MIRROR, "mechanism": "kernel_mirror", "share": 0.25}, None),
        ({**MIRROR, "share": "half"}, {**MIRROR, "share": 0.25}, None),  # not a number: no twin
    ],
)
def test_an_application_mirror_whose_share_changed_keeps_the_smaller(was, now, phase_1):
    """The same service, mechanism and analysis host in both plans at other shares: phase 1
    keeps it at the smaller share (the entry that has it), so the service stays monitored
    through the transition; anything else that differs drops it until phase 2."""
    got = phase1({"h": sflow(0.5, 2, appmon=[was])}, {"h": sflow(0.5, 2, appmon=[now])})
    assert got["h"]["appmon"] == ([] if phase_1 is None else [phase_1])


@settings(max_examples=300, deadline=None)
@given(st.lists(APPMON, max_size=4), st.lists(APPMON, max_size=4))
def test_random_application_mirror_lists_are_the_python_ones(was, now):
    """One host's lists in both plans: entries equal, equal but in their share (of every
    numeric form, or none), or not, in any order; the compiled path's bytes are Python's."""
    assert same_as_python({"h": sflow(0.5, 2, appmon=was)}, {"h": sflow(0.5, 2, appmon=now)})


SERVICES_BASE = {
    "cost": {"alpha": 1.0, "beta": 0.5},
    "servers": [
        {"name": "web1", "capacity_pps": 20000, "tunnel_ip": "10.0.0.1"},
        {"name": "idle1", "capacity_pps": 50000, "tunnel_ip": "10.0.0.2"},
    ],
    "traffic_pps": {"web1": {"web1": 12000}, "idle1": {"idle1": 100}},
    "services": [
        {
            "server": "web1",
            "address": "10.1.0.5",
            "port": 80,
            "interface": "vm-web1",
            "request_rate": 200,
        },
        {"server": "web1", "address": "10.1.0.6", "port": 8080, "truncate_bytes": 78, "weight": 2},
    ],
}


@pytest.mark.parametrize("web_pps, rate", [(12000, 200), (15000, 400), (6000, 200)])
def test_planned_application_mirrors_are_the_python_ones(web_pps, rate):
    from cosample.planner.datacentre import DataCentre

    second = {
        **SERVICES_BASE,
        "traffic_pps": {"web1": {"web1": web_pps}, "idle1": {"idle1": 100}},
        "services": [
            {**SERVICES_BASE["services"][0], "request_rate": rate},
            SERVICES_BASE["services"][1],
        ],
    }
    plans = []
    for description in (SERVICES_BASE, second):
        dc = DataCentre.from_dict(description)
        plans.append(build_plan(dc, solve(dc), created=START, lazy_hosts=True, report=False))
    old, new = plans
    assert any(entry["appmon"] for entry in old["hosts"].parsed().values())
    lowered = transition.compiled_lower(old["hosts"], new["hosts"])
    expected = transition.plan_set(
        {**old, "hosts": orjson.loads(old["hosts"].json)},
        {**new, "hosts": orjson.loads(new["hosts"].json)},
        1,
        2,
        plan_head(new, "new plan").expires,
        START,
        60.0,
    )
    assert lowered is not None and lowered == compact_json(expected["plans"][0]["hosts"])


@pytest.mark.parametrize(
    "was, now, kept",
    [
        ({"segments": [0]}, {"segments": [0, 1]}, False),
        ({"segments": [0, 1]}, {"segments": [0]}, False),
        ({"to": "a"}, {"to": "b"}, False),
        ({"to": "a"}, {"to": None}, False),
        ({"x": 1}, {"y": 1}, False),
        ({"x": 1}, {"x": 1, "y": 1}, False),
        ({"x": [1]}, {"x": {"a": 1}}, False),
        ({"share": True}, {"share": 1}, True),
        ({"share": -0.0}, {"share": 0}, True),
        ({"port": 80}, {"port": 80.0}, True),
        ({"port": 80.5}, {"port": 80}, False),
        ({"x": [1, {"a": False}]}, {"x": [1.0, {"a": 0}]}, True),
    ],
)
def test_application_mirror_entries_compare_as_python_compares_them(was, now, kept):
    old = {"h": sflow(0.5, 2, appmon=[was])}
    new = {"h": sflow(0.5, 2, appmon=[now])}
    assert phase1(old, new)["h"]["appmon"] == ([now] if kept else [])
