"""The plan's host table as compact JSON with sorted keys, written column by column.

A plan names 10^5 hosts with about twenty fields each. Building one Python dict per host and
then serialising the table took about 1.1 s of a 10^5-server controller cycle (docs/results.md,
"Controller cycle"); here every field is serialised once for all hosts (orjson writes a whole
column of numbers at once, split at its commas) and the hosts' objects are assembled from those
pieces by one ``bytes.join``. The bytes are exactly ``orjson.dumps(hosts, OPT_SORT_KEYS)`` of the
per-host dicts (tests/planner/test_planfile_columns.py checks it on random data centres, extras
included), so every reader of plans sees the same file as before.

Only numbers go through the split (a number's JSON has no comma); strings and the inventory's
extras are serialised one value at a time, strings by the standard library's C string encoder
(``json.encoder.encode_basestring``: the same bytes as orjson for every code point, checked by
the tests): a separate ``orjson.dumps`` per small value costs a page fault each (orjson's output
buffer), 3-15 us instead of 0.2 us.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import numpy as np
import orjson

SORTED = orjson.OPT_SORT_KEYS
BLOCK = 4096  # hosts per chunk of the table
_NONE: Mapping[str, Any] = {}
_CONSTANTS = {None: b"null", True: b"true", False: b"false"}


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
        pieces = encode_basestring(joined)[1:-1].encode().split(b"\\u0000")
        if len(pieces) == len(values):  # no string spelled "\u0000" out either
            return [b'"%b"' % piece for piece in pieces]
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


def objects(fields: Mapping[str, list[bytes]], count: int) -> list[bytes]:
    """``count`` JSON objects, field ``key`` of object ``j`` being ``fields[key][j]``."""
    keys = sorted(fields)
    template = b"{" + b",".join(_key(key) + b":%b" for key in keys) + b"}"
    if not keys:
        return [b"{}"] * count
    return [template % values for values in zip(*(fields[key] for key in keys))]


def grouped(owner: np.ndarray, peer_rank: np.ndarray, items: list[bytes],
            n: int) -> list[bytes]:
    """Per owner 0..n-1, the JSON array of its ``items`` in ``peer_rank`` order (``[]`` if none)."""
    lists = [b"[]"] * n
    if not items:
        return lists
    order = np.lexsort((peer_rank, owner))
    ordered = [items[k] for k in order.tolist()]
    owners = owner[order]
    starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
    ends = np.append(starts[1:], len(ordered))
    for who, start, end in zip(owners[starts].tolist(), starts.tolist(), ends.tolist()):
        lists[who] = b"[" + b",".join(ordered[start:end]) + b"]"
    return lists


def table(names: Sequence[str], fields: Mapping[str, np.ndarray | list[bytes]],
          extras: Mapping[str, Mapping[str, Any]], block: int = BLOCK) -> list[bytes]:
    """``{name: {field: value, ...}, ...}`` in sorted order, as consecutive chunks of bytes.

    ``fields``: per field, a numpy array of numbers (None in an object array: null), serialised
    here, or every host's JSON already. A host's ``extras`` are merged into its object (an extra
    with a field's name replaces it, as ``dict.update`` would). Hosts are written ``block`` at a
    time, so the pieces of only one block are alive at once (fresh memory costs page faults)."""
    n = len(names)
    if n == 0:
        return [b"{}"]
    order = sorted(range(n), key=names.__getitem__)
    extra = [extras.get(names[i]) or _NONE for i in order] if extras else None
    quoted = strings(names)
    chunks = []
    start = 0
    while start < n:
        end = min(start + block, n)
        keys: tuple[str, ...] = ()
        if extra is not None:  # a run of hosts with the same extras' keys
            same = extra[start].keys()
            keys = tuple(sorted(same))
            end = next((k for k in range(start + 1, end) if extra[k].keys() != same), end)
        flat = _rows(quoted, fields, extras, names, keys, order[start:end])
        if start == 0:
            flat[0] = b"{"  # no comma before the first entry
        chunks.append(b"".join(flat))
        start = end
    chunks.append(b"}")
    return chunks


def _rows(quoted: list[bytes], fields: Mapping[str, np.ndarray | list[bytes]],
          extras: Mapping[str, Mapping[str, Any]], names: Sequence[str],
          extra_keys: tuple[str, ...], members: list[int]) -> list[Any]:
    """The pieces of ``members``' entries ``,"name":{...}``, interleaved in one flat list
    column by column: no per-host Python work but the reordering."""
    keys = sorted(set(fields) | set(extra_keys))
    count = len(members)
    width = 2 * len(keys) + 3
    flat: list[Any] = [None] * (count * width)
    flat[0::width] = [b","] * count
    flat[1::width] = [quoted[i] for i in members]
    index = np.asarray(members)
    for k, key in enumerate(keys):
        flat[2 + 2 * k::width] = [(b":{" if k == 0 else b",") + value(key) + b":"] * count
        if key in extra_keys:
            values = [extras[names[i]][key] for i in members]
            flat[3 + 2 * k::width] = strings(values) if all(
                type(item) is str for item in values) else [value(item) for item in values]
        elif isinstance(column := fields[key], np.ndarray):
            flat[3 + 2 * k::width] = numbers(column[index].tolist())
        else:
            flat[3 + 2 * k::width] = [column[i] for i in members]
    flat[width - 1::width] = [b"}"] * count
    return flat


def _key(key: str) -> bytes:
    """A key's JSON, escaped for a %-template."""
    return value(key).replace(b"%", b"%%")
