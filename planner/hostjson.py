"""The plan's host table as compact JSON with sorted keys, written column by column.

A plan names 10^5 hosts with about twenty fields each. Building one Python dict per host and
then serialising the table was most of a 10^5-server controller cycle (docs/results/controller.md,
"Controller cycle"); here every field is serialised once for all hosts (orjson writes a whole
column of numbers at once, split at its commas) and the hosts' objects are assembled from those
pieces by one ``bytes.join`` per block of hosts, text that is the same for every host of the
block (keys, punctuation, a field with one value throughout) being one piece. The bytes are
exactly ``orjson.dumps(hosts, OPT_SORT_KEYS)`` of the per-host dicts
(tests/planner/test_planfile_columns.py checks it on random data centres, extras included), so
every reader of plans sees the same file as before.

Only numbers go through the split (a number's JSON has no comma); strings are escaped all at
once by the standard library's C string encoder (``json.encoder.encode_basestring``: the same
bytes as orjson for every code point, checked by the tests) and the inventory's extras one
value at a time: a separate ``orjson.dumps`` per small value costs a page fault each (orjson's
output buffer; docs/results/controller.md). Lists of objects (a host's mirrors: 6·10^5 pairs at
10^6 hosts) are laid out without a Python object per object or field: every column as a
fixed-width byte array in the lists' order, side by side in a matrix of bytes whose NUL padding
is then dropped (JSON text never holds a raw NUL or other control byte), all lists at once, cut
apart at a control byte, and given in the table's name order. The names are sorted, ranked and
quoted once per inventory (``named``). tests/planner/test_plan_bytes_stable.py holds the bytes
of two plans recorded before these changes.

All that is the Python path. Where the compiled writer (``planner/_hostjson.c``, ``compiled``)
is built, a block's rows and the objects' lists are written by it straight from the columns
(numbers, integers, None, strings, per-row JSON), without a Python object per value; it returns
None on anything unusual, and the Python path then writes the same bytes
(tests/planner/test_hostjson_compiled.py). ``jsonpieces.compiled = None`` forces the Python
path. The pieces are ``jsonpieces``'s, the lists of objects ``hostlists``'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, Union, cast, overload

import numpy as np
import orjson

from cosample.planner import jsonpieces
from cosample.planner.hostlists import Lists, Sorted
from cosample.planner.jsonpieces import (
    BLOCK,
    Part,
    fixed,
    interleaved,
    numbers,
    side_by_side,
    strings,
    value,
)

_NONE: Mapping[str, Any] = {}


class Nullable(NamedTuple):
    """A column of numbers, null where ``present`` is False (a host sampling nothing has no
    interval): the numbers stay in their array (float64 or int64), no Python object each."""

    values: np.ndarray
    present: np.ndarray


#: A column: numbers (None in an object array, or ``Nullable``: null), each row's JSON (a
#: list, or a ``S`` array padded with NULs), each row's string (a list of ``str``, escaped when
#: written), or a nested object whose fields are columns.
Column = Union[np.ndarray, Nullable, list[bytes], list[str], Lists, Mapping[str, "Column"]]
#: A column as it is written: one of the columns of an object, not a nested one.
Flat = Union[np.ndarray, Nullable, list[bytes], list[str], Lists]


def table(
    names: Sequence[str],
    fields: Mapping[str, Column],
    extras: Mapping[str, Mapping[str, Any]],
    block: int = BLOCK,
) -> list[bytes]:
    """``{name: {field: value, ...}, ...}`` in sorted order, as consecutive chunks of bytes.

    ``fields``: per field a ``Column`` in host order, serialised here. A host's ``extras`` are
    merged into its object (an extra with a field's name replaces it, as ``dict.update``
    would). Hosts are written ``block`` at a time, so the pieces of only one block are alive
    at once (fresh memory costs page faults)."""
    n = len(names)
    if n == 0:
        return [b"{}"]
    known = named(names)
    order, index, quoted = known.order, known.positions, known.sorted_quoted
    columns = {key: _reordered(column, order, index) for key, column in fields.items()}
    chunks = []
    for start, end, extra in _runs(
        [extras.get(names[i]) or _NONE for i in order] if extras else None, n
    ):
        run = {key: (0, column) for key, column in columns.items()}
        for key in extra[0] if extra else ():  # relative to ``start``
            run[key] = (start, values(list(map(itemgetter(key), extra))))
        for first in range(start, end, block):
            last = min(first + block, end)
            parts: list[Part | Flat] = [b",", quoted[first:last], b":"]
            parts += _object(
                {
                    key: _slice(column, first - offset, last - offset)
                    for key, (offset, column) in run.items()
                }
            )
            chunks.append(_written(parts, last - first))
    chunks[0] = b"{" + chunks[0][1:]  # no comma before the first entry
    chunks.append(b"}")
    return chunks


class Names(NamedTuple):
    """A table's names as the writers use them: ``order`` (positions in sorted order, also as
    the array ``index``), each name's ``rank`` in it, the quoted names in host order
    (``quoted``), in sorted order (``sorted_quoted``) and as a fixed-width array (``narrow``,
    None if a name is longer than ``WIDE``)."""

    order: list[int]
    positions: np.ndarray  # (not ``index``: a tuple's method)
    rank: np.ndarray
    quoted: list[bytes]
    sorted_quoted: list[bytes]
    narrow: np.ndarray | None


_KNOWN: list[tuple[Sequence[str], Names]] = []


def named(names: Sequence[str]) -> Names:
    """``Names`` of ``names``, kept for the last tuple seen (the same object: an inventory's
    names, cycle after cycle), so a plan and its report sort and quote them once."""
    if _KNOWN and _KNOWN[0][0] is names:
        return _KNOWN[0][1]
    order = sorted(range(len(names)), key=names.__getitem__)
    index = np.asarray(order, dtype=np.int64)
    rank = np.empty(len(names), dtype=np.int64)
    rank[index] = np.arange(len(names))
    quoted = strings(names)
    known = Names(order, index, rank, quoted, list(map(quoted.__getitem__, order)), fixed(quoted))
    if isinstance(names, tuple):
        _KNOWN[:] = [(names, known)]
    return known


def peers(known: Names, index: np.ndarray) -> orjson.Fragment:
    """The JSON array of the names at positions ``index`` (laid out at once when they are
    narrow), to embed in a document orjson writes."""
    if not len(index):
        return orjson.Fragment(b"[]")
    if known.narrow is None:
        text = b",".join(map(known.quoted.__getitem__, index.tolist()))
    else:
        text = side_by_side([known.narrow[index], b","], len(index))[:-1]
    return orjson.Fragment(b"[" + text + b"]")


def subset(fields: Mapping[str, Column], hosts: list[int]) -> dict[str, Column]:
    """The columns of ``hosts`` only (positions), for ``table`` of just those hosts."""
    return {
        key: _reordered(column, hosts, np.asarray(hosts, dtype=np.int64))
        for key, column in fields.items()
    }


def _reordered(column: Column, order: list[int], index: np.ndarray) -> Column:
    if isinstance(column, np.ndarray):
        return column[index]
    if isinstance(column, Nullable):
        return Nullable(column.values[index], column.present[index])
    if isinstance(column, (Sorted, Lists)):
        rank = column.rank
        assert rank is not None  # only a slice (rows of the table) has none
        if len(index) == len(column) and np.array_equal(rank[index], np.arange(len(column))):
            return column  # already in this order (the table's own)
        return list(map(column.__getitem__, rank[index].tolist()))
    if isinstance(column, Mapping):
        return {key: _reordered(inner, order, index) for key, inner in column.items()}
    return _picked(column, order)


@overload
def _picked(column: list[bytes], order: list[int]) -> list[bytes]: ...
@overload
def _picked(column: list[str], order: list[int]) -> list[str]: ...
def _picked(column: list[Any], order: list[int]) -> list[Any]:
    return list(map(column.__getitem__, order))


def _slice(column: Column, first: int, last: int) -> Column:
    if isinstance(column, Mapping):
        return {key: _slice(inner, first, last) for key, inner in column.items()}
    if isinstance(column, Nullable):
        return Nullable(column.values[first:last], column.present[first:last])
    return column[first:last]


def _runs(
    extras: list[Mapping[str, Any]] | None, n: int
) -> Iterator[tuple[int, int, list[Mapping[str, Any]]]]:
    """Runs of consecutive hosts whose extras have the same keys: (start, end, their extras).
    Key sets are compared only where the keys' order changes (tuples compare faster)."""
    if extras is None:
        yield 0, n, []
        return
    orders = list(map(tuple, extras))
    starts = [0]
    for k in [k for k in range(1, n) if orders[k] != orders[k - 1]]:
        if frozenset(orders[k]) != frozenset(orders[starts[-1]]):
            starts.append(k)
    starts.append(n)
    for start, end in zip(starts, starts[1:]):
        yield start, end, extras[start:end]


def values(items: list[Any]) -> list[bytes] | list[str]:
    """Each value's JSON: strings escaped at once, one string throughout serialised once;
    with the compiled writer, strings as they are (it escapes them as it writes them)."""
    first = items[0]
    if type(first) is str and items.count(first) == len(items):
        return [value(first)] * len(items)
    if set(map(type, items)) == {str}:
        return strings(items) if jsonpieces.compiled is None else items
    return [value(item) for item in items]


def _object(fields: Mapping[str, Column]) -> list[Part | Flat]:
    """The parts of one JSON object per row, its fields in sorted order (number columns still
    as arrays: ``_written`` writes them)."""
    parts: list[Part | Flat] = [b"{"]
    for k, key in enumerate(sorted(fields)):
        parts.append((b"," if k else b"") + value(key) + b":")
        column = fields[key]
        parts += _object(column) if isinstance(column, Mapping) else [column]
    parts.append(b"}")
    return parts


def _written(parts: list[Part | Flat], count: int) -> bytes:
    """``count`` rows of ``parts`` (number columns as arrays): by the compiled writer, or, when
    it is absent or declines, each column serialised here (``_pieces``) and joined
    (``interleaved``): the same bytes (tests/planner/test_hostjson_compiled.py)."""
    if jsonpieces.compiled is not None:
        text = jsonpieces.compiled.rows(
            [
                (part.buffer, part.offsets)
                if isinstance(part, Lists)
                else tuple(part)
                if isinstance(part, Nullable)
                else part
                for part in parts
            ],
            count,
        )
        if text is not None:
            return text
    return interleaved(
        [part if isinstance(part, bytes) else _pieces(part) for part in parts], count
    )


def _pieces(column: Flat) -> Part:
    """Each row's JSON of ``column``; one ``bytes`` if it is the same in every row."""
    rows: list[bytes]
    if isinstance(column, Lists):
        rows = column.tolist()
    elif isinstance(column, Nullable):
        objects = column.values.astype(object)  # None where absent: null
        objects[~column.present] = None
        rows = numbers(objects.tolist())
    elif isinstance(column, np.ndarray):
        if column.dtype == np.float64 and (column.view(np.int64) == column.view(np.int64)[0]).all():
            return numbers([column[0].item()])[0]  # bit for bit one number (not 0.0 and -0.0)
        rows = column.tolist() if column.dtype.kind == "S" else numbers(column.tolist())
    elif type(column[0]) is str:  # strings, not yet written (``values``)
        rows = strings(column)
    else:
        rows = cast(list[bytes], column)  # each row's JSON: list[str] was the branch above
    first = rows[0]
    if rows[-1] != first or rows[len(rows) // 2] != first:  # varies: no full count
        return rows
    return first if rows.count(first) == len(rows) else rows
