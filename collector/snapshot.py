"""The collector snapshot (``cosample.snapshot`` version 2): the one model writer and readers share.

The collector serves it at ``GET /snapshot`` and ``replay --json`` prints it; the controller
validates what it reads with ``parse_snapshot_json`` and merges the snapshots of several
collector instances, each owning a disjoint set of agents, with ``merge_snapshots``. Version 2
is columnar: server names once, then one list per field (and the traffic matrix as index and
value lists), so a 10^5-server snapshot is validated by pydantic in Rust plus one pass per
rule across columns, not 10^5 nested objects. Field meanings are in docs/collector.md ("Snapshot").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from cosample.collector.errors import CollectorError
from cosample.collector.snapshottables import (
    Count,
    GuardEntry,
    InterfaceRates,
    InterfaceTable,
    PlanRef,
    ServerEstimate,
    ServerName,
    ServerTable,
    TrafficTable,
)
from cosample.collector.snapshotwire import SNAPSHOT_FORMAT, SNAPSHOT_VERSION
from cosample.times import format_time_ms
from cosample.validation import Strict, UtcTime, as_utc, describe, field_path, parse_refusal


class Snapshot(Strict):
    """What one collector (or a merge of several) knows about every server it owns, as columns:
    10^5 servers validate in a fraction of a second (pydantic checks every number in Rust, the
    rules across columns are one pass each)."""

    format: Literal[SNAPSHOT_FORMAT] = SNAPSHOT_FORMAT  # type: ignore[valid-type]  # pydantic reads the name
    format_version: Literal[SNAPSHOT_VERSION] = SNAPSHOT_VERSION  # type: ignore[valid-type]  # pydantic reads the name
    collector: Annotated[str, Field(min_length=1)]
    time: UtcTime
    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    plan: PlanRef | None
    servers: ServerTable
    interfaces: InterfaceTable | None = None
    traffic_pps: TrafficTable | None = None
    dropped: dict[str, Count] = Field(default_factory=dict)
    #: Samples deliberately not counted, by reason (``overlay_ingress``: tenant tunnel traffic
    #: already sampled at its sending server).
    ignored: dict[str, Count] = Field(default_factory=dict)
    #: sFlow agent addresses this collector heard in the window: an agent heard by two merged
    #: instances would be counted twice.
    agents: list[str] = Field(default_factory=list)
    #: Addresses of agents that neither plan nor inventory names, most recent first, with their
    #: datagrams: at most 32, each forgotten 5 min after its last datagram (their samples are
    #: ``dropped.unknown_agent``; no other state is kept for them).
    unknown_agents: dict[str, Count] = Field(default_factory=dict)
    #: What sampler sequence numbers said since start: ``reset`` (an implausible jump confirmed
    #: by the next sample), ``restart`` (an agent's uptime went back), ``late`` (reordered
    #: samples that filled a gap). docs/collector.md, "Loss".
    sequence: dict[str, Count] = Field(default_factory=dict)
    #: Discarded-packet samples (sFlow format 5) since start: server -> drop reason code ->
    #: samples (packets the server's switch dropped; ``ignored.discarded_packet`` in all).
    discards: dict[str, dict[str, Count]] = Field(default_factory=dict)
    #: When the collector process that made the snapshot started, and its exports since (from
    #: 1): signed with the rest, they let a reader use each snapshot once (docs/collector.md,
    #: "Snapshot"). None in a replay's or a merge's snapshot, and from collectors before them.
    started: UtcTime | None = None
    serial: Annotated[int, Field(ge=1)] | None = None
    #: Hosts whose guard runs them below their plan, by name (absent from snapshots of
    #: collectors before it: read as none).
    guard: dict[ServerName, GuardEntry] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> "Snapshot":
        if (self.started is None) != (self.serial is None):
            _fail(("serial",), "started and serial come together", self.serial)
        if self.started is not None and self.started > self.time:
            _fail(("started",), "after the snapshot's time", format_time_ms(self.started))
        table = self.servers
        n = len(table.name)
        for key in ServerTable.model_fields:
            values = getattr(table, key)
            if values is not None and len(values) != n:
                _fail(("servers", key), f"{len(values)} entries for {n} servers", len(values))
        _unique(table.name, ("servers", "name"))
        for rate in ("packets_per_s", "bytes_per_s"):
            low, high = getattr(table, f"{rate}_ci95_low"), getattr(table, f"{rate}_ci95_high")
            k = _first_where(lambda lo, hi: lo > hi, low, high)
            if k is not None:
                _fail(
                    ("servers", f"{rate}_ci95_low", k),
                    f"server {table.name[k]!r}: low bound "
                    f"above high bound ({low[k]:g} > {high[k]:g})",
                    low[k],
                )
        local, mirrored, samples = table.local_samples, table.mirrored_samples, table.samples
        k = _first_where(lambda lo, mi, sa: lo + mi != sa, local, mirrored, samples)
        if k is not None:
            _fail(
                ("servers", "samples", k),
                f"server {table.name[k]!r}: local_samples + "
                f"mirrored_samples ({local[k]} + {mirrored[k]}) != samples "
                f"({samples[k]})",
                int(samples[k]),
            )
        if self.interfaces is not None:
            _same_lengths(self.interfaces, "interfaces")
            _indices(self.interfaces.server, n, ("interfaces", "server"), "servers")
        if self.traffic_pps is not None:
            _same_lengths(self.traffic_pps, "traffic_pps", skip="names")
            if self.traffic_pps.names is not table.name:  # the binary form shares one list
                _unique(self.traffic_pps.names, ("traffic_pps", "names"))
            size = len(self.traffic_pps.names)
            _indices(self.traffic_pps.src, size, ("traffic_pps", "src"), "names")
            _indices(self.traffic_pps.dst, size, ("traffic_pps", "dst"), "names")
        return self

    def server_interfaces(self) -> dict[str, dict[str, InterfaceRates]]:
        """Polled port rates by server name."""
        out: dict[str, dict[str, InterfaceRates]] = {}
        if self.interfaces is not None:
            t = self.interfaces
            for k, port, i, o in zip(t.server, t.port, t.in_pps, t.out_pps):
                out.setdefault(self.servers.name[k], {})[port] = InterfaceRates(in_pps=i, out_pps=o)
        return out

    def estimates(self) -> dict[str, ServerEstimate]:
        """Every server as a ``ServerEstimate`` (interfaces and last sample included)."""
        ports = self.server_interfaces()
        return {
            name: self.servers.row(k, self.time, ports.get(name))
            for k, name in enumerate(self.servers.name)
        }

    @classmethod
    def from_servers(
        cls,
        servers: Mapping[str, ServerEstimate],
        *,
        collector: str,
        time: datetime,
        window_s: float,
        plan: PlanRef | None,
        traffic_pps: Mapping[str, Mapping[str, float]] | TrafficTable | None = None,
        **fields: Any,
    ) -> "Snapshot":
        """The snapshot of per-server estimates (rows in the mapping's order)."""
        rows = list(servers.values())
        time = as_utc(time)
        columns: dict[str, Any] = {"name": list(servers)}
        for key in (
            "packets_per_s",
            "bytes_per_s",
            "samples",
            "samples_per_s",
            "local_samples",
            "mirrored_samples",
            "coverage",
        ):
            columns[key] = [getattr(e, key) for e in rows]
        for rate in ("packets_per_s", "bytes_per_s"):
            columns[f"{rate}_ci95_low"] = [getattr(e, f"{rate}_ci95")[0] for e in rows]
            columns[f"{rate}_ci95_high"] = [getattr(e, f"{rate}_ci95")[1] for e in rows]
            variances = [getattr(e, f"{rate}_variance") for e in rows]
            columns[f"{rate}_variance"] = None if None in variances else variances
        columns["last_sample_age_s"] = [
            max(0.0, (time - e.last_sample).total_seconds()) if e.last_sample is not None else None
            for e in rows
        ]
        ports = [
            (k, port, rates)
            for k, e in enumerate(rows)
            for port, rates in sorted((e.interfaces or {}).items())
        ]
        interfaces = (
            None
            if not ports
            else {
                "server": [k for k, _, _ in ports],
                "port": [p for _, p, _ in ports],
                "in_pps": [r.in_pps for _, _, r in ports],
                "out_pps": [r.out_pps for _, _, r in ports],
            }
        )
        if traffic_pps is not None and not isinstance(traffic_pps, TrafficTable):
            traffic_pps = TrafficTable.from_dict(traffic_pps)
        return cls.model_validate(
            {
                "collector": collector,
                "time": time,
                "window_s": window_s,
                "plan": plan,
                "servers": columns,
                "interfaces": interfaces,
                "traffic_pps": traffic_pps,
                **fields,
            }
        )

    def to_json(self) -> str:
        """The wire form: the model's fields in declaration order, compact (columns of 10^5
        numbers would be a line each if indented), newline-terminated."""
        return self.model_dump_json() + "\n"


def _fail(loc: tuple, message: str, value: Any) -> None:
    raise ValidationError.from_exception_data(
        "snapshot",
        [InitErrorDetails(type=PydanticCustomError("snapshot", message), loc=loc, input=value)],
    )


def _same_lengths(table: BaseModel, name: str, skip: str | None = None) -> None:
    keys = [key for key in type(table).model_fields if key != skip]
    first = len(getattr(table, keys[0]))
    for key in keys[1:]:
        if len(getattr(table, key)) != first:
            _fail(
                (name, key),
                f"{len(getattr(table, key))} entries, {keys[0]} has {first}",
                len(getattr(table, key)),
            )


def _add(seen: set[str], name: str) -> bool:
    """``name`` added to ``seen``; False (it was not there)."""
    seen.add(name)
    return False


def _unique(names: list[str], loc: tuple) -> None:
    if len(set(names)) != len(names):
        seen: set[str] = set()
        k = next(k for k, name in enumerate(names) if name in seen or _add(seen, name))
        _fail(loc + (k,), f"{names[k]!r} appears twice", names[k])


def _first_where(test: Callable[..., Any], *columns: Sequence) -> int | None:
    """The first row where ``test`` holds, or None: element-wise on the binary form's numpy
    arrays (10^6 rows), row by row on JSON lists (so replaying needs no numpy)."""
    if columns and type(columns[0]).__module__ == "numpy":
        import numpy as np  # only for numpy's arrays: replaying needs no numpy

        bad = np.flatnonzero(test(*columns))
        return int(bad[0]) if bad.size else None
    return next((k for k, row in enumerate(zip(*columns)) if test(*row)), None)


def _indices(values: list[int], size: int, loc: tuple, what: str) -> None:
    k = _first_where(lambda value: value >= size, values)
    if k is not None:
        _fail(loc + (k,), f"no such row in {what} ({size} rows)", int(values[k]))


def parse_snapshot(data: bytes | str | Mapping[str, Any], where: str = "snapshot") -> Snapshot:
    """A validated snapshot from JSON text or a parsed object; ``CollectorError`` naming the
    field (and, for a server's column, the server)."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CollectorError(f"{where}: not valid UTF-8 JSON ({exc})") from None
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, 10^5 brackets
            raise CollectorError(f"{where}: not valid JSON: {parse_refusal(exc)}") from None
    try:
        return Snapshot.model_validate(data)
    except ValidationError as exc:
        message = describe(exc, where)
        loc = exc.errors(include_url=False)[0]["loc"]
        if (
            len(loc) == 3
            and loc[0] == "servers"
            and isinstance(loc[2], int)
            and isinstance(data, Mapping)
            and isinstance(data.get("servers"), Mapping)
        ):
            names = data["servers"].get("name")
            if (
                isinstance(names, list)
                and loc[2] < len(names)
                and loc[1] != "name"
                and "server " not in message
            ):
                prefix = f"{where}: {field_path(loc)}" if where else field_path(loc)
                message = message.replace(prefix, f"{prefix} (server {names[loc[2]]!r})", 1)
        raise CollectorError(message) from None


def parse_snapshot_json(data: bytes, where: str = "snapshot") -> Snapshot:
    """``parse_snapshot`` for JSON bytes, validated straight from them in Rust (the fast path:
    10^5 servers in a fraction of a second); on any error, ``parse_snapshot``'s message."""
    try:
        return Snapshot.model_validate_json(data)
    except ValidationError:
        parse_snapshot(data, where)
        raise CollectorError(f"{where}: not a valid snapshot") from None


def interval(centre: float, half_width: float) -> list[float]:
    """``[max(0, centre - h), centre + h]``: rates are never negative."""
    if not (math.isfinite(centre) and math.isfinite(half_width)):
        raise ValueError(f"non-finite estimate {centre!r} +/- {half_width!r}")
    return [max(0.0, centre - half_width), centre + half_width]
