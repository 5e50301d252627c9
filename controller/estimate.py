"""From collector snapshots to one traffic matrix in inventory order (pure).

Two sources measure what a server's VMs send: the collector's estimate from samples
(``servers.<s>.packets_per_s``, renormalised with the plan's shares) and, when OVS polls
interface counters, the exact packet counters of the VM ports (``servers.<s>.interfaces``,
``in_pps`` being what the bridge received from the VMs). **Counters win for each server's
total**: they count every packet, so they carry neither sampling variance nor the bias of
renormalising with a plan the agents have not applied yet, nor the loss of sFlow datagrams
(which only ever lowers the sampled estimate, the unsafe direction for capacity). Samples are
the only source of *where* the traffic goes, so the server's sampled row ``V[s][*]`` is scaled to
the counted total. Traffic whose destination is not a server of the inventory (leaving the data
centre) stays on the diagonal: it costs the source and no other server. Disagreements beyond the
estimate's 95 % interval are reported, because they mean lost datagrams, a stale plan or a wrong
inventory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from cosample.controller.errors import SnapshotError
from cosample.controller.inventory import Inventory


@dataclass(frozen=True)
class Disagreement:
    """A server whose exact counters fall outside its sampled estimate's 95 % interval."""

    server: str
    counters_pps: float
    sampled_pps: float
    ci95: tuple[float, float]


@dataclass(frozen=True)
class Measurement:
    """One cycle's traffic, indexed like the inventory."""

    time: datetime
    window_s: float
    measured: np.ndarray        # bool per server: present in a snapshot
    own_pps: np.ndarray         # what each server's VMs send (0 where not measured)
    from_counters: np.ndarray   # bool per server: own_pps came from interface counters
    traffic_src: np.ndarray
    traffic_dst: np.ndarray
    traffic_pps: np.ndarray
    disagreements: tuple[Disagreement, ...] = ()


def measure(snapshot: Any, inventory: Inventory, source: str = "snapshot") -> Measurement:
    """The merged snapshot as arrays; a ``SnapshotError`` if it names servers we do not know."""
    n = inventory.size
    index = inventory.index
    measured = np.zeros(n, dtype=bool)
    sampled = np.zeros(n)
    counted = np.full(n, np.nan)
    disagreements = []
    for name, server in snapshot.servers.items():
        i = _position(index, name, f"{source}: servers.{name}")
        measured[i] = True
        sampled[i] = server.packets_per_s
        interfaces = getattr(server, "interfaces", None)
        if interfaces:
            counted[i] = sum(_in_pps(rates) for rates in interfaces.values())
            low, high = server.packets_per_s_ci95
            if not low <= counted[i] <= high:
                disagreements.append(Disagreement(name, float(counted[i]), float(sampled[i]),
                                                  (float(low), float(high))))
    src, dst, pps = _matrix(snapshot.traffic_pps or {}, index, source)
    from_counters = ~np.isnan(counted)
    own = np.where(from_counters, counted, sampled)
    src, dst, pps = _fit_rows(src, dst, pps, own, sampled, measured, n)
    return Measurement(_utc(snapshot.time), float(snapshot.window_s), measured, own,
                       from_counters, src, dst, pps, tuple(disagreements))


def _matrix(traffic: Mapping[str, Mapping[str, float]], index: Mapping[str, int],
            source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src: list[int] = []
    dst: list[int] = []
    pps: list[float] = []
    try:
        for source_name, row in traffic.items():
            src.extend([index[source_name]] * len(row))
            dst.extend([index[name] for name in row])
            pps.extend(row.values())
    except KeyError:
        for source_name, row in traffic.items():  # find the name, for the message
            _position(index, source_name, f"{source}: traffic_pps.{source_name}")
            for dest_name in row:
                _position(index, dest_name, f"{source}: traffic_pps.{source_name}.{dest_name}")
        raise
    values = np.asarray(pps, dtype=float)
    keep = values > 0
    return (np.asarray(src, dtype=np.int64)[keep], np.asarray(dst, dtype=np.int64)[keep],
            values[keep])


def _fit_rows(src: np.ndarray, dst: np.ndarray, pps: np.ndarray, own: np.ndarray,
              sampled: np.ndarray, measured: np.ndarray, n: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale each row to its server's total; the rest of the total stays on the diagonal."""
    keep = measured[src]
    src, dst, pps = src[keep], dst[keep], pps[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(sampled > 0, own / sampled, 1.0)
    pps = pps * scale[src]
    row = np.bincount(src, weights=pps, minlength=n)
    over = row > own
    if over.any():  # the mapped rows exceed the total (counters below the sample count)
        with np.errstate(divide="ignore", invalid="ignore"):
            shrink = np.where(over & (row > 0), own / row, 1.0)
        pps = pps * shrink[src]
        row = np.bincount(src, weights=pps, minlength=n)
    rest = np.where(measured, np.maximum(own - row, 0.0), 0.0)
    local = np.flatnonzero(rest > 0)
    src = np.concatenate((src, local))
    dst = np.concatenate((dst, local))
    pps = np.concatenate((pps, rest[local]))
    return _combine(src, dst, pps, n)


def _combine(src: np.ndarray, dst: np.ndarray, pps: np.ndarray, n: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum duplicate (src, dst) entries; sorted by src * n + dst."""
    keys = src.astype(np.int64) * n + dst
    unique, inverse = np.unique(keys, return_inverse=True)
    total = np.bincount(inverse, weights=pps, minlength=unique.size)
    return unique // n, unique % n, total


def _position(index: Mapping[str, int], name: str, at: str) -> int:
    try:
        return index[name]
    except KeyError:
        raise SnapshotError(f"{at}: server {name!r} is not in the inventory; the collector and "
                            f"the controller disagree on the fleet (nothing published)") from None


def _in_pps(rates: Any) -> float:
    return float(rates["in_pps"] if isinstance(rates, Mapping) else rates.in_pps)


def _utc(moment: Any) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)

