"""JSON text as the plan's writers build it: each value as orjson writes it, many at once.

The pieces ``hostjson`` (the host table) and ``hostlists`` (the hosts' mirror and receive
lists) assemble rows from: numbers written by orjson in one call and split at their commas
(``numbers``), strings escaped at once by the standard library's C encoder (``strings``: the
same bytes as orjson for every code point), one value (``value``), pieces as fixed-width byte
arrays laid out side by side (``fixed``, ``side_by_side``) or interleaved and joined
(``interleaved``). ``compiled`` is the compiled writer (``planner/_hostjson.c``) both use
where it is built; ``compiled = None`` here forces the Python path everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any, Union

import numpy as np
import orjson

try:  # the compiled writer (planner/_hostjson.c); None: every table is written in Python
    from cosample.planner import _hostjson as compiled
except ImportError:  # pragma: no cover - a host without a compiler
    compiled = None

SORTED = orjson.OPT_SORT_KEYS
BLOCK = 4096  # hosts per chunk of the table
_CONSTANTS = {None: b"null", True: b"true", False: b"false"}
_CUT = b"\x00"  # between the strings of ``strings``: escaped inside any JSON string

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
        pieces = (
            encode_basestring(joined).encode().replace(b"\\u0000", b'"' + _CUT + b'"').split(_CUT)
        )
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
    if isinstance(item, int) and -(2**63) <= item < 2**63:
        return b"%d" % item
    if isinstance(item, list):
        return b"[" + b",".join([value(element) for element in item]) + b"]"
    return orjson.dumps(item, option=SORTED)


#: Widest piece (bytes) the writers lay out in fixed width.
WIDE = 256


def fixed(pieces: Sequence[bytes] | np.ndarray) -> np.ndarray | None:
    """``pieces`` as a fixed-width byte array (``S``), None if one is wider than ``WIDE``."""
    if isinstance(pieces, np.ndarray):
        return pieces if pieces.dtype.itemsize <= WIDE else None
    if max(map(len, pieces), default=0) > WIDE:
        return None
    return np.array(pieces, dtype=bytes) if len(pieces) else np.zeros(0, dtype="S1")


def side_by_side(parts: list[bytes | np.ndarray], count: int) -> bytes:
    """``count`` rows, row ``j`` being each part's ``j``-th piece in turn (a ``bytes`` part is
    the same in every row), from fixed-width arrays: laid out side by side, NULs dropped."""
    widths = [len(part) if isinstance(part, bytes) else part.dtype.itemsize for part in parts]
    matrix = np.zeros((count, sum(widths)), dtype=np.uint8)
    column = 0
    for part, width in zip(parts, widths):
        matrix[:, column : column + width] = (
            np.frombuffer(part, dtype=np.uint8)
            if isinstance(part, bytes)
            else part.view(np.uint8).reshape(count, width)
        )
        column += width
    flat = matrix.reshape(-1)
    return flat[flat != 0].tobytes()


def interleaved(parts: list[Part], count: int) -> bytes:
    """``count`` rows, row ``j`` being each part's ``j``-th piece in turn (a ``bytes`` part is
    the same in every row): interleaved in one flat list, joined once."""
    merged: list[Part] = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    width = len(merged)
    flat = [b""] * (count * width)  # (every slot written below)
    for j, part in enumerate(merged):
        flat[j::width] = [part] * count if isinstance(part, bytes) else part
    return b"".join(flat)
