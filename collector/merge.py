"""Merging the snapshots of several collector instances, each receiving its own agents' datagrams.

The controller reads every instance's ``/snapshot`` and merges them here (``cosample collector
merge`` does the same from files). Each estimate is a sum over samples, so parts add.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from cosample.collector.combine import MAX_COUNT
from cosample.collector.errors import CollectorError
from cosample.collector.snapshot import Snapshot
from cosample.collector.snapshottables import ServerEstimate, TrafficTable
from cosample.intervals import normal_interval, packets_interval


def merge_snapshots(snapshots: Iterable[Snapshot], name: str | None = None) -> Snapshot:
    """One snapshot from several instances, each receiving the datagrams of its own agents.

    Each estimate is a sum over samples, so partial estimates add: a server known to several
    instances (its local samples reach one, its mirrored copies another) gets the sum of their
    rates and variances, its interval recomputed (this needs the ``*_variance`` fields); an agent
    heard by two instances is an error (its samples would count twice). ``traffic_pps``,
    ``dropped``, ``ignored``, ``sequence`` and ``unknown_agents`` add up; ``guard`` is the union. The merge is as fresh as its stalest part (``time`` is
    the earliest) and ``window_s`` the shortest; ``plan`` is the newest when parts disagree (a
    plan change reaches the collectors at different times). Servers come out sorted by name.
    """
    parts = list(snapshots)
    if not parts:
        raise CollectorError("merge: no snapshots to merge")
    heard: dict[str, int] = {}
    for number, part in enumerate(parts):
        for agent in part.agents:
            if heard.setdefault(agent, number) != number:
                raise CollectorError(
                    f"merge: agent {agent} is heard by both "
                    f"{parts[heard[agent]].collector!r} and {part.collector!r}; "
                    "each agent must report to one collector"
                )
    owners: dict[str, list[tuple[str, ServerEstimate]]] = {}
    for part in parts:
        for server, estimate in part.estimates().items():
            owners.setdefault(server, []).append((part.collector, estimate))
    servers = {server: _add(server, found) for server, found in sorted(owners.items())}
    tables = [part.traffic_pps for part in parts if part.traffic_pps is not None]
    plans = [part.plan for part in parts if part.plan is not None]
    return Snapshot.from_servers(
        servers,
        collector=name or "+".join(sorted(part.collector for part in parts)),
        time=min(part.time for part in parts),
        window_s=min(part.window_s for part in parts),
        plan=max(plans, key=lambda plan: plan.version) if plans else None,
        traffic_pps=_add_traffic(tables) if tables else None,
        dropped=_add_counts(part.dropped for part in parts),
        ignored=_add_counts(part.ignored for part in parts),
        agents=sorted(heard),
        unknown_agents=dict(list(_add_counts(part.unknown_agents for part in parts).items())[:32]),
        sequence=_add_counts(part.sequence for part in parts),
        discards={
            server: _add_counts(part.discards.get(server, {}) for part in parts)
            for server in sorted({s for part in parts for s in part.discards})
        },
        guard=_guarded(parts),
    )


def _guarded(parts: list[Snapshot]) -> dict:
    """Every part's guarded hosts (a host's reports reach one instance; should two know it,
    the later report wins)."""
    out: dict = {}
    for part in parts:
        for server, entry in part.guard.items():
            if server not in out or entry.since > out[server].since:
                out[server] = entry
    return dict(sorted(out.items()))


def _add_traffic(tables: list[TrafficTable]) -> TrafficTable:
    """The sum of several matrices (entries of the same pair add), as arrays."""
    names = sorted({name for table in tables for name in table.names})
    index = {name: k for k, name in enumerate(names)}
    src, dst, pps = [], [], []
    for table in tables:
        mapped = np.fromiter(
            (index[name] for name in table.names), dtype=np.int64, count=len(table.names)
        )
        src.append(mapped[np.asarray(table.src, dtype=np.int64)])
        dst.append(mapped[np.asarray(table.dst, dtype=np.int64)])
        pps.append(np.asarray(table.pps, dtype=float))
    keys = np.concatenate(src) * max(len(names), 1) + np.concatenate(dst)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], np.concatenate(pps)[order]
    starts = (
        np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        if keys.size
        else np.zeros(0, dtype=np.int64)
    )
    total = np.add.reduceat(values, starts) if keys.size else values
    unique = keys[starts]
    return TrafficTable.model_construct(
        names=names,
        src=(unique // max(len(names), 1)).tolist(),
        dst=(unique % max(len(names), 1)).tolist(),
        pps=total.tolist(),
    )


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
    parts = [estimate for _, estimate in found]
    packet_variances = [v for p in parts if (v := p.packets_per_s_variance) is not None]
    octet_variances = [v for p in parts if (v := p.bytes_per_s_variance) is not None]
    if len(packet_variances) < len(parts) or len(octet_variances) < len(parts):
        raise CollectorError(
            f"merge: server {server!r} is in the snapshots of "
            f"{', '.join(repr(c) for c, _ in found)} without the variances "
            "needed to add its estimates"
        )
    packets = math.fsum(p.packets_per_s for p in parts)
    variance = math.fsum(packet_variances)
    octets = math.fsum(p.bytes_per_s for p in parts)
    octet_variance = math.fsum(octet_variances)
    low, high = packets_interval(packets, variance)
    if packets == 0.0:
        high = math.fsum(p.packets_per_s_ci95[1] for p in parts)
    interfaces = {k: v for p in parts for k, v in (p.interfaces or {}).items()} or None
    lasts = [p.last_sample for p in parts if p.last_sample is not None]
    local = min(sum(p.local_samples for p in parts), MAX_COUNT)  # saturated as one instance's
    mirrored = min(sum(p.mirrored_samples for p in parts), MAX_COUNT)
    return ServerEstimate(
        packets_per_s=packets,
        packets_per_s_ci95=[low, high],
        bytes_per_s=octets,
        bytes_per_s_ci95=normal_interval(octets, octet_variance),
        samples=local + mirrored,
        samples_per_s=math.fsum(p.samples_per_s for p in parts),
        local_samples=local,
        mirrored_samples=mirrored,
        coverage=max(p.coverage for p in parts),
        last_sample=max(lasts) if lasts else None,
        interfaces=interfaces,
        packets_per_s_variance=variance,
        bytes_per_s_variance=octet_variance,
    )
