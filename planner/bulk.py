"""A description's servers and traffic validated as columns, not as 10^6 model objects.

``planner.description`` stays the schema. Here each field of the server list is checked for all
servers at once (types by one pass over the column, numbers and bounds in numpy, strings by
their distinct values) with conditions that are sufficient for the model to accept the value
unchanged; a server any of whose fields is not plainly accepted that way (an IPv6 address, a
calibration file, a bad value) goes through the ``Server`` model itself, whose first error is
the one reported (``servers[3].capacity_pps ('web4'): ... (got -1)``), and whose values are
taken. The traffic matrix is flattened once and its numbers checked in numpy; a bad row is
validated by the model's own type to name the entry. So every input the models reject is still
rejected with the models' message, at about the cost of reading the columns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, get_args

import annotated_types
import numpy as np
from pydantic_core import PydanticUndefined

from cosample.planner.description import LARGE_PARTS, Description, Envelope, Server
from cosample.planner.errors import PlannerError
from cosample.validation import plain_tunnel_address, validate, validate_at


def _bounds(annotation: Any) -> tuple[float, bool, float] | None:
    """(lowest, whether strict, highest exclusive) of an optional finite float field, read
    from its declaration (``Ge``, ``Gt``, ``Lt``); None for anything else (the model checks)."""
    for option in (annotation, *get_args(annotation)):
        declared = get_args(option)
        if not declared or declared[0] is not float:
            continue
        lowest, strict, highest = -math.inf, False, math.inf
        for constraint in chain.from_iterable(
            getattr(info, "metadata", (info,)) for info in declared[1:]
        ):
            if isinstance(constraint, annotated_types.Ge):
                lowest = constraint.ge
            elif isinstance(constraint, annotated_types.Gt):
                lowest, strict = constraint.gt, True
            elif isinstance(constraint, annotated_types.Lt):
                highest = constraint.lt
            elif type(constraint).__name__ != "AllowInfNan" or constraint.allow_inf_nan:
                return None
        return lowest, strict, highest
    return None


#: Number fields of a server and their bounds, as ``planner.description`` declares them.
NUMBERS = {
    key: bounds
    for key, info in Server.model_fields.items()
    if (bounds := _bounds(info.annotation)) is not None
}


def _int_bounds(annotation: Any) -> tuple[int, int] | None:
    """(lowest, highest) inclusive of an optional bounded int field (``Ge``, ``Le``)."""
    for option in (annotation, *get_args(annotation)):
        declared = get_args(option)
        if not declared or declared[0] is not int:
            continue
        lowest, highest = None, None
        for constraint in chain.from_iterable(
            getattr(info, "metadata", (info,)) for info in declared[1:]
        ):
            if isinstance(constraint, annotated_types.Ge):
                lowest = constraint.ge
            elif isinstance(constraint, annotated_types.Le):
                highest = constraint.le
            else:
                return None
        return None if lowest is None or highest is None else (lowest, highest)
    return None


#: Integer fields of a server and their bounds (``observation_domain``).
INTEGERS = {
    key: bounds
    for key, info in Server.model_fields.items()
    if (bounds := _int_bounds(info.annotation)) is not None
}
#: A row of the traffic matrix (``{destination: pps}``) and its numbers' bounds.
ROW = get_args(Description.model_fields["traffic_pps"].annotation)[1]
TRAFFIC_BOUNDS = _bounds(get_args(ROW)[1])
_NUMBER_TYPES = {int, float}
ABSENT = object()
_SIMPLE_INTERFACE = re.compile(r"[A-Za-z0-9_.\-]{1,15}")


@dataclass(frozen=True)
class Columns:
    """A validated description: the rest as the model (``servers`` holds the first server
    only), each server field as a list over all servers (None where absent), the traffic as
    its source names, destination names and numbers."""

    header: Envelope
    servers: dict[str, list[Any]]
    traffic_rows: list[str]
    traffic_lengths: list[int]
    traffic_dst: list[str]
    traffic_pps: np.ndarray
    #: where an entry is, for errors the columns alone cannot see (duplicate names, unknown
    #: servers): ``("servers" | "traffic", position, field) -> (where, location)``; None: in
    #: the document (``servers[k].field``, ``traffic_pps.src.dst``), as for a part it
    #: returns None for
    locate: Callable[[str, int, str], tuple[str, tuple[int | str, ...]] | None] | None = None
    #: False: a (source, destination) pair may come twice (a CSV file), which is an error
    pairs_unique: bool = True


def read(document: Any, where: str, base_dir: Path = Path(".")) -> Columns:
    """``document`` (parsed) validated; ``PlannerError`` with the models' one line if not.
    ``servers`` and ``traffic_pps`` may name CSV files (``planner.fleetcsv``) in ``base_dir``."""
    parts = document if isinstance(document, dict) else {}
    servers, traffic = parts.get("servers"), parts.get("traffic_pps", {})
    if not (_is_csv(servers) or isinstance(servers, list) and servers) or not (
        _is_csv(traffic) or isinstance(traffic, dict)
    ):
        validate(Description, document, where=where, error=PlannerError)  # raises: the model's line
        raise PlannerError(
            f"{where}: cannot read the description"
        )  # unreachable: the model said no
    header = validate(
        Envelope,
        {k: v for k, v in parts.items() if k not in LARGE_PARTS},
        where=where,
        error=PlannerError,
    )
    locate = None
    if _is_csv(servers) or _is_csv(traffic):
        from cosample.planner import fleetcsv

        locate = fleetcsv.Locations(base_dir, servers, traffic)
    columns = fleetcsv.servers(base_dir / servers) if _is_csv(servers) else _servers(servers, where)
    if _is_csv(traffic):
        sources, dst, pps = fleetcsv.traffic(base_dir / traffic)
        return Columns(header, columns, sources, [1] * len(sources), dst, pps, locate, False)
    rows, lengths, dst, pps = _traffic(traffic, where)
    return Columns(header, columns, rows, lengths, dst, pps, locate)


def _is_csv(part: Any) -> bool:
    return isinstance(part, str) and part.lower().endswith(".csv")


def from_model(description: Description) -> Columns:
    """The columns of a description already validated as a whole."""
    servers = description.servers
    traffic = description.traffic_pps
    rows = list(traffic.values())
    return Columns(
        description,
        {key: [getattr(s, key) for s in servers] for key in Server.model_fields},
        list(traffic),
        list(map(len, rows)),
        list(chain.from_iterable(rows)),
        np.array(list(chain.from_iterable(map(dict.values, rows))), dtype=float),
    )


def _servers(servers: list[Any], where: str) -> dict[str, list[Any]]:
    """Each field a list over the servers (None: absent), every value accepted by the model."""
    n = len(servers)
    fields = Server.model_fields
    if set(map(type, servers)) != {dict} or not set().union(*servers) <= fields.keys():
        slow = np.array([type(s) is not dict or not s.keys() <= fields.keys() for s in servers])
        keys = set().union(*(s for s in servers if type(s) is dict)) & fields.keys()
    else:
        slow = np.zeros(n, dtype=bool)
        keys = set().union(*servers)
    columns = {
        key: [s.get(key, ABSENT) if type(s) is dict else ABSENT for s in servers] for key in keys
    }
    return checked(
        columns,
        n,
        slow,
        lambda k: validate_at(
            Server,
            servers[k],
            ("servers", k),
            where=where,
            root={"servers": servers},
            error=PlannerError,
        ),
    )


def checked(
    raw: dict[str, list[Any]], n: int, slow: np.ndarray, model: Callable[[int], Server]
) -> dict[str, list[Any]]:
    """Columns of ``n`` servers (``ABSENT`` where not given) checked at once; ``model(k)``
    validates server ``k`` with the model (raising its error) for every server not plainly
    accepted (or marked ``slow``), and its values are taken."""
    fields = Server.model_fields
    columns: dict[str, list[Any]] = {}
    for key, column in raw.items():
        if ABSENT in column:  # absent: the declared default, or the model says it is required
            default = fields[key].default
            if default is PydanticUndefined:
                slow |= np.array([v is ABSENT for v in column])
                default = None
            column = [default if v is ABSENT else v for v in column]
        slow |= ~_accepted(key, column)
        columns[key] = column
    if "mirror_cap_bytes_per_s" in columns:  # the model's cross-field rule: a cap needs a size
        slow |= np.array(
            [
                cap is not None and size is None
                for cap, size in zip(
                    columns["mirror_cap_bytes_per_s"], columns.get("packet_bytes", [None] * n)
                )
            ]
        )
    for key in fields.keys() - columns.keys():
        columns[key] = [
            None if fields[key].default is PydanticUndefined else fields[key].default
        ] * n
    for k in np.flatnonzero(slow).tolist():  # the model decides, and its values are taken
        entry = model(k)
        for key in entry.model_fields_set:
            columns[key][k] = getattr(entry, key)
    return columns


def _accepted(key: str, column: list[Any]) -> np.ndarray:
    """Per server, whether the model surely accepts this value as it is (absent counts)."""
    if key in NUMBERS:
        return _numbers(column, *NUMBERS[key])
    if key in INTEGERS:
        lowest, highest = INTEGERS[key]
        return np.array(
            [value is None or type(value) is int and lowest <= value <= highest for value in column]
        )
    if key == "name":
        return _distinct(column, lambda v: type(v) is str and len(v) > 0)
    if key in ("calibration", "guard"):  # the model reads what is given (a file, a mapping)
        return np.array([value is None for value in column])
    if key == "tunnel_ip":
        return _distinct(column, lambda v: v is None or type(v) is str and plain_tunnel_address(v))
    if key == "bridge":
        return _distinct(column, lambda v: v is None or _interface(v))
    if key == "bridge_layout":
        return _distinct(column, lambda v: type(v) is str and v in ("patch", "single"))
    if key == "vm_ports":
        ports = [v is None or type(v) is list for v in column]
        if not all(ports):
            return np.array(ports)
        names = set(chain.from_iterable(v for v in column if v is not None))
        good = (
            {v for v in names if type(v) is str and _interface(v)}
            if set(map(type, names)) <= {str}
            else set()
        )
        return np.array([v is None or all(p in good for p in v) for v in column])
    return np.zeros(len(column), dtype=bool)


def _interface(name: Any) -> bool:
    return type(name) is str and bool(_SIMPLE_INTERFACE.fullmatch(name)) and name not in (".", "..")


def _distinct(column: list[Any], accept: Callable[[Any], bool]) -> np.ndarray:
    """``accept`` applied once per distinct value (unhashable values are refused here)."""
    try:
        values = set(column)
    except TypeError:
        return np.array([_hashable(v) and accept(v) for v in column])
    refused = {v for v in values if not accept(v)}
    if not refused:
        return np.ones(len(column), dtype=bool)
    return np.array([v not in refused for v in column])


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _numbers(column: list[Any], lowest: float, strict: bool, highest: float) -> np.ndarray:
    """Finite numbers (not booleans) within the bounds, or None."""
    types = set(map(type, column))
    if not types <= {int, float, type(None)}:
        kinds = [type(v) in _NUMBER_TYPES or v is None for v in column]
        column = [v if ok else None for v, ok in zip(column, kinds)]
        typed = np.array(kinds)
    else:
        typed = np.ones(len(column), dtype=bool)
    try:
        values = np.array(
            [math.nan if v is None else v for v in column] if type(None) in types else column,
            dtype=float,
        )
    except OverflowError:  # an integer beyond a double: the model says so
        return np.array([not (type(v) is int and abs(v) > 1e308) for v in column]) & typed
    absent = np.array([v is None for v in column]) if type(None) in types else False
    return (within(values, lowest, strict, highest) | absent) & typed


def within(values: np.ndarray, lowest: float, strict: bool, highest: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (
            np.isfinite(values)
            & ((values > lowest) if strict else (values >= lowest))
            & (values < highest)
        )


def _traffic(
    traffic: Mapping[str, Any], where: str
) -> tuple[list[str], list[int], list[str], np.ndarray]:
    """The matrix flattened in order, its numbers checked finite and >= 0 all at once."""
    rows = list(traffic.values())
    if set(map(type, rows)) <= {dict}:
        numbers = list(chain.from_iterable(map(dict.values, rows)))
        if set(map(type, numbers)) <= _NUMBER_TYPES:
            try:
                pps = np.array(numbers, dtype=float)
            except OverflowError:
                pps = None
            if (
                pps is not None
                and TRAFFIC_BOUNDS is not None
                and within(pps, *TRAFFIC_BOUNDS).all()
            ):
                return (list(traffic), list(map(len, rows)), list(chain.from_iterable(rows)), pps)
    for source, row in traffic.items():  # the first row the model refuses names the entry
        validate_at(ROW, row, ("traffic_pps", source), where=where, error=PlannerError)
    raise PlannerError(f"{where}: traffic_pps: not a matrix of numbers")  # unreachable
