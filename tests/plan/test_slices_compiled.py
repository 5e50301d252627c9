"""The compiled slice builder (cosample/plan/_slices.c) against the Python one it stands in for:
the same names, the same view bytes and the same leaf hashes, each laid end to end in one buffer
(cosample/plan/packed.py) the same way, on random host tables and plan sets; and None (the
Python path) where it must not guess."""

from __future__ import annotations

import hashlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan import merkle, slicebuild, transition
from cosample.plan.packed import Names, Views

_slices = slicebuild._slices
_transition = transition._transition
SORTED = orjson.OPT_SORT_KEYS


def test_the_builder_is_compiled():
    # setup.py builds it with pip install; a missing compiler or libcrypto leaves the controller
    # 7-10x slower at 10^6 hosts (docs/results/controller.md, "Plan slices")
    assert _slices is not None and merkle._compiled_parents is not None


# names: plain, with dots and non-ASCII letters (compared as UTF-8 bytes), some needing escapes
PLAIN = st.text(alphabet="abcs01._-é€", min_size=1, max_size=6)
ESCAPED = st.text(alphabet='ab"\\\n', min_size=1, max_size=4)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(alphabet="ab ,:{}[]", max_size=5),
)
EXTRA = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "to", "hosts", "z"]), inner, max_size=3),
    ),
    max_leaves=6,
)


@st.composite
def tables(draw, names=PLAIN, same_hosts=False):
    """1-3 host tables over one pool of names; ``same_hosts``: all name the same hosts (a plan
    set's phases), each entry drawn apart."""
    pool = draw(st.lists(names, min_size=1, max_size=12, unique=True))
    count = draw(st.integers(1, 3))
    out = []
    shared = (
        draw(st.lists(st.sampled_from(pool), max_size=len(pool), unique=True))
        if same_hosts
        else None
    )
    for _ in range(count):
        hosts = (
            shared
            if same_hosts
            else draw(st.lists(st.sampled_from(pool), min_size=0, max_size=len(pool), unique=True))
        )
        target = st.one_of(st.sampled_from(pool), names, st.none(), st.integers(0, 3))
        table = {}
        for name in hosts:
            entry = {}
            for field in (*slicebuild.PEER_FIELDS, "bridge"):  # the fields views keep, and one not
                if draw(st.booleans()) or field == "role":
                    entry[field] = draw(SCALAR)
            for key, other in (("mirrors", "to"), ("receives", "from"), ("appmon", "to")):
                if draw(st.booleans()):
                    items = []
                    for _ in range(draw(st.integers(0, 3))):
                        item = {"rate": draw(SCALAR), "pps": draw(SCALAR)}
                        if draw(st.integers(0, 5)):
                            item[other] = draw(target)
                        if draw(st.booleans()):
                            item["x"] = draw(EXTRA)
                        items.append(item)
                    entry[key] = items
            if draw(st.booleans()):
                entry["extra"] = draw(EXTRA)
            table[name] = entry
        out.append(table)
    return out


def _compiled(serialised: list[bytes]) -> tuple[Names, Views, bytes] | None:
    built = _slices.views(serialised)
    if built is None:
        return None
    names, name_offsets, views, view_offsets, level = built
    return Names(names, name_offsets), Views(views, view_offsets), level


def _same_as_python(tables_: list[dict]) -> bool:
    """Asserts the compiled result equals the Python one; False if it declined (None)."""
    built = _compiled([orjson.dumps(table, option=SORTED) for table in tables_])
    names, views, level = slicebuild._python_views(tables_)
    if built is None:
        return False
    assert list(built[0]) == list(names) == sorted(set().union(*tables_))
    assert list(built[1]) == list(views)
    assert built[2] == level
    for compiled, python in zip(built[:2], (names, views)):  # laid out alike, offsets too
        assert compiled.buffer == python.buffer
        assert compiled.offsets == bytes(python.offsets)
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_compiled_views_are_the_python_views(tables_):
    _same_as_python(tables_)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(same_hosts=True))
def test_phases_naming_the_same_hosts_are_the_python_views(tables_):
    """The compiled builder indexes such tables' names once and does not merge them."""
    _same_as_python(tables_)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(names=st.one_of(PLAIN, ESCAPED)))
def test_names_with_escapes_are_left_to_python_and_agree_otherwise(tables_):
    escaped = any(set(name) & set('"\\\n') for table in tables_ for name in table)
    if not _same_as_python(tables_):
        return
    assert not escaped


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(names=st.text(alphabet="abs0.-é€", min_size=10, max_size=40)))
def test_long_names_are_the_python_views(tables_):
    """Names longer than the reader's 16-byte scans, ending anywhere in or after one."""
    _same_as_python(tables_)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**18), 10**18),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(SCALARS, min_size=1, max_size=40), st.data())
def test_a_value_holding_white_space_or_structure_is_left_to_python(values, data):
    """The readers scan a number, true, false or null 16 bytes at a time: a character that
    cannot be in one, anywhere in it or just after it, is not their case (as byte by byte)."""
    table = {f"h{k:03d}": {"local_rate": value, "role": "sender"} for k, value in enumerate(values)}
    text = orjson.dumps(table, option=SORTED)
    k = data.draw(st.integers(0, len(values) - 1))
    start = text.index(b'"local_rate":', text.index(b'"h%03d"' % k)) + len(b'"local_rate":')
    at = data.draw(st.integers(start + 1, text.index(b",", start)))
    mutated = (
        text[:at] + data.draw(st.sampled_from([b" ", b"\n", b":", b"{", b"[", b'"'])) + text[at:]
    )
    assert _slices.views([text]) is not None
    assert _slices.views([mutated]) is None
    assert _transition.lower(mutated, text, SAMPLE_PROBABILITY_SCALE) is None
    assert _transition.lower(text, mutated, SAMPLE_PROBABILITY_SCALE) is None


def test_a_plain_plan_takes_the_compiled_path(make_plan):
    plan = make_plan(version=1)
    assert _same_as_python([plan["hosts"]])
    assert _same_as_python([plan["hosts"], {k: v for k, v in plan["hosts"].items() if k != "s2"}])


def test_the_peer_fields_come_from_python_once():
    # the compiled builder keeps the fields slicebuild.PEER_FIELDS names (configure), so a new
    # peer field (the sample mechanism's) is cut into views by both builders alike
    table = {
        "a": {
            "role": "sender",
            "local_rate": 0.2,
            "sflow_sampling": None,
            "local_mechanism": "sample",
            "sample_probability": 13107,
            "observation_domain": 7,
            "mirrors": [{"to": "b", "rate": 0.5}],
        },
        "b": {
            "role": "receiver",
            "local_rate": 1.0,
            "sflow_sampling": 1,
            "local_mechanism": "sflow",
            "receives": [{"from": "a", "rate": 0.5}],
        },
    }
    assert _same_as_python([table])
    view_b = orjson.loads(_compiled([orjson.dumps(table, option=SORTED)])[1][1])
    assert view_b["hosts"][0]["a"]["sample_probability"] == 13107


@pytest.mark.parametrize(
    "table",
    [
        b'{"b":{},"a":{}}',  # not sorted
        b'{"a":{},"a":{}}',  # a name twice
        b'{"a":{"mirrors":"s1"}}',  # not a list
        b'{"a":{"mirrors":[1]}}',  # an item that is not an object
        b'{"a":{"mirrors":[{"to":["b"]}]}}',  # a peer Python cannot look up
        b'{"a":{"role":"x","role":"y"}}',  # a key twice (Python keeps the last)
        b'{"a":{"mirrors":[],"mirrors":[]}}',
        b'{"\xff":{}}',  # not UTF-8
        b'{"a": {}}',  # white space
        b'{"a":{}',  # cut short
        b"[]",
    ],
)
def test_anything_unusual_is_left_to_python(table):
    assert _slices.views([table]) is None


def test_a_leaf_hash_is_the_domain_separated_hash_of_the_view(make_plan):
    names, views, level = _compiled([orjson.dumps(make_plan(version=1)["hosts"], option=SORTED)])
    assert len(views) == len(names) == len(make_plan(version=1)["hosts"]) > 1
    assert level == b"".join(hashlib.sha256(b"\x00" + view).digest() for view in views)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**32))
def test_compiled_tree_levels_are_the_python_ones(leaves, seed):
    level = hashlib.sha256(seed.to_bytes(8, "big")).digest() * leaves
    level = bytes(b ^ (k % 251) for k, b in enumerate(level))
    assert merkle._compiled_parents(level) == merkle._parents(level)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            PLAIN,
            st.text(alphabet="ab.-_\n/ ", min_size=1, max_size=4),
            st.text(alphabet="a", min_size=127, max_size=130),
        ),
        unique=True,
        max_size=8,
    )
)
def test_each_host_is_found_by_its_file_name_and_nothing_else(names):
    names = sorted(names)
    slices = slicebuild.SliceSet(b"", None, Names.of(names), Views.of([b"{}"] * len(names)), None)
    for k, name in enumerate(names):
        assert slices.position(slicebuild.slice_file_name(name)) == k
    for other in ("zz", "~" + "0" * 64, "a\n", "../a", ""):
        if other not in names:
            assert slices.position(other) is None
    for name in names:  # a name that is not plain is not its own file name
        if slicebuild.slice_file_name(name) != name:
            assert slices.position(name) is None
