"""A fleet's servers and traffic as CSV files, the form inventories and flow exports come in.

A description (JSON or YAML, docs/formats.md) may name a CSV file for either large part:
``servers: servers.csv`` (a header row of server fields, then one row per server; an empty
cell is a field not given, ``vm_ports`` space-separated) and ``traffic_pps: traffic.csv``
(header ``source,destination,pps``, one row per pair). Read with the standard library's
``csv`` reader (C), then checked as columns (``planner.columnchecks``): numbers parsed by
numpy at once, a row whose cells are not plainly accepted validated by the ``Server`` model
itself, so an error is the model's line placed by file, row and column:
``servers.csv: row 19: capacity_pps: input should be greater than or equal to 0 (got -1.0)``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cosample.gcpause import gc_paused
from cosample.planner.columnchecks import (
    ABSENT,
    INTEGERS,
    NUMBERS,
    ROW,
    TRAFFIC_BOUNDS,
    checked,
    within,
)
from cosample.planner.description import Server
from cosample.planner.errors import PlannerError
from cosample.validation import validate_at

TRAFFIC_HEADER = ("source", "destination", "pps")
_FIRST_ROW = 2  # rows are counted as a spreadsheet does: the header is row 1


def row(position: int) -> int:
    """The row number of a file's entry ``position`` (0: the first after the header)."""
    return position + _FIRST_ROW


class Locations:
    """Where a server or traffic entry is, for ``Columns.locate``: its CSV file and row."""

    def __init__(self, base_dir: Path, servers: Any, traffic: Any) -> None:
        self.files = {
            part: str(base_dir / name)
            for part, name in (("servers", servers), ("traffic", traffic))
            if isinstance(name, str) and name.lower().endswith(".csv")
        }

    def __call__(
        self, part: str, position: int, field: str
    ) -> tuple[str, tuple[int | str, ...]] | None:
        if part not in self.files:
            return None
        return f"{self.files[part]}: row {position + _FIRST_ROW}", (field,)


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows, every row as long as the header."""
    try:
        with open(path, newline="", encoding="utf-8") as stream, gc_paused():
            rows = list(csv.reader(stream, strict=True))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = (
            exc.strerror
            if isinstance(exc, OSError)
            else (
                "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"not valid CSV: {exc}"
            )
        )
        raise PlannerError(f"{path}: cannot read CSV: {reason}") from None
    if not rows:
        raise PlannerError(f"{path}: row 1: empty file, expected a header row")
    header, rows = rows[0], rows[1:]
    width = len(header)
    if set(map(len, rows)) - {width}:
        k = next(k for k, row in enumerate(rows) if len(row) != width)
        raise PlannerError(
            f"{path}: row {k + _FIRST_ROW}: {len(rows[k])} cells, the header has {width}"
        )
    return header, rows


def _columns(rows: list[list[str]], width: int) -> Iterator[tuple[str, ...]]:
    return iter(zip(*rows)) if rows else iter([()] * width)


def _numbers(cells: tuple[str, ...]) -> tuple[list[Any], np.ndarray]:
    """The cells as floats (absent where empty; the text itself where it is no number) and
    which parsed."""
    try:
        values = np.array(cells, dtype=float).tolist() if "" not in cells else None
    except ValueError:
        values = None
    if values is not None:
        return values, np.ones(len(cells), dtype=bool)
    out: list[Any] = []
    for cell in cells:
        if cell == "":
            out.append(ABSENT)
            continue
        try:
            out.append(float(cell))
        except ValueError:
            out.append(cell)
    return out, np.array([type(v) is float or v is ABSENT for v in out])


#: Server fields that are mappings (``guard``): no CSV cell holds one.
MAPPINGS = ("guard",)


def servers(path: Path) -> dict[str, list[Any]]:
    """The servers file's columns, checked (``planner.columnchecks.checked``)."""
    header, rows = _rows(path)
    fields = [key for key in Server.model_fields if key not in MAPPINGS]
    for k, name in enumerate(header):
        if name in MAPPINGS:
            raise PlannerError(
                f"{path}: row 1: column {k + 1} {name!r}: a mapping, which a cell cannot hold "
                "(give it in the JSON or YAML form of the servers)"
            )
        if name not in fields:
            raise PlannerError(
                f"{path}: row 1: column {k + 1} {name!r}: not a server field "
                f"(one of {', '.join(fields)})"
            )
        if header.index(name) != k:
            raise PlannerError(f"{path}: row 1: column {name!r} given twice")
    if not rows:
        raise PlannerError(f"{path}: no servers (a header row and at least one row)")
    raw: dict[str, list[Any]] = {}
    n = len(rows)
    slow = np.zeros(n, dtype=bool)
    with gc_paused():
        columns = list(_columns(rows, len(header)))
    del rows
    for name, cells in zip(header, columns):
        if name in NUMBERS:
            raw[name], parsed = _numbers(cells)
            slow |= ~parsed
        elif name in INTEGERS:  # digits as an integer; anything else for the model to refuse
            raw[name] = [
                int(cell) if cell.isascii() and cell.isdigit() else cell or ABSENT for cell in cells
            ]
        elif name == "vm_ports":
            raw[name] = [cell.split() if cell else ABSENT for cell in cells]
        else:
            raw[name] = [cell if cell else ABSENT for cell in cells] if "" in cells else list(cells)

    def model(k: int) -> Server:
        entry = {key: column[k] for key, column in raw.items() if column[k] is not ABSENT}
        return validate_at(
            Server, entry, (), where=f"{path}: row {k + _FIRST_ROW}", error=PlannerError
        )

    return checked(raw, n, slow, model)


def traffic(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """Sources, destinations and pps of the traffic file (``DataCentre.from_columns`` refuses
    a pair given twice)."""
    header, rows = _rows(path)
    if tuple(header) != TRAFFIC_HEADER:
        raise PlannerError(
            f"{path}: row 1: expected the header {','.join(TRAFFIC_HEADER)} "
            f"(got {','.join(header)!r})"
        )
    with gc_paused():
        sources, destinations, cells = (list(column) for column in _columns(rows, 3))
    del rows
    values, parsed = _numbers(tuple(cells))
    if parsed.all() and ABSENT not in values:
        pps = np.array(values, dtype=float)
        bad = ~within(pps, *TRAFFIC_BOUNDS)  # the matrix's rule: one for both forms
    else:
        pps, bad = None, ~parsed | np.array([v is ABSENT for v in values])
    if bad.any():
        k = int(np.argmax(bad))
        validate_at(
            ROW,
            {"pps": None if values[k] is ABSENT else values[k]},
            (),
            where=f"{path}: row {k + _FIRST_ROW}",
            error=PlannerError,
        )
        raise PlannerError(f"{path}: row {k + _FIRST_ROW}: pps: not a number >= 0")
    assert pps is not None  # where it is None, ``bad`` has a row: raised above
    return sources, destinations, pps
