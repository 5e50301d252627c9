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
    """One snapshot from several instances that own disjoint sets of servers.

    ``servers`` are united (a server in two snapshots is an error: two collectors claim its
    agent); ``traffic_pps`` entries and ``dropped`` counts add up. The merge is as fresh as its
    stalest part (``time`` is the earliest) and ``window_s`` the shortest. ``plan`` is the plan
    all parts used; when they differ (a plan change reached the collectors at different times)
    the newest is reported.
    """
    parts = list(snapshots)
    if not parts:
        raise CollectorError("merge: no snapshots to merge")
    servers: dict[str, ServerEstimate] = {}
    owner: dict[str, str] = {}
    for part in parts:
        for server, estimate in part.servers.items():
            if server in servers:
                raise CollectorError(f"merge: server {server!r} is in the snapshots of both "
                                     f"{owner[server]!r} and {part.collector!r}; each agent "
                                     "must report to one collector")
            servers[server], owner[server] = estimate, part.collector
    matrices = [part.traffic_pps for part in parts if part.traffic_pps is not None]
    traffic: dict[str, dict[str, float]] | None = None
    if matrices:
        traffic = {}
        for matrix in matrices:
            for src, row in matrix.items():
                out = traffic.setdefault(src, {})
                for dst, pps in row.items():
                    out[dst] = out.get(dst, 0.0) + pps
    dropped: dict[str, int] = {}
    for part in parts:
        for reason, count in part.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    plans = [part.plan for part in parts if part.plan is not None]
    return Snapshot(
        collector=name or "+".join(sorted(part.collector for part in parts)),
        time=min(part.time for part in parts),
        window_s=min(part.window_s for part in parts),
        plan=max(plans, key=lambda plan: plan.version) if plans else None,
        servers=dict(sorted(servers.items())),
        traffic_pps=traffic,
        dropped=dict(sorted(dropped.items())))


def interval(centre: float, half_width: float) -> list[float]:
    """``[max(0, centre - h), centre + h]``: rates are never negative."""
    if not (math.isfinite(centre) and math.isfinite(half_width)):
        raise ValueError(f"non-finite estimate {centre!r} +/- {half_width!r}")
    return [max(0.0, centre - half_width), centre + half_width]
