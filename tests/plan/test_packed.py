"""Views and names laid end to end in one buffer (cosample/plan/packed.py): read back as the
lists they stand for, found by the compiled bisection and by Python's alike."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.plan import packed
from cosample.plan.packed import Names, Views

NAMES = st.text(alphabet="ab.-_é€\n\U0001f600", min_size=0, max_size=5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=6), max_size=8))
def test_views_read_back_as_the_list_they_pack(items):
    views = Views.of(items)
    assert len(views) == len(items)
    assert list(views) == items
    assert [views[k] for k in range(len(items))] == items
    assert [views[-k] for k in range(1, len(items) + 1)] == items[::-1]
    assert views.buffer == b"".join(items)
    for k in (len(items), -len(items) - 1):
        with pytest.raises(IndexError):
            views[k]


@settings(max_examples=200, deadline=None)
@given(st.lists(NAMES, unique=True, max_size=8))
def test_names_read_back_and_are_found_both_ways(names):
    names = sorted(names)
    packed_names = Names.of(names)
    assert list(packed_names) == names
    assert [packed_names[k] for k in range(len(names))] == names
    if names:
        assert packed_names[-1] == names[-1]
    others = ["", "a", "zz", "a\n", "é", "\U0001f600", "ab.-", "\ud800"]
    for find in _finders():
        for k, name in enumerate(names):
            assert find(packed_names, name) == k
        for other in others:
            if other not in names:
                assert find(packed_names, other) is None


def _finders():
    """``Names.find`` compiled, and in Python (as on a host without a compiler)."""

    def python(names: Names, name: str) -> int | None:
        compiled, packed._compiled_find = packed._compiled_find, None
        try:
            return names.find(name)
        finally:
            packed._compiled_find = compiled

    assert packed._compiled_find is not None  # setup.py builds it (test_slices_compiled.py)
    return Names.find, python


def test_no_host_and_one_host():
    for empty in (
        Views.of([]),
        Names.of([]),
        Views(b"", array("q", [0])),
        Names(b"", (0).to_bytes(8, "little")),
    ):
        assert len(empty) == 0 and list(empty) == []
        with pytest.raises(IndexError):
            empty[0]
        with pytest.raises(IndexError):
            empty[-1]
    assert all(find(Names.of([]), "a") is None for find in _finders())
    one = Views.of([b'{"name":"a"}'])
    assert len(one) == 1 and one[0] == one[-1] == b'{"name":"a"}' and list(one) == [one[0]]
    name = Names.of(["a"])
    assert len(name) == 1 and name[0] == "a" and list(name) == ["a"]
    for find in _finders():
        assert find(name, "a") == 0 and find(name, "b") is None and find(name, "") is None


def test_a_name_holding_a_newline_is_one_name():
    names = Names.of(["a", "a\nb", "b"])
    assert list(names) == ["a", "a\nb", "b"] and len(names) == 3
    assert [find(names, "a\nb") for find in _finders()] == [1, 1]


@pytest.mark.parametrize(
    "buffer, offsets",
    [
        (b"abc", [0, 2]),  # short of the buffer's end
        (b"abc", [1, 3]),  # not from its start
        (b"", []),  # no offset at all
    ],
)
def test_offsets_that_do_not_span_the_buffer_are_refused(buffer, offsets):
    for kind in (Views, Names):
        with pytest.raises(ValueError, match="offsets"):
            kind(buffer, array("q", offsets))


def test_the_compiled_bisection_refuses_offsets_outside_the_names():
    # packed.Names checks only the first and last offset; the bisection reads the ones between
    with pytest.raises(ValueError, match="outside"):
        packed._compiled_find(b"a\nb\n", array("q", [0, 5, 4]), b"a")
    assert packed._compiled_find(b"a\nb\n", array("q", [0, 2, 4]), b"b") == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(NAMES, unique=True, max_size=8), st.integers(-10, 10), st.integers(-10, 10))
def test_a_slice_shares_the_buffer_and_reads_as_the_lists_slice(names, first, last):
    """What the planner's row blocks take of its compiled lists (``hostlists.Lists``)."""
    names = sorted(names)
    items = [name.encode() for name in names]
    for packed_items, expected in ((Views.of(items), items), (Names.of(names), names)):
        part = packed_items[first:last]
        assert type(part) is type(packed_items) and part.buffer is packed_items.buffer
        assert list(part) == part.tolist() == expected[first:last]
        assert [part[k] for k in range(len(part))] == expected[first:last]
    part = Names.of(names)[first:last]
    for find in _finders():
        assert [find(part, name) for name in names] == [
            names[first:last].index(name) if name in names[first:last] else None for name in names
        ]
    with pytest.raises(ValueError, match="step"):
        Views.of(items)[::2]
