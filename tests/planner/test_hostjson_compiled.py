"""The compiled host table writer (planner/_hostjson.c) against the Python one it stands in for.

``hostjson.table`` hands each block's parts (constant text, per-row JSON, number columns still as
arrays) to the compiled ``rows``; whenever it is absent or declines (None), the columns are
serialised in Python and joined (``_rows``). Both must give the same bytes, and the same as
orjson of the per-host dicts: numbers of every magnitude (0.0 and -0.0, subnormals, huge, the
plan's 12-digit ones), None, 64-bit integers, strings with escapes, extras.
"""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.planner import hostjson, hostlists, jsonpieces
from cosample.planner.planfile import significant

compiled = jsonpieces.compiled
SORTED = orjson.OPT_SORT_KEYS


def test_the_writer_is_compiled():
    # setup.py builds it with pip install; without it every column is serialised in Python
    assert compiled is not None


def compiled_rows(parts, count):
    """The compiled rows of ``parts`` as ``hostjson._written`` hands them over."""
    return compiled.rows(
        [
            (part.buffer, part.offsets)
            if isinstance(part, hostlists.Lists)
            else tuple(part)
            if isinstance(part, hostjson.Nullable)
            else part
            for part in parts
        ],
        count,
    )


def python_rows(parts, count):
    return jsonpieces.interleaved(
        [part if isinstance(part, bytes) else hostjson._pieces(part) for part in parts], count
    )


EDGES = [
    0.0,
    -0.0,
    1e-5,
    9.999999999999999e-6,
    1e-6,
    1e16,
    9999999999999998.0,
    1e15,
    999999999999999.9,
    123456789012345.0,
    1234567890123456.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    2.225073858507201e-308,
    1.7976931348623157e308,
    0.1,
    1 / 3,
    0.1 + 0.2,
    123.0,
    1.5e16,
    1e-300,
    1e22,
    1e23,
    1e-22,
    1e-23,
    1e21,
    9.5e-8,
    2.0**53,
    2.0**53 + 2.0,
    1e-7 / 3,
]


def random_doubles(count: int, seed: int) -> list[float]:
    """Any bits (finite), and the plan's numbers: 12 significant digits at any magnitude."""
    rng = random.Random(seed)
    values = []
    while len(values) < count:
        x = np.frombuffer(rng.getrandbits(64).to_bytes(8, "little"), dtype=np.float64)[0]
        if np.isfinite(x):
            values.append(float(x))
        scale = 10.0 ** rng.randint(-30, 30)
        values.append(float(f"{rng.uniform(-1, 1) * scale:.12g}"))
        values.append(float(f"{rng.uniform(0, 1) * scale:.{rng.randint(1, 17)}g}"))
    return values


#: drawn when the test runs, not at collection: every pytest-xdist worker collects this module
NUMBERS = {"edges": lambda: EDGES, "random": lambda: random_doubles(100_000, 7)}


@pytest.mark.parametrize("numbers", list(NUMBERS))
def test_numbers_are_orjsons(numbers):
    values = NUMBERS[numbers]()
    wrong = [x for x in values if compiled.number(x) != orjson.dumps(x)]
    assert wrong == []
    array = np.asarray(values, dtype=float)
    assert compiled.rows([array, b","], len(values)) == orjson.dumps(values)[1:-1] + b","


def test_the_plans_rounded_numbers_are_orjsons():
    rng = np.random.default_rng(3)
    values = significant(rng.lognormal(0.0, 8.0, 100_000) * rng.choice([-1, 1], 100_000), None, "x")
    assert compiled.rows([values, b","], len(values)) == orjson.dumps(values.tolist())[1:-1] + b","


FLOATS = st.floats(allow_nan=False, allow_infinity=False)
INTS = st.integers(-(2**63), 2**63 - 1)


@st.composite
def parts(draw):
    """Rows' parts of every kind the table hands over, ``count`` rows each."""
    count = draw(st.integers(1, 6))  # a block holds a host at least
    kinds = draw(
        st.lists(
            st.sampled_from(
                [
                    "const",
                    "strings",
                    "floats",
                    "ints",
                    "objects",
                    "strided",
                    "fixed",
                    "text",
                    "nullable",
                ]
            ),
            min_size=1,
            max_size=6,
        )
    )
    out = []
    for kind in kinds:
        if kind == "const":
            out.append(draw(st.sampled_from([b",", b'"a":', b"{", b"}", b""])))
        elif kind == "strings":
            out.append(
                jsonpieces.strings(
                    draw(st.lists(st.text(max_size=4), min_size=count, max_size=count))
                )
            )
        elif kind == "floats":
            out.append(
                np.asarray(draw(st.lists(FLOATS, min_size=count, max_size=count)), dtype=float)
            )
        elif kind == "ints":
            out.append(
                np.asarray(draw(st.lists(INTS, min_size=count, max_size=count)), dtype=np.int64)
            )
        elif kind == "nullable":  # numbers, null where absent (hostjson.Nullable)
            values = draw(
                st.one_of(
                    st.lists(FLOATS, min_size=count, max_size=count).map(np.asarray),
                    st.lists(INTS, min_size=count, max_size=count).map(
                        lambda v: np.asarray(v, dtype=np.int64)
                    ),
                )
            )
            present = np.asarray(draw(st.lists(st.booleans(), min_size=count, max_size=count)))
            out.append(hostjson.Nullable(values, present))
        elif kind == "text":  # strings not yet written: quoted and escaped by the writer
            out.append(draw(st.lists(st.text(max_size=4), min_size=count, max_size=count)))
        elif kind == "fixed":  # each row's JSON padded with NULs (an S array)
            out.append(
                np.array(
                    jsonpieces.strings(
                        draw(st.lists(st.text(max_size=4), min_size=count, max_size=count))
                    ),
                    dtype=bytes,
                )
            )
        elif kind == "objects":
            items = draw(
                st.lists(st.one_of(st.none(), INTS, FLOATS), min_size=count, max_size=count)
            )
            array = np.empty(count, dtype=object)
            array[:] = items
            out.append(array)
        else:  # a view with a stride, as a column's slice may be
            values = draw(st.lists(FLOATS, min_size=2 * count, max_size=2 * count))
            out.append(np.asarray(values, dtype=float)[::-2])
    return out, count


@settings(max_examples=400, deadline=None)
@given(parts())
def test_rows_are_the_python_rows(drawn):
    given_parts, count = drawn
    assert compiled_rows(given_parts, count) == python_rows(given_parts, count)


def test_what_the_compiled_writer_declines():
    two = 2
    nan = np.array([1.0, np.nan])
    wide = np.empty(2, dtype=object)
    wide[:] = [2**64, 1]
    flags = np.empty(2, dtype=object)
    flags[:] = [True, 1]
    scalars = np.empty(2, dtype=object)
    scalars[:] = [np.float64(1.5), 1]
    for part in (
        nan,
        wide,
        flags,
        scalars,
        np.array([1.5, 2.5], dtype=np.float32),
        np.array([True, False]),
        np.zeros((2, 1)),
        np.array([1.0]),
        [b"a", "b"],
        [b"a"],
        "text",
        (b"a", b"b"),
        ["a", b"b"],
        ["a", "\ud800"],
        (b"abc", np.array([0, 2, 1])),
        (b"abc", np.array([0, 1, 4])),
        (b"abc", np.array([-1, 1, 2])),
        (b"abc", np.array([0, 1])),
        ("abc", np.array([0, 1, 2])),
        (b"abc", np.array([0.0, 1.0, 2.0])),
        (np.array([1.0, np.nan]), np.array([True, True])),
        (np.array([1, 2], dtype=np.int32), np.array([True, True])),
        (np.array([1.0, 2.0]), np.array([1, 0])),
        (np.array([1.0]), np.array([True])),
    ):
        assert compiled.rows([b"{", part, b"}"], two) is None, part


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=5), max_size=8, unique=True), st.data())
def test_tables_written_both_ways_are_orjsons(names, data):
    """The whole table, compiled and forced through Python: orjson's bytes of the dicts, with a
    column the compiled writer declines (an object array holding a bool: orjson writes
    ``true``) and extras on some hosts."""
    n = len(names)
    floats = data.draw(st.lists(FLOATS, min_size=n, max_size=n))
    counts = data.draw(st.lists(st.one_of(st.none(), INTS), min_size=n, max_size=n))
    odd = data.draw(st.lists(st.one_of(st.none(), st.booleans(), FLOATS), min_size=n, max_size=n))
    ints = data.draw(st.lists(INTS, min_size=n, max_size=n))
    extras = {
        name: {"zone": data.draw(st.text(max_size=3))} for name in names if data.draw(st.booleans())
    }
    zones = data.draw(st.lists(st.text(max_size=4), min_size=n, max_size=n))  # every host's
    objects = np.empty(n, dtype=object)
    objects[:] = counts
    mixed = np.empty(n, dtype=object)
    mixed[:] = odd
    interval = np.asarray(ints, dtype=np.int64)
    fields = {
        "rate": np.asarray(floats, dtype=float),
        "count": objects,
        "interval": hostjson.Nullable(interval, interval > 0),
        "id": np.asarray(ints, dtype=np.int64),
        "odd": mixed,
        "to": {"name": jsonpieces.strings(names)},
    }
    expected = orjson.dumps(
        {
            name: {
                "rate": f,
                "count": c,
                "id": i,
                "odd": o,
                "to": {"name": name},
                "zone": z,
                "interval": i if i > 0 else None,
                **extras.get(name, {}),
            }
            for name, f, c, i, o, z in zip(names, floats, counts, ints, odd, zones)
        },
        option=SORTED,
    )
    try:
        if n:
            fields["zone"] = hostjson.values(zones)  # as planfile gives a complete extra
        assert b"".join(hostjson.table(names, fields, extras, block=3)) == expected
        jsonpieces.compiled = None
        if n:
            fields["zone"] = hostjson.values(zones)
        assert b"".join(hostjson.table(names, fields, extras, block=3)) == expected
    finally:
        jsonpieces.compiled = compiled


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.data())
def test_grouped_lists_are_the_python_ones(n, data):
    """Each owner's list of objects, compiled and in Python: peers looked up in a list of names
    or a fixed-width array of them (escapes, a name wider than ``WIDE``), numbers as arrays
    (any double) or written already, per-object JSON; in host order or a rank's."""
    count = data.draw(st.integers(0, 12))
    owner = np.asarray(
        data.draw(st.lists(st.integers(0, n - 1), min_size=count, max_size=count)), dtype=np.int64
    )
    peer = np.asarray(
        data.draw(st.lists(st.integers(0, n - 1), min_size=count, max_size=count)), dtype=np.int64
    )
    names = data.draw(
        st.lists(
            st.one_of(st.text(max_size=4), st.just("w" * 300)), min_size=n, max_size=n, unique=True
        )
    )
    quoted = jsonpieces.strings(names)
    table = data.draw(st.sampled_from([quoted, jsonpieces.fixed(quoted)]))
    table = quoted if table is None else table
    floats = np.asarray(data.draw(st.lists(FLOATS, min_size=count, max_size=count)), dtype=float)
    fields = {
        "to": hostlists.Lookup(table, peer),
        "rate": floats,
        "written": jsonpieces.fixed(jsonpieces.numbers(floats.tolist())),
        "tag": jsonpieces.strings(
            data.draw(st.lists(st.text(max_size=3), min_size=count, max_size=count))
        ),
    }
    rank = data.draw(
        st.one_of(st.none(), st.permutations(range(n)).map(lambda p: np.asarray(p, dtype=np.int64)))
    )
    peer_rank = np.argsort(np.argsort(names, kind="stable")).astype(np.int64)[peer]
    if count:  # the compiled writer wrote them (it declines nothing here)
        order = hostlists._pair_order(owner, peer_rank, n)
        assert hostlists._compiled_lists(owner[order], order, fields, n, None) is not None
    got = hostlists.grouped(owner, peer_rank, fields, n, rank=rank)
    try:
        jsonpieces.compiled = None
        expected = hostlists.grouped(owner, peer_rank, fields, n, rank=rank)
    finally:
        jsonpieces.compiled = compiled
    assert list(got) == list(expected) and len(got) == len(expected) == n
    if isinstance(expected, hostlists.Sorted):  # with a rank, in the table's order
        assert isinstance(got, hostlists.Lists) and np.array_equal(got.rank, expected.rank)
        assert [got[k] for k in range(n)] == expected
        assert got[1:n].tolist() == expected[1:n]
        if n > 1:  # a block of the table: rows 1..n-1 of the column
            assert (
                compiled.rows([(got[1:n].buffer, got[1:n].offsets)], n - 1)
                == b"".join(expected[1:n])
                == python_rows([got[1:n]], n - 1)
            )
    else:
        assert type(got) is type(expected)


def test_what_the_compiled_lists_decline():
    owners = np.array([0, 0, 1], dtype=np.int64)
    keys = [b'"rate":']
    assert compiled.lists(owners, keys, [(np.array([1.0, 2.0, 3.0]), None)], 2, None) == [
        b'[{"rate":1.0},{"rate":2.0}]',
        b'[{"rate":3.0}]',
    ]
    for sources, n, slots in (
        ([(np.array([1.0, np.nan, 3.0]), None)], 2, None),  # orjson writes null
        ([(np.array([1.0, 2.0]), None)], 2, None),  # one value short
        ([([b"1"], np.array([0, 1, 0]))], 2, None),  # an index beyond the source
        ([([b"1", "2"], np.array([0, 1, 0]))], 2, None),  # not bytes
        ([(np.array([1, 2, 3]), None)], 2, None),  # integers: not a column grouped takes
        ([(np.array([1.0, 2.0, 3.0]), None)], 1, None),  # an owner beyond n
        ([(np.array([1.0, 2.0, 3.0]), None)], 2, np.array([1, 1])),  # one slot twice
    ):
        assert compiled.lists(owners, keys, sources, n, slots) is None, (sources, n, slots)
    assert compiled.lists(owners[::-1].copy(), keys, [(np.ones(3), None)], 2, None) is None
    for bad_owners in (owners.astype(float), owners.astype(np.int32), owners.reshape(3, 1), b"x"):
        assert compiled.lists(bad_owners, keys, [(np.ones(3), None)], 2, None) is None
    assert compiled.lists(owners, keys, [(np.ones((3, 1)), None)], 2, None) is None
    text, offsets = compiled.lists(
        owners, keys, [(np.array([1.0, 2.0, 3.0]), None)], 3, None, True
    )  # packed: every owner's array, "[]" for none
    assert text == b'[{"rate":1.0},{"rate":2.0}][{"rate":3.0}][]'
    assert np.frombuffer(offsets, dtype=np.int64).tolist() == [0, 27, 41, 43]
    assert compiled.lists(owners, keys, [(np.ones(3), None)], 2, np.array([1, 0]), True) is None


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.data())
def test_pairs_are_ordered_as_lexsort_orders_them(n, data):
    """Owner, then peer rank, repeated pairs in their given order: in order already, in any
    order, with repeats (the stable sort's case)."""
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=12)
    )
    if data.draw(st.booleans()):
        pairs.sort()
    owner = np.asarray([o for o, _ in pairs], dtype=np.int64)
    peer_rank = np.asarray([p for _, p in pairs], dtype=np.int64)
    assert np.array_equal(
        hostlists._pair_order(owner, peer_rank, n), np.lexsort((peer_rank, owner))
    )
