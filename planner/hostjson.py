"""The plan's host table as compact JSON with sorted keys, written column by column.

A plan names 10^5 hosts with about twenty fields each. Building one Python dict per host and
then serialising the table took about 1.1 s of a 10^5-server controller cycle (docs/results.md,
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
output buffer), 3-15 us instead of 0.2 us. Lists of objects (a host's mirrors: 6·10^5 pairs at
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
(tests/planner/test_hostjson_compiled.py). ``compiled = None`` forces the Python path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from operator import itemgetter
from typing import Any, NamedTuple, Union

import numpy as np
import orjson

try:  # the compiled writer (planner/_hostjson.c); None: every table is written in Python
    from cosample.planner import _hostjson as compiled
except ImportError:  # pragma: no cover - a host without a compiler
    compiled = None

SORTED = orjson.OPT_SORT_KEYS
BLOCK = 4096  # hosts per chunk of the table
_NONE: Mapping[str, Any] = {}
_CONSTANTS = {None: b"null", True: b"true", False: b"false"}
_CUT = b"\x00"  # between the strings of ``strings``: escaped inside any JSON string


class Nullable(NamedTuple):
    """A column of numbers, null where ``present`` is False (a host sampling nothing has no
    interval): the numbers stay in their array (float64 or int64), no Python object each."""

    values: np.ndarray
    present: np.ndarray


#: A column: numbers (None in an object array, or ``Nullable``: null), each row's JSON (a
#: list, or a ``S`` array padded with NULs), each row's string (a list of ``str``, escaped when
#: written), or a nested object whose fields are columns.
Column = Union[np.ndarray, Nullable, list[bytes], list[str], Mapping[str, "Column"]]

#: Rows' text: ``bytes`` the same in every row, or one piece per row.
Part = Union[bytes, list[bytes]]


def numbers(values: list[Any]) -> list[bytes]:
    """Each number's (or None's) JSON, as orjson writes it inside any document."""
    return orjson.dumps(values)[1:-1].split(b",") if values else []


def strings(values: Sequence[str]) -> list[bytes]:
    """Each string's JSON (quoted, escaped): all escaped at once, joined by NUL (escaped as
    ``\\u0000``, so the result splits there unless a string holds a NUL itself)."""
    if not values:
        return []
    joined = "\x00".join(values)
    if joined.count("\x00") == len(values) - 1:
        pieces = encode_basestring(joined).encode().replace(b"\\u0000", b'"' + _CUT + b'"'
                                                            ).split(_CUT)
        if len(pieces) == len(values):  # no string spelled "\u0000" out either
            return pieces
    return [encode_basestring(value).encode() for value in values]


def value(item: Any) -> bytes:
    """One value's JSON as orjson writes it (sorted keys): strings, integers, None, booleans
    and lists of them directly, anything else through orjson."""
    if isinstance(item, str):
        return encode_basestring(item).encode()
    if item is None or isinstance(item, bool):
        return _CONSTANTS[item]
    if isinstance(item, int) and -2**63 <= item < 2**63:
        return b"%d" % item
    if isinstance(item, list):
        return b"[" + b",".join([value(element) for element in item]) + b"]"
    return orjson.dumps(item, option=SORTED)


class Lookup(NamedTuple):
    """A column of ``grouped`` read from a table: object ``j`` has the JSON ``table[index[j]]``
    (a peer's quoted name), looked up once in the lists' order, never copied in pair order."""

    table: Sequence[bytes]
    index: np.ndarray


#: A field of ``grouped``: each object's JSON (in pair order; a list, or a fixed-width ``S``
#: array as ``fixed`` makes), numbers (serialised here, in the lists' order) or a ``Lookup``.
Field = Union[list[bytes], np.ndarray, Lookup]


def grouped(owner: np.ndarray, peer_rank: np.ndarray, fields: Mapping[str, Field],
            n: int, block: int = 16 * BLOCK, rank: np.ndarray | None = None) -> list[bytes]:
    """Per owner 0..n-1, the JSON array of its objects in ``peer_rank`` order (``[]`` if none);
    object ``j`` (of ``owner[j]``) has the field ``key`` with the JSON of ``fields[key][j]``.
    With ``rank`` (each owner's position in the table's order), a ``Sorted`` list in that order
    (from the compiled writer, ``Packed``: all the arrays in that order in one buffer).

    The pairs are sorted once and every column read in that order (numbers written, names
    looked up), as fixed-width byte arrays: ``block`` objects at a time are laid side by side
    in a matrix of bytes, padded with NULs (JSON text holds none raw) that are then dropped,
    so no Python object is made per object or per field. All arrays are written at once and
    cut apart at a control byte (``_SPLIT``) put between owners. A column wider than ``WIDE``
    (a long name) is written piece by piece instead (``_grouped_pieces``), the same bytes."""
    count = len(owner)
    if count == 0:
        return [b"[]"] * n
    if compiled is not None and rank is not None and _permutation(rank, n):
        slots = rank[owner]  # the pairs in the table's order: the arrays written in it
        order = _pair_order(slots, peer_rank, n)
        packed = _compiled_lists(slots[order], order, fields, n, None, packed=True)
        if packed is not None:
            return Packed(packed[0], np.frombuffer(packed[1], dtype=np.int64), rank)
    order = _pair_order(owner, peer_rank, n)
    owners = owner[order]
    if compiled is not None and rank is None:
        lists = _compiled_lists(owners, order, fields, n, None)
        if lists is not None:
            return lists
    starts = np.flatnonzero(owners[1:] != owners[:-1]) + 1
    keys = [(b"," if k else b"") + value(key) + b":" for k, key in enumerate(sorted(fields))]
    columns = [_fixed(fields[key], order) for key in sorted(fields)]
    if any(column is None for column in columns):
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
            for key, column in zip(keys, columns):
                parts += [key, column[first:last]]
            pieces.append(_packed(parts, last - first))
        text = b"".join(pieces)
    lists = np.full(n, b"[]", dtype=object)
    first = owners[np.concatenate(([0], starts))]
    lists[first if rank is None else rank[first]] = _objects((text + b"}]").split(_SPLIT))
    return lists.tolist() if rank is None else Sorted(lists.tolist(), rank)


def _permutation(rank: np.ndarray, n: int) -> bool:
    """Whether ``rank`` gives each of ``n`` owners a position of its own in 0..n-1."""
    return len(rank) == n and (n == 0 or (int(rank.min()) >= 0 and int(rank.max()) < n and int(
        np.bincount(rank, minlength=n).max()) == 1))


def _compiled_lists(owners: np.ndarray, order: np.ndarray, fields: Mapping[str, Field], n: int,
                    rank: np.ndarray | None, packed: bool = False
                    ) -> list[bytes] | tuple[bytes, bytes] | None:
    """``grouped``'s lists from the compiled writer, each written at once from the columns read
    in pair ``order`` (``owners``: each pair's owner in that order; ``packed``: all in one
    buffer, with the int64 offsets where each starts); None: it declined."""
    keys = [(b"," if k else b"") + value(key) + b":" for k, key in enumerate(sorted(fields))]
    sources: list[tuple[Any, np.ndarray | None]] = []
    for key in sorted(fields):  # arrays gathered by numpy (in parallel), lists at an index
        column = fields[key]
        table, index = (column.table, column.index[order]) if isinstance(column, Lookup) else (
            column, order)
        sources.append((table[index], None) if isinstance(table, np.ndarray)
                       else (table, np.asarray(index, dtype=np.int64)))
    return compiled.lists(np.ascontiguousarray(owners, dtype=np.int64), keys, sources, n,
                          None if rank is None else np.ascontiguousarray(rank, dtype=np.int64),
                          packed)


class Sorted(list):
    """A column of ``grouped(..., rank=...)``: owner ``i``'s array at ``rank[i]`` (the hosts'
    sorted order, the table's), so the table takes it as it is instead of reordering it."""

    def __init__(self, items: list[bytes], rank: np.ndarray) -> None:
        super().__init__(items)
        self.rank = rank


class Packed:
    """A column of ``grouped(..., rank=...)`` from the compiled writer: every owner's array in
    the table's order (``rank``, as ``Sorted``) in one buffer, row ``j`` being
    ``text[offsets[j]:offsets[j + 1]]``: no ``bytes`` object per host."""

    __slots__ = ("text", "offsets", "rank")

    def __init__(self, text: bytes, offsets: np.ndarray, rank: np.ndarray | None) -> None:
        self.text, self.offsets, self.rank = text, offsets, rank

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):  # rows first..last, the same buffer
            first, last, step = key.indices(len(self))
            if step != 1:
                raise ValueError("Packed: a slice with a step")
            return Packed(self.text, self.offsets[first:max(first, last) + 1], None)
        index = range(len(self))[key]  # IndexError beyond the rows
        return self.text[int(self.offsets[index]):int(self.offsets[index + 1])]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.tolist())

    def tolist(self) -> list[bytes]:
        bounds = self.offsets.tolist()
        return [self.text[first:last] for first, last in zip(bounds, bounds[1:])]


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


#: Widest piece (bytes) ``grouped`` lays out in fixed width.
WIDE = 256
_SPLIT = b"\x01"  # between the arrays of ``grouped``: escaped inside any JSON string


def fixed(pieces: Sequence[bytes]) -> np.ndarray | None:
    """``pieces`` as a fixed-width byte array (``S``), None if one is wider than ``WIDE``."""
    if isinstance(pieces, np.ndarray):
        return pieces if pieces.dtype.itemsize <= WIDE else None
    if max(map(len, pieces), default=0) > WIDE:
        return None
    return np.array(pieces, dtype=bytes) if len(pieces) else np.zeros(0, dtype="S1")


def _fixed(column: Field, order: np.ndarray) -> np.ndarray | None:
    """``column``'s pieces as a fixed-width byte array, pair ``order[0]``'s first (None: a
    piece is wider than ``WIDE``)."""
    if isinstance(column, Lookup):
        table = fixed(column.table)
        return None if table is None else table[column.index[order]]
    if isinstance(column, np.ndarray):
        if column.dtype.kind == "S":  # written already
            return fixed(column[order])
        return fixed(numbers(column[order].tolist()))
    table = fixed(column)
    return None if table is None else table[order]


def _packed(parts: list[bytes | np.ndarray], count: int) -> bytes:
    """``count`` rows, row ``j`` being each part's ``j``-th piece in turn (a ``bytes`` part is
    the same in every row), from fixed-width arrays: laid out side by side, NULs dropped."""
    widths = [len(part) if isinstance(part, bytes) else part.dtype.itemsize for part in parts]
    matrix = np.zeros((count, sum(widths)), dtype=np.uint8)
    column = 0
    for part, width in zip(parts, widths):
        matrix[:, column:column + width] = (
            np.frombuffer(part, dtype=np.uint8) if isinstance(part, bytes)
            else part.view(np.uint8).reshape(count, width))
        column += width
    flat = matrix.reshape(-1)
    return flat[flat != 0].tobytes()


def _grouped_pieces(order: np.ndarray, starts: np.ndarray, fields: Mapping[str, Field],
                    block: int) -> bytes:
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
        pieces.append(_rows(parts, last - first))
    return b"".join(pieces)


def _in_order(column: Field, order: np.ndarray) -> list[bytes]:
    """``column``'s pieces, pair ``order[0]``'s first."""
    if isinstance(column, Lookup):
        return list(map(column.table.__getitem__, column.index[order].tolist()))
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


def table(names: Sequence[str], fields: Mapping[str, Column],
          extras: Mapping[str, Mapping[str, Any]], block: int = BLOCK) -> list[bytes]:
    """``{name: {field: value, ...}, ...}`` in sorted order, as consecutive chunks of bytes.

    ``fields``: per field a ``Column`` in host order, serialised here. A host's ``extras`` are
    merged into its object (an extra with a field's name replaces it, as ``dict.update``
    would). Hosts are written ``block`` at a time, so the pieces of only one block are alive
    at once (fresh memory costs page faults)."""
    n = len(names)
    if n == 0:
        return [b"{}"]
    known = named(names)
    order, index, quoted = known.order, known.index, known.sorted_quoted
    columns = {key: _reordered(column, order, index) for key, column in fields.items()}
    chunks = []
    for start, end, extra in _runs([extras.get(names[i]) or _NONE for i in order]
                                   if extras else None, n):
        run = {key: (0, column) for key, column in columns.items()}
        for key in extra[0] if extra else ():  # relative to ``start``
            run[key] = (start, values(list(map(itemgetter(key), extra))))
        for first in range(start, end, block):
            last = min(first + block, end)
            parts: list[Part | np.ndarray] = [b",", quoted[first:last], b":"]
            parts += _object({key: _slice(column, first - offset, last - offset)
                              for key, (offset, column) in run.items()})
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
    index: np.ndarray
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
    known = Names(order, index, rank, quoted, list(map(quoted.__getitem__, order)),
                  fixed(quoted))
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
        text = _packed([known.narrow[index], b","], len(index))[:-1]
    return orjson.Fragment(b"[" + text + b"]")


def subset(fields: Mapping[str, Column], hosts: list[int]) -> dict[str, Column]:
    """The columns of ``hosts`` only (positions), for ``table`` of just those hosts."""
    return {key: _reordered(column, hosts, np.asarray(hosts, dtype=np.int64))
            for key, column in fields.items()}


def _reordered(column: Column, order: list[int], index: np.ndarray) -> Column:
    if isinstance(column, np.ndarray):
        return column[index]
    if isinstance(column, Nullable):
        return Nullable(column.values[index], column.present[index])
    if isinstance(column, (Sorted, Packed)):
        if len(index) == len(column) and np.array_equal(column.rank[index],
                                                        np.arange(len(column))):
            return column  # already in this order (the table's own)
        return list(map(column.__getitem__, column.rank[index].tolist()))
    if isinstance(column, Mapping):
        return {key: _reordered(inner, order, index) for key, inner in column.items()}
    return list(map(column.__getitem__, order))


def _slice(column: Column, first: int, last: int) -> Column:
    if isinstance(column, Mapping):
        return {key: _slice(inner, first, last) for key, inner in column.items()}
    if isinstance(column, Nullable):
        return Nullable(column.values[first:last], column.present[first:last])
    return column[first:last]


def _runs(extras: list[Mapping[str, Any]] | None, n: int
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
        return strings(items) if compiled is None else items
    return [value(item) for item in items]


def _object(fields: Mapping[str, Column]) -> list[Part | np.ndarray]:
    """The parts of one JSON object per row, its fields in sorted order (number columns still
    as arrays: ``_written`` writes them)."""
    parts: list[Part | np.ndarray] = [b"{"]
    for k, key in enumerate(sorted(fields)):
        parts.append((b"," if k else b"") + value(key) + b":")
        column = fields[key]
        parts += _object(column) if isinstance(column, Mapping) else [column]
    parts.append(b"}")
    return parts


def _written(parts: list[Part | np.ndarray], count: int) -> bytes:
    """``count`` rows of ``parts`` (number columns as arrays): by the compiled writer, or, when
    it is absent or declines, each column serialised here (``_pieces``) and joined (``_rows``):
    the same bytes (tests/planner/test_hostjson_compiled.py)."""
    if compiled is not None:
        text = compiled.rows([(part.text, part.offsets) if isinstance(part, Packed)
                              else tuple(part) if isinstance(part, Nullable) else part
                              for part in parts], count)
        if text is not None:
            return text
    return _rows([part if isinstance(part, bytes) else _pieces(part) for part in parts], count)


def _pieces(column: np.ndarray | list[bytes] | list[str] | Packed | Nullable) -> Part:
    """Each row's JSON of ``column``; one ``bytes`` if it is the same in every row."""
    if isinstance(column, Packed):
        column = column.tolist()
    elif isinstance(column, Nullable):
        column = np.where(column.present, column.values.astype(object), None)
    if isinstance(column, np.ndarray):
        if column.dtype == np.float64 and (column.view(np.int64) == column.view(np.int64)[0]
                                           ).all():
            return numbers([column[0].item()])[0]  # bit for bit one number (not 0.0 and -0.0)
        column = column.tolist() if column.dtype.kind == "S" else numbers(column.tolist())
    elif type(column[0]) is str:  # strings, not yet written (``values``)
        column = strings(column)
    first = column[0]
    if column[-1] != first or column[len(column) // 2] != first:  # varies: no full count
        return column
    return first if column.count(first) == len(column) else column


def _rows(parts: list[Part], count: int) -> bytes:
    """``count`` rows, row ``j`` being each part's ``j``-th piece in turn (a ``bytes`` part is
    the same in every row): interleaved in one flat list, joined once."""
    merged: list[Part] = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    width = len(merged)
    flat: list[bytes | None] = [None] * (count * width)
    for j, part in enumerate(merged):
        flat[j::width] = [part] * count if isinstance(part, bytes) else part
    return b"".join(flat)
