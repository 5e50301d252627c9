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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from cosample.planner import fleetcsv
from cosample.planner.columnchecks import ABSENT, NUMBER_TYPES, ROW, TRAFFIC_BOUNDS, checked, within
from cosample.planner.description import LARGE_PARTS, Description, Envelope, Server
from cosample.planner.errors import PlannerError
from cosample.validation import validate, validate_at


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
    servers: Any = parts.get("servers")  # parsed JSON, a list or a CSV file's name (below)
    traffic = parts.get("traffic_pps", {})
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


def _traffic(
    traffic: Mapping[str, Any], where: str
) -> tuple[list[str], list[int], list[str], np.ndarray]:
    """The matrix flattened in order, its numbers checked finite and >= 0 all at once."""
    rows = list(traffic.values())
    if set(map(type, rows)) <= {dict}:
        numbers = list(chain.from_iterable(map(dict.values, rows)))
        if set(map(type, numbers)) <= NUMBER_TYPES:
            try:
                pps = np.array(numbers, dtype=float)
            except OverflowError:
                pps = None
            if pps is not None and within(pps, *TRAFFIC_BOUNDS).all():
                return (list(traffic), list(map(len, rows)), list(chain.from_iterable(rows)), pps)
    for source, row in traffic.items():  # the first row the model refuses names the entry
        validate_at(ROW, row, ("traffic_pps", source), where=where, error=PlannerError)
    raise PlannerError(f"{where}: traffic_pps: not a matrix of numbers")  # unreachable
