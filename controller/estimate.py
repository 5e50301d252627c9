"""From collector snapshots to one traffic matrix in inventory order (pure).

Two sources measure what a server's VMs send: the collector's estimate from samples
(``servers.<s>.packets_per_s``, renormalised with the plan's shares, corrected for lost
datagrams) and, when OVS polls interface counters, the rates of the VM ports' packet counters
(``servers.<s>.interfaces``, ``in_pps`` being what the bridge received from the VMs).
**Samples win; counters are the cross-check, and fill in where there are no samples.** The
counters themselves are exact, but the rates derived from them are not: sFlow counter records
carry no time of their own, so a rate is the difference of two polls over the time between
their datagrams, and on the testbed (polling every 2 s, a loaded 2-core machine) the rates of a
server offering a steady 2,400 pps ranged from 1,577 to 4,525 pps between consecutive 5-s
cycles, while the sampled estimate stayed within 2,040-2,330 pps. Samples also carry the
traffic matrix (who sends to whom), which counters cannot. A server whose counter rate falls
outside its sampled 95 % interval is reported (lost datagrams, a plan the collector renormalised
with but the agents had not applied yet, a wrong inventory, or counter jitter); a server with
counters and no samples at all is taken from its counters, as traffic that stays on the server.
A server listed with coverage 0 and no counters is not measured: no sampling reaches the
collector from it (a plan-less collector lists agents it has not heard yet that way), so its
0 pps says nothing.
The sampled row ``V[s][*]`` is scaled to the server's total; traffic whose destination is not a
server of the inventory (leaving the data centre) stays on the diagonal: it costs the source
and no other server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    measured: np.ndarray  # bool per server: present in a snapshot
    own_pps: np.ndarray  # what each server's VMs send (0 where not measured)
    from_counters: np.ndarray  # bool per server: no samples, own_pps from interface counters
    traffic_src: np.ndarray
    traffic_dst: np.ndarray
    traffic_pps: np.ndarray
    disagreements: tuple[Disagreement, ...] = ()


def measure(snapshot: Any, inventory: Inventory, source: str = "snapshot") -> Measurement:
    """The merged snapshot as arrays; a ``SnapshotError`` if it names servers we do not know.

    The snapshot is columnar (``cosample.snapshot`` version 2), so this is array work: one
    dictionary look-up per name, none per matrix entry."""
    n = inventory.size
    table = snapshot.servers
    positions = _positions(inventory, table.name, lambda k: f"{source}: servers.name[{k}]")
    measured = np.zeros(n, dtype=bool)
    measured[positions] = table.column("coverage") > 0  # else nobody samples it (yet)
    sampled = np.zeros(n)
    sampled[positions] = table.column("packets_per_s")
    counted = np.full(n, np.nan)
    disagreements: list[Disagreement] = []
    ports = snapshot.interfaces
    if ports is not None and len(ports.server):
        rows = np.asarray(ports.server, dtype=np.int64)
        polled = np.bincount(rows, minlength=len(table.name)) > 0
        total = np.bincount(
            rows, weights=np.asarray(ports.in_pps, dtype=float), minlength=len(table.name)
        )
        counted[positions[polled]] = total[polled]
        measured[positions[polled]] = True
        low, high = table.column("packets_per_s_ci95_low"), table.column("packets_per_s_ci95_high")
        for k in np.flatnonzero(polled & ((total < low) | (total > high))).tolist():
            i = positions[k]
            disagreements.append(
                Disagreement(
                    table.name[k],
                    float(counted[i]),
                    float(sampled[i]),
                    (float(low[k]), float(high[k])),
                )
            )
    src, dst, pps = _matrix(snapshot.traffic_pps, inventory, source)
    from_counters = ~np.isnan(counted) & (sampled <= 0)
    own = np.where(from_counters, counted, sampled)
    src, dst, pps = _fit_rows(src, dst, pps, own, sampled, measured, n)
    return Measurement(
        _utc(snapshot.time),
        float(snapshot.window_s),
        measured,
        own,
        from_counters,
        src,
        dst,
        pps,
        tuple(disagreements),
    )


def _matrix(
    traffic: Any, inventory: Inventory, source: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The snapshot's matrix entries in inventory positions (none without a matrix)."""
    if traffic is None or not len(traffic.pps):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    src = np.asarray(traffic.src, dtype=np.int64)
    dst = np.asarray(traffic.dst, dtype=np.int64)
    if not _in_order(traffic.names, inventory):  # else positions are the indices themselves
        mapped = _positions(inventory, traffic.names, lambda k: f"{source}: traffic_pps.names[{k}]")
        src, dst = mapped[src], mapped[dst]
    pps = np.asarray(traffic.pps, dtype=float)
    keep = pps > 0
    if keep.all():
        return src, dst, pps
    return src[keep], dst[keep], pps[keep]


def _in_order(names: Sequence[str], inventory: Inventory) -> bool:
    """Whether ``names`` are the inventory's, in its order (a collector that knows the whole
    fleet lists it so): one comparison of the lists instead of a look-up per name."""
    return len(names) == inventory.size and tuple(names) == inventory.names


def _positions(inventory: Inventory, names: Sequence[str], at: Callable[[int], str]) -> np.ndarray:
    """Inventory positions of ``names``; an error at ``at(k)`` for the first unknown one."""
    if _in_order(names, inventory):
        return np.arange(len(names), dtype=np.int64)
    index = inventory.index
    try:
        return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names))
    except KeyError:
        k = next(k for k, name in enumerate(names) if name not in index)
        raise SnapshotError(
            f"{at(k)}: server {names[k]!r} is not in the inventory; the "
            f"collector and the controller disagree on the fleet (nothing "
            f"published)"
        ) from None


def _fit_rows(
    src: np.ndarray,
    dst: np.ndarray,
    pps: np.ndarray,
    own: np.ndarray,
    sampled: np.ndarray,
    measured: np.ndarray,
    n: int,
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
    mapped = src.size
    src = np.concatenate((src, local))
    dst = np.concatenate((dst, local))
    pps = np.concatenate((pps, rest[local]))
    return _combine(src, dst, pps, n, sorted_up_to=mapped)


def _combine(
    src: np.ndarray, dst: np.ndarray, pps: np.ndarray, n: int, sorted_up_to: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum duplicate (src, dst) entries; sorted by src * n + dst. When the first
    ``sorted_up_to`` entries are already strictly sorted (a collector writes its matrix so),
    the rest are merged into them by binary search instead of sorting everything again."""
    keys = src.astype(np.int64) * n + dst
    head = keys[:sorted_up_to]
    if sorted_up_to and bool(np.all(head[1:] > head[:-1])):
        tail = keys[sorted_up_to:]
        if tail.size == 0 or bool(np.all(tail[1:] > tail[:-1])):
            total = pps[:sorted_up_to].copy()
            at = np.searchsorted(head, tail)
            found = at < head.size
            found[found] = head[at[found]] == tail[found]
            total[at[found]] += pps[sorted_up_to:][found]  # distinct places: tail is unique
            new = ~found
            unique = np.insert(head, at[new], tail[new])
            total = np.insert(total, at[new], pps[sorted_up_to:][new])
            return unique // n, unique % n, total
    unique, inverse = np.unique(keys, return_inverse=True)
    total = np.bincount(inverse, weights=pps, minlength=unique.size)
    return unique // n, unique % n, total


def _utc(moment: Any) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)
