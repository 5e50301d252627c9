"""Snapshots and inventories for the controller's tests, built as the collector spec says."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import numpy as np


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


#: The plan a simulated collector follows (the controller does not compare it with its own).
SIMULATED_PLAN = {"version": 1, "plan_id": "simulated"}


def snapshot_doc(
    time: datetime,
    traffic: dict[str, dict[str, float]],
    servers: list[str] | None = None,
    counters: dict[str, float] | None = None,
    window_s: float = 30.0,
    collector: str = "c1",
    relative_ci: float = 0.05,
    rows: dict[str, dict[str, Any]] | None = None,
    matrix: dict[str, dict[str, float]] | None = None,
    plan: dict[str, Any] | None = SIMULATED_PLAN,
    serial: int | None = None,
    started: datetime | None = None,
) -> dict[str, Any]:
    """A ``cosample.snapshot`` document whose per-server totals are the matrix's rows, written
    by the collector's own model (columnar, version 2). ``rows`` overrides fields of a server's
    estimate; ``matrix`` replaces the traffic matrix written (default: ``traffic``'s rows of
    the listed servers); ``plan`` is the plan the collector renormalised with (None: a
    plan-less snapshot, made before any plan was in force); ``serial``: the collector's
    export number (with ``started``, default ``time``: what a signed snapshot must carry)."""
    from cosample.collector.snapshot import Snapshot
    from cosample.collector.snapshottables import ServerEstimate

    names = (
        servers
        if servers is not None
        else sorted(set(traffic) | {d for row in traffic.values() for d in row})
    )
    out: dict[str, Any] = {}
    for name in names:
        pps = float(sum(traffic.get(name, {}).values()))
        entry = {
            "packets_per_s": pps,
            "packets_per_s_ci95": [pps * (1 - relative_ci), pps * (1 + relative_ci)],
            "bytes_per_s": pps * 1000,
            "bytes_per_s_ci95": [pps * 900, pps * 1100],
            "samples": 100,
            "samples_per_s": 100 / window_s,
            "local_samples": 100,
            "mirrored_samples": 0,
            "coverage": 0.5,
        }
        if counters and name in counters:
            entry["interfaces"] = {
                "7": {"in_pps": counters[name] * 0.25, "out_pps": 1.0},
                "8": {"in_pps": counters[name] * 0.75, "out_pps": 2.0},
            }
        entry.update((rows or {}).get(name, {}))
        out[name] = ServerEstimate.model_validate(entry)
    if matrix is None:
        matrix = {
            src: {dst: float(v) for dst, v in row.items()}
            for src, row in traffic.items()
            if src in names
        }
    sequence = {} if serial is None else {"serial": serial, "started": started or time}
    snapshot = Snapshot.from_servers(
        out,
        collector=collector,
        time=time,
        window_s=window_s,
        plan=plan,
        traffic_pps=matrix,
        **sequence,
    )
    return json.loads(snapshot.to_json())


def inventory_doc(
    capacities: list[float], alpha: float = 1.54, beta: float = 0.46, tunnels: bool = True
) -> dict[str, Any]:
    servers = []
    for k, capacity in enumerate(capacities, start=1):
        server: dict[str, Any] = {"name": f"s{k}", "capacity_pps": capacity}
        if tunnels:
            server.update(bridge=f"br{k}", tunnel_ip=f"192.0.2.{k}", vm_ports=[f"vm{k}a"])
        servers.append(server)
    return {
        "format": "cosample.inventory",
        "format_version": 1,
        "name": "test",
        "cost": {"alpha": alpha, "beta": beta},
        "servers": servers,
        "sflow": {"collector": "192.0.2.100:6343"},
    }


def noisy(
    traffic: dict[str, dict[str, float]], rng: np.random.Generator, noise: float
) -> dict[str, dict[str, float]]:
    """Each entry times an independent uniform factor in [1 - noise, 1 + noise]."""
    return {
        src: {dst: v * (1 + rng.uniform(-noise, noise)) for dst, v in row.items()}
        for src, row in traffic.items()
    }
