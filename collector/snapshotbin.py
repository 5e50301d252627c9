"""The snapshot's binary columnar form: the same ``cosample.snapshot`` (version 2), its columns
of numbers as little-endian arrays, read at close to the speed of reading the bytes.

At 10^6 servers the JSON form is 240 MB of decimal numbers: validating it builds 2.6 * 10^7
Python numbers (the kept cycle's largest step at 10^6: docs/results/controller.md). This form keeps everything but the numeric
columns as the JSON the model reads (a header, validated by the same ``Snapshot`` model), and
each column of numbers (the servers' rates and counts, the interface rates, the matrix's index
and rate lists) as raw ``<f8`` or ``<i8`` values, checked by array operations with the model's
own rules (non-negative, finite, fractions at most 1, the rules across columns in
``Snapshot._consistent``). Errors name the form, the field path, the server and the value, as
the JSON reader's do. Layout (docs/collector.md, "Snapshot", binary form)::

    MAGIC (8 bytes) | header length (8 bytes, little-endian) | header (compact JSON)
    | zero padding to a multiple of 8 | column 0 | column 1 | ...

In the header, a column's place holds ``{"$column": k}``; ``columns[k]`` is ``[dtype, count]``
and the columns follow each other in that order, each ``8 * count`` bytes. A missing
``last_sample_age_s`` is NaN in its column. ``traffic_pps.names`` equal to ``servers.name`` is
written ``{"$same": "servers.name"}``: a 10^6-name list once.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any

import numpy as np
import orjson
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from cosample.collector.errors import CollectorError
from cosample.collector.snapshot import Snapshot
from cosample.collector.snapshottables import InterfaceTable, ServerTable, TrafficTable
from cosample.collector.snapshotwire import COUNT_COLUMNS
from cosample.validation import describe

#: The first bytes of the binary form (the JSON form starts with ``{``).
MAGIC = b"COSNAPB\x01"
#: The HTTP path and state file of the binary form, beside ``/snapshot`` and ``snapshot.json``.
BINARY_PATH, BINARY_FILE = "/snapshot.bin", "snapshot.bin"
CONTENT_TYPE = "application/vnd.cosample.snapshot"
_HEAD = struct.Struct("<8sQ")
_FLOAT, _INT = "<f8", "<i8"
#: Per table, its numeric columns and their kind: rates (finite, >= 0), counts (integers >= 0),
#: fractions (in [0, 1]) and ages (finite, any sign; NaN: none).
_KINDS = {
    "servers": {
        **{
            key: "rate"
            for key in ServerTable.model_fields
            if key not in ("name", "coverage", "last_sample_age_s", *COUNT_COLUMNS)
        },
        **{key: "count" for key in COUNT_COLUMNS},
        "coverage": "fraction",
        "last_sample_age_s": "age",
    },
    "interfaces": {"server": "count", "in_pps": "rate", "out_pps": "rate"},
    "traffic_pps": {"src": "count", "dst": "count", "pps": "rate"},
}
_TABLES: dict[str, type[ServerTable | InterfaceTable | TrafficTable]] = {
    "servers": ServerTable,
    "interfaces": InterfaceTable,
    "traffic_pps": TrafficTable,
}


def is_binary(data: bytes) -> bool:
    return data[: len(MAGIC)] == MAGIC


def encode(snapshot: Snapshot) -> bytes:
    """The binary form of a snapshot (the columns of a parsed one may be lists or arrays)."""
    header = snapshot.model_dump(mode="json", exclude=set(_TABLES))
    arrays: list[np.ndarray] = []
    for table_name, kinds in _KINDS.items():
        table = getattr(snapshot, table_name)
        if table is None:
            header[table_name] = None
            continue
        fields: dict[str, Any] = {}
        for key in type(table).model_fields:
            values = getattr(table, key)
            if key not in kinds or values is None:
                fields[key] = list(values) if values is not None else None
                continue
            if kinds[key] == "age" and not isinstance(values, np.ndarray):
                values = [np.nan if v is None else v for v in values]
            fields[key] = {"$column": len(arrays)}
            arrays.append(
                np.ascontiguousarray(values, dtype=_INT if kinds[key] == "count" else _FLOAT)
            )
        header[table_name] = fields
    traffic, servers = header.get("traffic_pps"), header["servers"]
    if traffic is not None and traffic["names"] == servers["name"]:
        traffic["names"] = {"$same": "servers.name"}
    header["columns"] = [[a.dtype.str, int(a.size)] for a in arrays]
    text = orjson.dumps(header)
    pad = b"\x00" * (-(_HEAD.size + len(text)) % 8)
    return b"".join([_HEAD.pack(MAGIC, len(text)), text, pad, *(a.tobytes() for a in arrays)])


def decode(data: bytes, where: str = "snapshot") -> Snapshot:
    """A validated snapshot from its binary form; ``CollectorError`` naming the field (and, for a
    server's column, the server and the value)."""
    header, columns = _header(data, where)
    shell = {key: value for key, value in header.items() if key not in _TABLES}
    tables: dict[str, Any] = {}
    names = _strings(header.get("servers"), "name", where, "servers")
    for table_name in _TABLES:
        raw = header.get(table_name)
        if raw is None and table_name != "servers":
            tables[table_name] = None
            continue
        if not isinstance(raw, dict):
            raise CollectorError(f"{where}: {table_name}: not a table (got {raw!r:.60})")
        tables[table_name] = _table(table_name, raw, columns, names, where)
    try:  # everything but the columns, by the model itself (then the columns put in)
        snapshot = Snapshot.model_validate(
            {**shell, **{name: _empty(name, table) for name, table in tables.items()}}
        )
    except ValidationError as exc:
        raise CollectorError(describe(exc, where)) from None
    _names(names, "servers.name", where)
    for path, values in (
        ("traffic_pps.names", (tables["traffic_pps"] or {}).get("names")),
        ("interfaces.port", (tables["interfaces"] or {}).get("port")),
    ):
        if values is not None and values is not names:  # the same list is checked once
            _names(values, path, where)
    snapshot = snapshot.model_copy(
        update={
            name: _TABLES[name].model_construct(**table) if table is not None else None
            for name, table in tables.items()
        }
    )
    try:
        return snapshot._consistent()  # type: ignore[operator]  # pydantic's stubs: a proxy
    except ValidationError as exc:
        message = describe(exc, where)
        loc = exc.errors(include_url=False)[0]["loc"]
        if (
            len(loc) == 3
            and loc[0] == "servers"
            and isinstance(loc[2], int)
            and loc[1] != "name"
            and "server " not in message
        ):
            message += f" (server {names[loc[2]]!r})"
        raise CollectorError(message) from None


def _header(data: bytes, where: str) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The header and the columns it declares, each a read-only view of ``data``."""
    if len(data) < _HEAD.size or not is_binary(data):
        raise CollectorError(f"{where}: not a binary snapshot (no {MAGIC!r} at the start)")
    _, size = _HEAD.unpack_from(data)
    if size > len(data) - _HEAD.size:
        raise CollectorError(
            f"{where}: header of {size} bytes, only {len(data) - _HEAD.size} follow"
        )
    try:
        header = orjson.loads(data[_HEAD.size : _HEAD.size + size])
    except orjson.JSONDecodeError as exc:
        raise CollectorError(f"{where}: header: not valid UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("columns"), list):
        raise CollectorError(f"{where}: header: columns: missing")
    offset = _HEAD.size + size + (-(_HEAD.size + size) % 8)
    columns = []
    for k, spec in enumerate(header.pop("columns")):
        if (
            not isinstance(spec, list)
            or len(spec) != 2
            or spec[0] not in (_FLOAT, _INT)
            or not isinstance(spec[1], int)
            or isinstance(spec[1], bool)
            or spec[1] < 0
        ):
            raise CollectorError(
                f'{where}: columns[{k}]: expected ["<f8" or "<i8", count] (got {spec!r:.60})'
            )
        end = offset + 8 * spec[1]
        if end > len(data):
            raise CollectorError(
                f"{where}: columns[{k}]: {spec[1]} values, the data ends "
                f"{(end - len(data)) // 8} values short"
            )
        columns.append(np.frombuffer(data, dtype=spec[0], count=spec[1], offset=offset))
        offset = end
    if offset != len(data):
        raise CollectorError(f"{where}: {len(data) - offset} bytes after the last column")
    return header, columns


def _table(
    table_name: str, raw: dict[str, Any], columns: list[np.ndarray], names: list[str], where: str
) -> dict[str, Any]:
    """One table's fields: the numeric ones as checked arrays, the others as given."""
    kinds = _KINDS[table_name]
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in kinds:
            if (
                isinstance(value, dict)
                and value == {"$same": "servers.name"}
                and table_name == "traffic_pps"
                and key == "names"
            ):
                value = names
            out[key] = value
            continue
        if value is None:
            out[key] = None
            continue
        k = value.get("$column") if isinstance(value, dict) else None
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(columns):
            raise CollectorError(
                f'{where}: {table_name}.{key}: expected {{"$column": index}} (got {value!r:.60})'
            )
        out[key] = _checked(
            columns[k],
            kinds[key],
            f"{table_name}.{key}",
            names if table_name == "servers" else None,
            where,
        )
    return out


def _checked(
    values: np.ndarray, kind: str, path: str, names: list[str] | None, where: str
) -> np.ndarray:
    """The model's rule for the column's kind, over the whole array; the first offender named."""
    if kind == "count":
        bad = values < 0 if values.dtype.kind == "i" else None
        rule = "a non-negative integer"
        if bad is None:
            raise CollectorError(
                f"{where}: {path}: expected integers ({_INT}), got {values.dtype.str}"
            )
    else:
        if values.dtype.kind != "f":
            raise CollectorError(
                f"{where}: {path}: expected numbers ({_FLOAT}), got {values.dtype.str}"
            )
        if kind == "age":
            bad = np.isinf(values)
            rule = "a finite number (or none)"
        else:
            bad = ~np.isfinite(values) | (values < 0)
            rule = "a finite number >= 0"
            if kind == "fraction":
                bad |= values > 1
                rule = "a finite number in [0, 1]"
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        server = f" (server {names[k]!r})" if names is not None and k < len(names) else ""
        raise CollectorError(
            f"{where}: {path}[{k}]{server}: expected {rule} (got {values[k].item()!r})"
        )
    return values


_NAMES = TypeAdapter(list[Annotated[str, Field(min_length=1)]], config=ConfigDict(strict=True))


def _names(values: Any, path: str, where: str) -> None:
    """A list of non-empty strings (checked in Rust, as the JSON form's model does)."""
    try:
        _NAMES.validate_python(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        at = "".join(f"[{part}]" for part in first["loc"])
        raise CollectorError(
            f"{where}: {path}{at}: {first['msg'][:1].lower()}"
            f"{first['msg'][1:]} (got {first.get('input')!r:.60})"
        ) from None


def _strings(raw: Any, key: str, where: str, table_name: str) -> list[str]:
    values = raw.get(key) if isinstance(raw, dict) else None
    if not isinstance(values, list):
        raise CollectorError(f"{where}: {table_name}.{key}: expected a list of names")
    return values


def _empty(table_name: str, table: dict[str, Any] | None) -> dict[str, Any] | None:
    """``table`` with its numeric columns empty and its name lists kept short: what the model
    checks of it here (types of the other fields, unknown keys); the columns are checked above."""
    if table is None:
        return None
    kinds = _KINDS[table_name]
    return {
        key: ([] if value is not None else None)
        if key in kinds
        else []
        if key in ("name", "names", "port") and isinstance(value, list)
        else value
        for key, value in table.items()
    }
