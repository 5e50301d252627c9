"""The hosts' lists of objects (a host's mirrors, its receives) as JSON arrays, from pair columns.

A plan at 10^6 hosts lists about 6·10^5 mirror pairs, twice (each sender's ``mirrors``, each
receiver's ``receives``). ``grouped`` writes every owner's array without a Python object per
object or field: the pairs sorted once, every column read in that order as a fixed-width byte
array, laid side by side in a matrix of bytes whose NUL padding is then dropped (JSON text never
holds a raw NUL or other control byte), all arrays at once, cut apart at a control byte, in the
table's name order. Where the compiled writer is built (``jsonpieces.compiled``), it writes the
arrays from the columns, all in one buffer (``Lists``); it returns None on anything unusual,
and the Python path then writes the same bytes (tests/planner/test_hostjson_compiled.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, Union, overload

import numpy as np

from cosample.plan.packed import Packed
from cosample.planner import jsonpieces
from cosample.planner.jsonpieces import (
    BLOCK,
    Part,
    fixed,
    interleaved,
    numbers,
    side_by_side,
    value,
)

_SPLIT = b"\x01"  # between the arrays of ``grouped``: escaped inside any JSON string


class Lookup(NamedTuple):
    """A column of ``grouped`` read from a table: object ``j`` has the JSON ``table[rows[j]]``
    (a peer's quoted name), looked up once in the lists' order, never copied in pair order."""

    table: Sequence[bytes] | np.ndarray
    rows: np.ndarray  # (not ``index``: a tuple's method)


#: A field of ``grouped``: each object's JSON (in pair order; a list, or a fixed-width ``S``
#: array as ``fixed`` makes), numbers (serialised here, in the lists' order) or a ``Lookup``.
Field = Union[list[bytes], np.ndarray, Lookup]


def grouped(
    owner: np.ndarray,
    peer_rank: np.ndarray,
    fields: Mapping[str, Field],
    n: int,
    block: int = 16 * BLOCK,
    rank: np.ndarray | None = None,
) -> list[bytes] | Lists:
    """Per owner 0..n-1, the JSON array of its objects in ``peer_rank`` order (``[]`` if none);
    object ``j`` (of ``owner[j]``) has the field ``key`` with the JSON of ``fields[key][j]``.
    With ``rank`` (each owner's position in the table's order), a ``Sorted`` list in that order
    (from the compiled writer, ``Lists``: all the arrays in that order in one buffer).

    The pairs are sorted once and every column read in that order (numbers written, names
    looked up), as fixed-width byte arrays: ``block`` objects at a time are laid side by side
    in a matrix of bytes, padded with NULs (JSON text holds none raw) that are then dropped,
    so no Python object is made per object or per field. All arrays are written at once and
    cut apart at a control byte (``_SPLIT``) put between owners. A column wider than ``WIDE``
    (a long name) is written piece by piece instead (``_grouped_pieces``), the same bytes."""
    count = len(owner)
    if count == 0:
        return [b"[]"] * n
    if jsonpieces.compiled is not None and rank is not None and _permutation(rank, n):
        slots = rank[owner]  # the pairs in the table's order: the arrays written in it
        order = _pair_order(slots, peer_rank, n)
        packed = _compiled_lists(slots[order], order, fields, n, None, packed=True)
        if packed is not None:
            return Lists(packed[0], np.frombuffer(packed[1], dtype=np.int64), rank)
    order = _pair_order(owner, peer_rank, n)
    owners = owner[order]
    if jsonpieces.compiled is not None and rank is None:
        lists = _compiled_lists(owners, order, fields, n, None)
        if lists is not None:
            return lists
    starts = np.flatnonzero(owners[1:] != owners[:-1]) + 1
    keys = [(b"," if k else b"") + value(key) + b":" for k, key in enumerate(sorted(fields))]
    columns = [_fixed(fields[key], order) for key in sorted(fields)]
    widths = [column for column in columns if column is not None]
    if len(widths) < len(columns):
        text = _grouped_pieces(order, starts, fields, block)
    else:
        # each object's opening, closing the one before
        opening = np.full(count, b"},{", dtype="S5")
        opening[starts] = b"}]" + _SPLIT + b"[{"
        opening[0] = b"[{"
        pieces = []
        for first in range(0, count, block):
            last = min(first + block, count)
            parts: list[bytes | np.ndarray] = [opening[first:last]]
            for key, width in zip(keys, widths):
                parts += [key, width[first:last]]
            pieces.append(side_by_side(parts, last - first))
        text = b"".join(pieces)
    arrays = np.full(n, b"[]", dtype=object)
    first = owners[np.concatenate(([0], starts))]
    arrays[first if rank is None else rank[first]] = _objects((text + b"}]").split(_SPLIT))
    return arrays.tolist() if rank is None else Sorted(arrays.tolist(), rank)


def _permutation(rank: np.ndarray, n: int) -> bool:
    """Whether ``rank`` gives each of ``n`` owners a position of its own in 0..n-1."""
    return len(rank) == n and (
        n == 0
        or (
            int(rank.min()) >= 0
            and int(rank.max()) < n
            and int(np.bincount(rank, minlength=n).max()) == 1
        )
    )


@overload
def _compiled_lists(
    owners: np.ndarray,
    order: np.ndarray,
    fields: Mapping[str, Field],
    n: int,
    rank: np.ndarray | None,
    packed: Literal[False] = False,
) -> list[bytes] | None: ...
@overload
def _compiled_lists(
    owners: np.ndarray,
    order: np.ndarray,
    fields: Mapping[str, Field],
    n: int,
    rank: np.ndarray | None,
    packed: Literal[True],
) -> tuple[bytes, bytes] | None: ...
def _compiled_lists(
    owners: np.ndarray,
    order: np.ndarray,
    fields: Mapping[str, Field],
    n: int,
    rank: np.ndarray | None,
    packed: bool = False,
) -> list[bytes] | tuple[bytes, bytes] | None:
    """``grouped``'s lists from the compiled writer, each written at once from the columns read
    in pair ``order`` (``owners``: each pair's owner in that order; ``packed``: all in one
    buffer, with the int64 offsets where each starts); None: it declined."""
    keys = [(b"," if k else b"") + value(key) + b":" for k, key in enumerate(sorted(fields))]
    sources: list[tuple[Any, np.ndarray | None]] = []
    for key in sorted(fields):  # arrays gathered by numpy (in parallel), lists at an index
        column = fields[key]
        table, index = (
            (column.table, column.rows[order]) if isinstance(column, Lookup) else (column, order)
        )
        sources.append(
            (table[index], None)
            if isinstance(table, np.ndarray)
            else (table, np.asarray(index, dtype=np.int64))
        )
    return jsonpieces.compiled.lists(
        np.ascontiguousarray(owners, dtype=np.int64),
        keys,
        sources,
        n,
        None if rank is None else np.ascontiguousarray(rank, dtype=np.int64),
        packed,
    )


class Sorted(list):
    """A column of ``grouped(..., rank=...)``: owner ``i``'s array at ``rank[i]`` (the hosts'
    sorted order, the table's), so the table takes it as it is instead of reordering it."""

    def __init__(self, items: list[bytes], rank: np.ndarray) -> None:
        super().__init__(items)
        self.rank = rank


class Lists(Packed):
    """A column of ``grouped(..., rank=...)`` from the compiled writer: every owner's array in
    the table's order (``rank``, as ``Sorted``) in one buffer, no ``bytes`` object per host; a
    slice (rows of the table) has no ``rank``."""

    __slots__ = ("rank",)

    def __init__(self, buffer: bytes, offsets: np.ndarray, rank: np.ndarray | None) -> None:
        super().__init__(buffer, offsets)
        self.rank = rank

    def _sliced(self, first: int, last: int) -> Lists:
        part = super()._sliced(first, last)
        part.rank = None
        return part


def _pair_order(owner: np.ndarray, peer_rank: np.ndarray, n: int) -> np.ndarray:
    """The pairs by owner, then peer rank (``np.lexsort``'s stable order): one sort of a single
    64-bit key, while ``n * n`` fits in one. Keys already increasing are left in place; others
    take numpy's default sort (SIMD, a quarter of the stable sort's time on 8·10^5 random
    keys), which is the stable order unless a key repeats, and the stable sort if one does."""
    span = max(n, int(peer_rank.max()) + 1, int(owner.max()) + 1)
    if span >= 2**31 or peer_rank.min() < 0 or owner.min() < 0:
        return np.lexsort((peer_rank, owner))
    key = owner.astype(np.int64) * span + peer_rank
    if bool((key[1:] > key[:-1]).all()):
        return np.arange(len(key))
    order = np.argsort(key)
    ordered = key[order]
    if bool((ordered[1:] > ordered[:-1]).all()):
        return order
    return np.argsort(key, kind="stable")


def _fixed(column: Field, order: np.ndarray) -> np.ndarray | None:
    """``column``'s pieces as a fixed-width byte array, pair ``order[0]``'s first (None: a
    piece is wider than ``WIDE``)."""
    if isinstance(column, Lookup):
        table = fixed(column.table)
        return None if table is None else table[column.rows[order]]
    if isinstance(column, np.ndarray):
        if column.dtype.kind == "S":  # written already
            return fixed(column[order])
        return fixed(numbers(column[order].tolist()))
    table = fixed(column)
    return None if table is None else table[order]


def _grouped_pieces(
    order: np.ndarray, starts: np.ndarray, fields: Mapping[str, Field], block: int
) -> bytes:
    """``grouped``'s objects with a column too wide for fixed width: one piece per object and
    field, joined ``block`` objects at a time, the arrays separated by ``_SPLIT``."""
    count = len(order)
    opening = [b"},{"] * count
    for k in starts.tolist():
        opening[k] = b"}]" + _SPLIT + b"[{"
    opening[0] = b"[{"
    keys = [(b"," if k else b"") + value(key) + b":" for k, key in enumerate(sorted(fields))]
    columns = [_in_order(fields[key], order) for key in sorted(fields)]
    pieces = []
    for first in range(0, count, block):
        last = min(first + block, count)
        parts: list[Part] = [opening[first:last]]
        for key, column in zip(keys, columns):
            parts += [key, column[first:last]]
        pieces.append(interleaved(parts, last - first))
    return b"".join(pieces)


def _in_order(column: Field, order: np.ndarray) -> list[bytes]:
    """``column``'s pieces, pair ``order[0]``'s first."""
    if isinstance(column, Lookup):
        return list(map(column.table.__getitem__, column.rows[order].tolist()))
    if isinstance(column, np.ndarray):
        if column.dtype.kind == "S":  # written already
            return column[order].tolist()
        return numbers(column[order].tolist())
    return list(map(column.__getitem__, order.tolist()))


def _objects(items: list[bytes]) -> np.ndarray:
    """``items`` as a one-dimensional object array (numpy would read bytes as characters)."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array
