"""The collector snapshot (``cosample.snapshot`` version 1): the one model writer and readers share.

The collector serves it at ``GET /snapshot`` and ``replay --json`` prints it; the controller
validates what it reads with ``parse_snapshot`` and merges the snapshots of several collector
instances, each owning a disjoint set of agents, with ``merge_snapshots``. Field meanings are in
docs/collector.md ("Snapshot").
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer, model_validator

from cosample.collector.errors import CollectorError
from cosample.validation import Strict, validate

SNAPSHOT_FORMAT, SNAPSHOT_VERSION = "cosample.snapshot", 1


def _utc(value: Any) -> Any:
    """``2026-11-23T10:00:00Z`` -> an aware datetime; anything else is left to the type check."""
    if isinstance(value, str):
        if not value.endswith("Z"):
            raise ValueError("expected a UTC time like 2026-11-23T10:00:00Z")
        return datetime.fromisoformat(value).astimezone(timezone.utc)
    return value


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("expected a time with a time zone")
    return moment.astimezone(timezone.utc)


def format_time(moment: datetime) -> str:
    """UTC with ``Z`` and up to millisecond precision (samples arrive many times a second)."""
    moment = moment.astimezone(timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond // 1000:03d}"
    return text + "Z"


UtcTime = Annotated[datetime, BeforeValidator(_utc), AfterValidator(_aware),
                    PlainSerializer(format_time, return_type=str)]
Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


def _ordered(bounds: list[float]) -> list[float]:
    if bounds[0] > bounds[1]:
        raise ValueError("low bound above high bound")
    return bounds


Interval = Annotated[list[Annotated[float, Field(ge=0, allow_inf_nan=False)]],
                     Field(min_length=2, max_length=2), AfterValidator(_ordered)]


class PlanRef(Strict):
    """Which plan renormalised the estimates."""

    version: Count
    plan_id: Annotated[str, Field(min_length=1)]


class InterfaceRates(Strict):
    """Packet rates of one OVS port from sFlow generic interface counters (exact, not estimated)."""

    in_pps: Rate
    out_pps: Rate


class ServerEstimate(Strict):
    """One server's traffic as estimated from its own and its mirrored samples."""

    packets_per_s: Rate
    packets_per_s_ci95: Interval
    bytes_per_s: Rate
    bytes_per_s_ci95: Interval
    samples: Count
    samples_per_s: Rate
    local_samples: Count
    mirrored_samples: Count
    coverage: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    last_sample: UtcTime | None = None
    interfaces: dict[str, InterfaceRates] | None = None
    #: Estimated variances of the two rates: what lets partial estimates of one server from
    #: several instances be added exactly (the estimator is a sum over samples).
    packets_per_s_variance: Rate | None = None
    bytes_per_s_variance: Rate | None = None

    @model_validator(mode="after")
    def _counts_add_up(self) -> "ServerEstimate":
        if self.local_samples + self.mirrored_samples != self.samples:
            raise ValueError(f"local_samples + mirrored_samples ({self.local_samples} + "
                             f"{self.mirrored_samples}) != samples ({self.samples})")
        return self


class Snapshot(Strict):
    """What one collector (or a merge of several) knows about every server it owns."""

    format: Literal["cosample.snapshot"] = SNAPSHOT_FORMAT
    format_version: Literal[1] = SNAPSHOT_VERSION
    collector: Annotated[str, Field(min_length=1)]
    time: UtcTime
    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    plan: PlanRef | None
    servers: dict[str, ServerEstimate]
    traffic_pps: dict[str, dict[str, Rate]] | None = None
    dropped: dict[str, Count] = Field(default_factory=dict)
    #: Samples deliberately not counted, by reason (``overlay_ingress``: tenant tunnel traffic
    #: already sampled at its sending server).
    ignored: dict[str, Count] = Field(default_factory=dict)
    #: sFlow agent addresses this collector heard in the window: an agent heard by two merged
    #: instances would be counted twice.
    agents: list[str] = Field(default_factory=list)

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, two-space indent."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def parse_snapshot(data: bytes | str | Mapping[str, Any], where: str = "snapshot") -> Snapshot:
    """A validated snapshot from JSON text or a parsed object; ``CollectorError`` naming the field."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CollectorError(f"{where}: not valid UTF-8 JSON ({exc})") from None
    return validate(Snapshot, data, where=where, error=CollectorError)


def merge_snapshots(snapshots: Iterable[Snapshot], name: str | None = None) -> Snapshot:
    """One snapshot from several instances, each receiving the datagrams of its own agents.

    Each estimate is a sum over samples, so partial estimates add: a server known to several
    instances (its local samples reach one, its mirrored copies another) gets the sum of their
    rates and variances, its interval recomputed (this needs the ``*_variance`` fields); an agent
    heard by two instances is an error (its samples would count twice). ``traffic_pps``,
    ``dropped`` and ``ignored`` add up. The merge is as fresh as its stalest part (``time`` is
    the earliest) and ``window_s`` the shortest; ``plan`` is the newest when parts disagree (a
    plan change reaches the collectors at different times).
    """
    parts = list(snapshots)
    if not parts:
        raise CollectorError("merge: no snapshots to merge")
    heard: dict[str, int] = {}
    for number, part in enumerate(parts):
        for agent in part.agents:
            if heard.setdefault(agent, number) != number:
                raise CollectorError(f"merge: agent {agent} is heard by both "
                                     f"{parts[heard[agent]].collector!r} and {part.collector!r}; "
                                     "each agent must report to one collector")
    owners: dict[str, list[tuple[str, ServerEstimate]]] = {}
    for part in parts:
        for server, estimate in part.servers.items():
            owners.setdefault(server, []).append((part.collector, estimate))
    servers = {server: _add(server, found) for server, found in sorted(owners.items())}
    matrices = [part.traffic_pps for part in parts if part.traffic_pps is not None]
    traffic: dict[str, dict[str, float]] | None = None
    if matrices:
        traffic = {}
        for matrix in matrices:
            for src, row in matrix.items():
                out = traffic.setdefault(src, {})
                for dst, pps in row.items():
                    out[dst] = out.get(dst, 0.0) + pps
    plans = [part.plan for part in parts if part.plan is not None]
    return Snapshot(
        collector=name or "+".join(sorted(part.collector for part in parts)),
        time=min(part.time for part in parts),
        window_s=min(part.window_s for part in parts),
        plan=max(plans, key=lambda plan: plan.version) if plans else None,
        servers=servers, traffic_pps=traffic,
        dropped=_add_counts(part.dropped for part in parts),
        ignored=_add_counts(part.ignored for part in parts),
        agents=sorted(heard))


def _add_counts(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for mapping in counts:
        for reason, count in mapping.items():
            out[reason] = out.get(reason, 0) + count
    return dict(sorted(out.items()))


def _add(server: str, found: list[tuple[str, ServerEstimate]]) -> ServerEstimate:
    """The sum of partial estimates of one server (one part: itself)."""
    if len(found) == 1:
        return found[0][1]
    from cosample.collector.intervals import normal_interval, packets_interval
    parts = [estimate for _, estimate in found]
    if any(p.packets_per_s_variance is None or p.bytes_per_s_variance is None for p in parts):
        raise CollectorError(f"merge: server {server!r} is in the snapshots of "
                             f"{', '.join(repr(c) for c, _ in found)} without the variances "
                             "needed to add its estimates")
    packets = math.fsum(p.packets_per_s for p in parts)
    variance = math.fsum(p.packets_per_s_variance for p in parts)
    octets = math.fsum(p.bytes_per_s for p in parts)
    octet_variance = math.fsum(p.bytes_per_s_variance for p in parts)
    low, high = packets_interval(packets, variance)
    if packets == 0.0:
        high = math.fsum(p.packets_per_s_ci95[1] for p in parts)
    interfaces = {k: v for p in parts for k, v in (p.interfaces or {}).items()} or None
    lasts = [p.last_sample for p in parts if p.last_sample is not None]
    return ServerEstimate(
        packets_per_s=packets, packets_per_s_ci95=[low, high], bytes_per_s=octets,
        bytes_per_s_ci95=normal_interval(octets, octet_variance),
        samples=sum(p.samples for p in parts),
        samples_per_s=math.fsum(p.samples_per_s for p in parts),
        local_samples=sum(p.local_samples for p in parts),
        mirrored_samples=sum(p.mirrored_samples for p in parts),
        coverage=max(p.coverage for p in parts), last_sample=max(lasts) if lasts else None,
        interfaces=interfaces, packets_per_s_variance=variance,
        bytes_per_s_variance=octet_variance)


def interval(centre: float, half_width: float) -> list[float]:
    """``[max(0, centre - h), centre + h]``: rates are never negative."""
    if not (math.isfinite(centre) and math.isfinite(half_width)):
        raise ValueError(f"non-finite estimate {centre!r} +/- {half_width!r}")
    return [max(0.0, centre - half_width), centre + half_width]
