"""What the controller tells operators: ``status.json`` and Prometheus metrics, every cycle."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from cosample import __version__
from cosample.collector.snapshot import SNAPSHOT_VERSION
from cosample.files import write_bytes_atomic
from cosample.plan.formats import FORMAT_VERSION

STATUS_FILE, METRICS_FILE = "status.json", "metrics.prom"
#: Lists in the status (servers over the limit, disagreements) are cut to this many entries.
LIST_LIMIT = 20


@dataclass(frozen=True)
class CycleStatus:
    """One cycle: what was measured, decided and published, and what is wrong."""

    time: str
    result: str  # published | kept | stale | error
    reasons: tuple[str, ...] = ()
    plan_version: int | None = None
    plan_id: str | None = None
    plan_expires: str | None = None
    #: the plan in force: "measurement" (1-in-N everywhere, no mirrors: nothing measured yet)
    #: or "planned" (from measured traffic); None: no plan
    plan_kind: str | None = None
    published_versions: tuple[int, ...] = ()
    two_phase: bool = False
    snapshot_time: str | None = None
    snapshot_age_s: float | None = None
    collectors_up: int = 0
    collectors: int = 0
    problems: tuple[str, ...] = ()
    gain: float | None = None
    gain_streak: int = 0
    predicted_max_use: float | None = None
    #: host names (``HostNames``: looked up when read; the status shows ``LIST_LIMIT``)
    over_limit: Sequence[str] = ()
    unrelievable: Sequence[str] = ()
    unmeasured: int = 0
    rising: Sequence[str] = ()  # no budget: traffic rising by a step within one window
    settling: Sequence[str] = ()  # rose or fell by a step within one window: gains wait
    quiet: bool = False  # within one window of our publication: gains wait
    counter_servers: int = 0
    disagreements: tuple[dict[str, Any], ...] = ()
    #: estimates not taken as evidence (``plausibility``): above capacity, or a jump unconfirmed
    refused: tuple[dict[str, Any], ...] = ()
    #: the application part (``apploop``): services, rates, both plans' mechanisms
    applications: dict[str, Any] | None = None
    cycle_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    #: hosts planned below their inventory capacity because their guard backed off
    #: (``guarded``): server, capacity_pps, inventory_pps, until
    derated: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values, long lists cut first (``asdict`` deep-copied every
        entry: 0.4 s for the 40,000 servers over the limit of a 10^5-server benchmark fleet)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in (
            "over_limit",
            "unrelievable",
            "disagreements",
            "problems",
            "rising",
            "settling",
            "refused",
        ):
            out[key] = [
                dict(item) if isinstance(item, dict) else item for item in out[key][:LIST_LIMIT]
            ]
        out["reasons"] = list(out["reasons"])
        out["published_versions"] = list(out["published_versions"])
        out["timings"] = dict(out["timings"])
        return out


def operator_problems(status: CycleStatus) -> tuple[str, ...]:
    """What an operator must act on after a cycle: its problems (collectors unreadable, stale
    or refused, estimates refused, analysers silent, the error a failed cycle met; the first
    ``LIST_LIMIT``), and no fresh snapshot at all while a plan is in force (it will expire
    unrefreshed)."""
    problems = tuple(status.problems[:LIST_LIMIT])  # a fleet's worth: the status has them
    if len(status.problems) > LIST_LIMIT:
        problems += (f"{len(status.problems) - LIST_LIMIT} more problem(s): see the status",)
    if status.result == "stale" and status.plan_version is not None:
        problems += (
            f"no fresh snapshot from any collector: nothing is re-planned, and the plan in force "
            f"(version {status.plan_version}) is not refreshed: it expires at "
            f"{status.plan_expires}, then the agents go to their safe state",
        )
    return problems


class Metrics:
    """The controller's metrics in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.cycles = Counter(
            "cosample_controller_cycles", "Controller cycles by result", ["result"], registry=r
        )
        Gauge(
            "cosample_controller_build_info",
            "1, labelled with the cosample version, the "
            "plan format version it writes and the snapshot format versions it reads",
            ["version", "plan_format_written", "snapshot_formats_read"],
            registry=r,
        ).labels(__version__, str(FORMAT_VERSION), str(SNAPSHOT_VERSION)).set(1)
        self.publications = Counter(
            "cosample_controller_publications",
            "Plans published, by first reason",
            ["reason"],
            registry=r,
        )
        self.errors = Counter(
            "cosample_controller_errors", "Cycle failures by kind", ["kind"], registry=r
        )
        self.plan_version = Gauge(
            "cosample_controller_plan_version",
            "Version of the plan in force (-1: none)",
            registry=r,
        )
        self.plan_expires = Gauge(
            "cosample_controller_plan_expires_timestamp_seconds",
            "Expiry of the plan in force",
            registry=r,
        )
        self.collectors_up = Gauge(
            "cosample_controller_collectors_up",
            "Collectors whose snapshot was fresh and valid",
            registry=r,
        )
        self.collectors = Gauge(
            "cosample_controller_collectors",
            "Collectors the controller is configured to read",
            registry=r,
        )
        self.stale = Gauge(
            "cosample_controller_snapshot_stale",
            "1 when no fresh snapshot was read this cycle",
            registry=r,
        )
        self.age = Gauge(
            "cosample_controller_snapshot_age_seconds", "Age of the merged snapshot", registry=r
        )
        self.max_use = Gauge(
            "cosample_controller_predicted_max_capacity_use_ratio",
            "Highest load/capacity predicted for the plan in force",
            registry=r,
        )
        self.over = Gauge(
            "cosample_controller_servers_over_limit",
            "Servers predicted above capacity x (1 - margin)",
            registry=r,
        )
        self.unrelievable = Gauge(
            "cosample_controller_servers_unrelievable",
            "Servers over the limit that no plan can help",
            registry=r,
        )
        self.gain = Gauge(
            "cosample_controller_candidate_gain_ratio",
            "Relative distinct-packet gain of the candidate over the plan in force",
            registry=r,
        )
        self.disagreements = Gauge(
            "cosample_controller_servers_disagreeing",
            "Servers whose counters fall outside the sampled 95 % interval",
            registry=r,
        )
        self.unmeasured = Gauge(
            "cosample_controller_servers_unmeasured", "Servers never seen in a snapshot", registry=r
        )
        self.refused = Gauge(
            "cosample_controller_estimates_refused",
            "Servers whose estimate was not taken as evidence this cycle, by "
            "reason (above_capacity, unconfirmed_jump)",
            ["reason"],
            registry=r,
        )
        self.refusals = Counter(
            "cosample_controller_estimate_refusals",
            "Estimates refused as evidence, by reason",
            ["reason"],
            registry=r,
        )
        self.cycle_seconds = Gauge(
            "cosample_controller_cycle_seconds", "Duration of the last cycle", registry=r
        )
        self.plan_version.set(-1)

    def record(self, status: CycleStatus, now_s: float) -> None:
        self.cycles.labels(result=status.result).inc()
        if status.result == "published":
            first = status.reasons[0].split(":", 1)[0] if status.reasons else "unknown"
            self.publications.labels(reason=first).inc()
        if status.plan_version is not None:
            self.plan_version.set(status.plan_version)
        self.collectors_up.set(status.collectors_up)
        self.collectors.set(status.collectors)
        self.stale.set(1 if status.result == "stale" else 0)
        if status.snapshot_age_s is not None:
            self.age.set(status.snapshot_age_s)
        if status.predicted_max_use is not None:
            self.max_use.set(status.predicted_max_use)
        self.over.set(len(status.over_limit))
        self.unrelievable.set(len(status.unrelievable))
        if status.gain is not None:
            self.gain.set(min(status.gain, 1e9))
        self.disagreements.set(len(status.disagreements))
        self.unmeasured.set(status.unmeasured)
        for reason in ("above_capacity", "unconfirmed_jump"):
            count = sum(1 for r in status.refused if r["reason"] == reason)
            self.refused.labels(reason=reason).set(count)
            if count:
                self.refusals.labels(reason=reason).inc(count)
        self.cycle_seconds.set(status.cycle_seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def write_reports(directory: Path, status: CycleStatus, metrics: Metrics) -> None:
    """``status.json`` and ``metrics.prom`` (textfile-collector format), atomically, 0600."""
    text = json.dumps(status.as_dict(), indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(directory / STATUS_FILE, text.encode(), mode=0o600)
    write_bytes_atomic(directory / METRICS_FILE, metrics.exposition(), mode=0o600)
