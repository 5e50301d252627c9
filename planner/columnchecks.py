"""The server list's fields checked as columns, for all servers at once (``planner.bulk``
reads a description's servers this way, ``planner.fleetcsv`` a servers CSV file).

Types by one pass over a column, numbers and bounds in numpy, strings by their distinct values,
with conditions sufficient for the ``Server`` model to accept a value unchanged; the bounds are
read from the model's own declarations (``planner.description``). A server whose value is not
plainly accepted that way goes through the model itself (``checked``'s ``model``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from itertools import chain
from typing import Any, get_args

import annotated_types
import numpy as np
from pydantic_core import PydanticUndefined

from cosample.planner.description import Description, Server
from cosample.validation import SERVER_NAME, plain_tunnel_address


def _real(value: object) -> float:
    """A declared bound as a number (the declarations give ints and floats)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a bound that is not a number: {value!r}")
    return float(value)


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
                lowest = _real(constraint.ge)
            elif isinstance(constraint, annotated_types.Gt):
                lowest, strict = _real(constraint.gt), True
            elif isinstance(constraint, annotated_types.Lt):
                highest = _real(constraint.lt)
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
        lowest: int | None = None
        highest: int | None = None
        for constraint in chain.from_iterable(
            getattr(info, "metadata", (info,)) for info in declared[1:]
        ):
            if isinstance(constraint, annotated_types.Ge):
                lowest = int(_real(constraint.ge))
            elif isinstance(constraint, annotated_types.Le):
                highest = int(_real(constraint.le))
            else:
                return None
        return None if lowest is None or highest is None else (lowest, highest)
    return None


#: Integer fields of a server and their bounds (``observation_domain``).
INTEGERS = {
    key: limits
    for key, info in Server.model_fields.items()
    if (limits := _int_bounds(info.annotation)) is not None
}
#: A row of the traffic matrix (``{destination: pps}``) and its numbers' bounds.
ROW = get_args(Description.model_fields["traffic_pps"].annotation)[1]
_traffic_bounds = _bounds(get_args(ROW)[1])
if _traffic_bounds is None:  # the fast paths check the numbers by the model's declared bounds
    raise TypeError("planner.description: traffic_pps declares no bounds on its numbers")
TRAFFIC_BOUNDS: tuple[float, bool, float] = _traffic_bounds
NUMBER_TYPES = {int, float}
ABSENT = object()
_SIMPLE_INTERFACE = re.compile(r"[A-Za-z0-9_.\-]{1,15}")


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
        if _plain_names(column):
            return np.ones(len(column), dtype=bool)
        return _distinct(column, lambda v: type(v) is str and SERVER_NAME.fullmatch(v) is not None)
    if key in ("calibration", "guard"):  # read beside the description: the model resolves it
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


#: Names one per line, each by the server-name rule: a whole column checked by one match.
_NAMES = re.compile(f"(?:{SERVER_NAME.pattern}\n)*{SERVER_NAME.pattern}")


def _plain_names(column: list[Any]) -> bool:
    """True when every name is a string by the rule, checked on the names joined by newlines
    (a newline inside a name would split it: counted first); False leaves it to a check per
    name. At 10^6 names it took 0.40x the time of the set and test per distinct name that
    checked names before the rule (median of 5, side by side in one run, issue 43)."""
    if not column or set(map(type, column)) != {str}:
        return False
    joined = "\n".join(column)
    return joined.count("\n") == len(column) - 1 and _NAMES.fullmatch(joined) is not None


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
        kinds = [type(v) in NUMBER_TYPES or v is None for v in column]
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
