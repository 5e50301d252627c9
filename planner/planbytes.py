"""A plan's bytes: compact canonical JSON (what agents fetch, sign and ``plan_id`` hashes), the
host table kept as the bytes it was written as (``HostTable``), and the plan file written
atomically (indented for people when small, compact when large).

Everything but ``version``, ``created``, ``expires`` and ``solver.seconds`` is a pure function of
the data centre and the solver, and ``plan_id`` hashes exactly that part (``VOLATILE`` left
out), so the same input gives the same plan_id and byte-identical hosts and summary.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from cosample.files import write_output
from cosample.planner.errors import PlannerError

VOLATILE = ("version", "created", "expires", "plan_id")


class HostTable(Mapping):
    """A plan's host table kept as its compact sorted JSON (``chunks``, consecutive pieces of
    one document), read-only; parsed into dicts (orjson) the first time an entry is looked up.
    ``compact_json`` splices the chunks into a plan's bytes; ``canonical_json`` writes the
    parsed table. ``busiest``: the entries of the hosts with the highest capacity use, as many
    as ``report`` shows, highest first (name order among equals), written by the same code
    from the same columns, so the table a person reads needs no parsing of the whole."""

    __slots__ = ("chunks", "busiest", "_parsed")

    def __init__(self, chunks: list[bytes], busiest: dict[str, Any] | None = None) -> None:
        self.chunks = chunks
        self.busiest = busiest
        self._parsed: dict[str, Any] | None = None

    @property
    def json(self) -> bytes:
        """The table's bytes, joined once: the chunks become that one piece (the same bytes).
        At 10^6 hosts a join of the 200 MB costs 0.08 s, and a two-phase publication asks for
        them three times (the transition, the slices, the next publication's transition)."""
        if len(self.chunks) != 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0]

    def parsed(self) -> dict[str, Any]:
        if self._parsed is None:
            self._parsed = orjson.loads(self.json)
        return self._parsed

    def __getitem__(self, name: str) -> Any:
        return self.parsed()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parsed())

    def __len__(self) -> int:
        return len(self.parsed())

    def __repr__(self) -> str:
        return f"HostTable({sum(map(len, self.chunks)):,} bytes)"


def plan_id(plan: dict[str, Any]) -> str:
    """SHA-256 of the plan without its volatile fields (time, version, solve time)."""
    stable = {key: value for key, value in plan.items() if key not in VOLATILE}
    stable["solver"] = {k: v for k, v in plan["solver"].items() if k != "seconds"}
    digest = hashlib.sha256()
    for piece in _pieces(stable):
        digest.update(piece)
    return digest.hexdigest()


def compact_json(document: Any) -> bytes:
    """Sorted keys, no white space: the bytes agents fetch and ``plan_id`` hashes.

    Written by orjson (Rust): 10^5 hosts, 52 MB, in about a fifth of the standard library's
    time (docs/dependencies.md). Numbers are the shortest text that reads back as the same
    double (``1e-05`` is written ``0.00001``: the same number). orjson writes NaN as null, so
    every float a plan carries is checked finite where it is made (``significant``, ``_num``).
    A plan's (or a plan set's plans') ``HostTable`` is spliced in as the bytes it holds.
    """
    pieces = _pieces(document)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _pieces(document: Any) -> list[bytes]:
    """``compact_json(document)`` as consecutive pieces: the host tables' chunks as they are,
    between the rest serialised once with a NUL byte where each table goes (orjson escapes
    control characters in strings, so a raw NUL can be nothing else)."""
    tables: list[HostTable] = []

    def marked(plan: Any) -> Any:
        if isinstance(plan, dict) and isinstance(plan.get("hosts"), HostTable):
            tables.append(plan["hosts"])
            return {**plan, "hosts": _MARK}
        return plan

    if isinstance(document, HostTable):
        return list(document.chunks)
    document = marked(document)
    if not tables and isinstance(document, dict) and isinstance(document.get("plans"), list):
        document = {**document, "plans": [marked(plan) for plan in document["plans"]]}
    data = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    if not tables:
        return [data]
    parts = data.split(b"\x00")
    if len(parts) != len(tables) + 1:
        raise PlannerError("compact_json: a NUL byte outside the host tables")  # cannot happen
    pieces = [parts[0]]
    for table, part in zip(tables, parts[1:]):
        pieces += [*table.chunks, part]
    return pieces


_MARK = orjson.Fragment(b"\x00")


def canonical_json(document: Any) -> str:
    """Sorted keys, two-space indent, no NaN: the one serialisation of a plan."""
    return json.dumps(document, sort_keys=True, indent=2, allow_nan=False, default=_plain) + "\n"


#: Plans of more hosts than this are written compact (``compact_json``); smaller ones indented.
INDENT_MAX_HOSTS = 1000


def write_plan(plan: dict[str, Any], path: str | Path) -> str:
    """Write atomically: a reader sees the old plan or the new one, never half of it
    (``-``: standard output; a device or a link: in place, ``cosample.files.write_output``).
    Returns where it went.

    Up to ``INDENT_MAX_HOSTS`` hosts, ``canonical_json`` (indented, for people); above, the
    compact bytes ``plan_id`` hashes (orjson, a ``HostTable`` spliced in as it is, never
    parsed): the standard library's indenting encoder is pure Python, 77 s for 10^6 hosts.
    Both parse to the same document, so readers and ``plan_id`` see no difference."""
    if plan["summary"]["servers"] <= INDENT_MAX_HOSTS:
        text = canonical_json(plan)
        return write_output(path, lambda stream: stream.write(text))
    pieces = _pieces(plan) + [b"\n"]  # written one by one: never joined in memory
    return write_output(path, lambda stream: stream.writelines(pieces), binary=True)


def _plain(value: Any) -> Any:
    if isinstance(value, HostTable):
        return value.parsed()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
