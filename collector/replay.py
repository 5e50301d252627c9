"""``collector replay``: the daemon's estimator driven by a capture, with time from the capture."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from cosample.collector.errors import CollectorError
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory
from cosample.collector.pcap import Capture, udp_payloads
from cosample.collector.planwatch import load_for_replay
from cosample.collector.reexport import Reexporter
from cosample.collector.snapshot import Snapshot


def replay(plan: str, capture: str | Path, *, inventory: Inventory | None = None,
           name: str = "replay", window_s: float | None = None,
           reexport: tuple[str, int] | None = None) -> Snapshot:
    """Feed every UDP datagram of ``capture`` to an ``Estimator``; the snapshot at its end."""
    source = Capture(Path(capture))
    datagrams = udp_payloads(capture, source)
    first = next(datagrams, None)
    if first is None:
        raise CollectorError(f"{capture}: no UDP datagrams in the capture")
    attribution = load_for_replay(plan, inventory, datetime.fromtimestamp(first[0], timezone.utc))
    estimator = Estimator(attribution, window_s=window_s, name=name)
    exporter = None
    if reexport is not None:
        exporter = Reexporter(reexport, attribution, clock_ms=lambda: 0)
        estimator.on_sample = exporter
    last = first[0]
    try:
        estimator.ingest(first[1], first[0])
        for when, payload in datagrams:
            estimator.ingest(payload, when)
            last = max(last, when)
            if exporter is not None:
                exporter.flush()
    finally:
        if exporter is not None:
            exporter.close()
    return estimator.snapshot(last)


def table(snapshot: Snapshot) -> str:
    """A plain table: one line per server, then drops."""
    lines = [f"{'server':<12} {'packets/s':>12} {'95 % interval':>25} {'bytes/s':>12} "
             f"{'samples':>8} {'local':>7} {'mirrored':>8} {'coverage':>8}"]
    for server, e in snapshot.servers.items():
        low, high = e.packets_per_s_ci95
        lines.append(f"{server:<12} {e.packets_per_s:>12.1f} {f'[{low:.1f}, {high:.1f}]':>25} "
                     f"{e.bytes_per_s:>12.1f} {e.samples:>8} {e.local_samples:>7} "
                     f"{e.mirrored_samples:>8} {e.coverage:>8.3f}")
    lines.append(f"window {snapshot.window_s:.1f} s; plan "
                 f"{snapshot.plan.version if snapshot.plan else 'none'}")
    for title, counts in (("dropped", snapshot.dropped), ("ignored", snapshot.ignored)):
        if counts:
            lines.append(f"{title}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return "\n".join(lines) + "\n"
