"""``collector replay``: the daemon's estimator driven by a capture, with time from the capture.

Without a plan, every agent heard in the capture is a server of its own (named by its address,
or by the inventory's name for its ``agent_ip``) sampling locally at the rate it reports, the
agents' safe state: a user can look at a capture of their own fleet before writing a plan, and
``heard`` lists what was heard (address, datagrams, samples, rates). The agents are listed from
the datagram headers before the estimate starts: a capture up to ``HOLD_BYTES`` is read once and
held in memory meanwhile, a larger one is read twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

from cosample.collector import attribution
from cosample.collector.decode import agents_of
from cosample.collector.errors import CollectorError
from cosample.collector.estimate import Estimator
from cosample.collector.pcap import Capture, udp_payloads
from cosample.collector.reexport import Reexporter

if TYPE_CHECKING:  # pydantic's models: replay without a plan or inventory writes its snapshot
    from cosample.collector.inventory import Inventory  # without them (snapshotwire)
    from cosample.collector.snapshot import Snapshot


#: Captures up to this size are read once, their datagrams held in memory while the agents are
#: listed (plan-less replay); larger ones are read twice (agents, then estimate).
HOLD_BYTES = 512 << 20


@dataclass
class Heard:
    """One agent as a capture holds it."""

    datagrams: int = 0
    flow_samples: int = 0
    counter_samples: int = 0
    discard_samples: int = 0
    rates: set[int] = field(default_factory=set)


class Survey(dict):
    """agent -> ``Heard``, filled by the estimator's ``on_datagram`` hook."""

    def __call__(self, agent: str, flows: tuple, counters: tuple, discards: tuple) -> None:
        entry = self.get(agent)
        if entry is None:
            entry = self[agent] = Heard()
        entry.datagrams += 1
        entry.flow_samples += len(flows)
        entry.counter_samples += len(counters)
        entry.discard_samples += len(discards)
        if flows:
            entry.rates.update(flow[2] for flow in flows)


def agents_in(capture: str | Path) -> list[str]:
    """The agent addresses of a capture's datagrams, in order of first appearance (headers
    only; datagrams that do not decode are left to the estimator's counters)."""
    return agents_of(map(itemgetter(1), udp_payloads(capture)))


def heard_attribution(heard, inventory: Inventory | None):
    """Plan-less attribution in which every agent heard is a server sampling locally at its own
    rate: named by the inventory when its ``agent_ip`` is there, else by its address."""
    if inventory is None:  # no model to validate: the addresses are the decoder's own
        return attribution.heard(heard)
    from cosample.collector.inventory import Inventory  # pydantic's models: only with one

    servers = {
        name: entry.model_dump(exclude_defaults=True) for name, entry in inventory.servers.items()
    }
    named = inventory.server_of_agent()
    for agent in heard:
        if agent not in named:
            servers.setdefault(agent, {})["agent_ip"] = agent
    return attribution.planless(Inventory.model_validate({"servers": servers}))


def replay(
    plan: str | None,
    capture: str | Path,
    *,
    inventory: Inventory | None = None,
    name: str = "replay",
    window_s: float | None = None,
    reexport: tuple[str, int] | None = None,
    source: Capture | None = None,
    heard: Survey | None = None,
) -> Snapshot:
    """Feed every UDP datagram of ``capture`` to an ``Estimator``; the snapshot at its end.

    ``plan`` None: every agent heard samples locally at the rate it reports (module docstring).
    ``source`` receives what the capture held besides datagrams (skipped frames, a cut end);
    ``heard``, every agent heard with its datagrams, samples and rates.
    """
    estimator, last = run(
        plan,
        capture,
        inventory=inventory,
        name=name,
        window_s=window_s,
        reexport=reexport,
        source=source,
        heard=heard,
    )
    return estimator.snapshot(last)


def run(
    plan: str | None,
    capture: str | Path,
    *,
    inventory: Inventory | None = None,
    name: str = "replay",
    window_s: float | None = None,
    reexport: tuple[str, int] | None = None,
    source: Capture | None = None,
    heard: Survey | None = None,
) -> tuple[Estimator, float]:
    """``replay``'s work: the estimator that took every datagram, and the newest datagram's
    time (where the snapshot is taken)."""
    source = source if source is not None else Capture(Path(capture))
    datagrams = udp_payloads(capture, source)
    first = next(datagrams, None)
    if first is None:
        raise CollectorError(f"{capture}: no UDP datagrams in the capture")
    if plan is None and Path(capture).stat().st_size <= HOLD_BYTES:  # read the capture once
        held = [first, *datagrams]
        datagrams = iter(held)
        next(datagrams)
        table = heard_attribution(agents_of(map(itemgetter(1), held)), inventory)
    elif plan is None:
        table = heard_attribution(agents_in(capture), inventory)
    else:
        from cosample.collector.planwatch import load_for_replay  # the plan reader: only here

        table = load_for_replay(plan, inventory, datetime.fromtimestamp(first[0], timezone.utc))
    estimator = Estimator(table, window_s=window_s, name=name)
    estimator.on_datagram = heard
    exporter = None
    if reexport is not None:
        exporter = Reexporter(reexport, table, clock_ms=lambda: 0)
        estimator.on_sample = exporter
    last, ingest = first[0], estimator.ingest
    try:
        ingest(first[1], first[0])
        for when, payload in datagrams:
            ingest(payload, when)
            if when > last:
                last = when
            if exporter is not None:
                exporter.flush()
    finally:
        if exporter is not None:
            exporter.close()
    return estimator, last


def table(snapshot: Snapshot) -> str:
    """A plain table: one line per server, then drops."""
    lines = [
        f"{'server':<12} {'packets/s':>12} {'95 % interval':>25} {'bytes/s':>12} "
        f"{'samples':>8} {'local':>7} {'mirrored':>8} {'coverage':>8}"
    ]
    for server, e in snapshot.servers.items():
        low, high = e.packets_per_s_ci95
        lines.append(
            f"{server:<12} {e.packets_per_s:>12.1f} {f'[{low:.1f}, {high:.1f}]':>25} "
            f"{e.bytes_per_s:>12.1f} {e.samples:>8} {e.local_samples:>7} "
            f"{e.mirrored_samples:>8} {e.coverage:>8.3f}"
        )
    lines.append(
        f"window {snapshot.window_s:.1f} s; plan "
        f"{snapshot.plan.version if snapshot.plan else 'none'}"
    )
    for title, counts in (("dropped", snapshot.dropped), ("ignored", snapshot.ignored)):
        if counts:
            lines.append(f"{title}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return "\n".join(lines) + "\n"


def heard_table(heard: dict[str, Heard]) -> str:
    """The agents a capture holds: what to put in a plan or an inventory."""
    lines = [
        f"{'agent':<40} {'datagrams':>9} {'flow samples':>12} {'counter samples':>15} "
        f"{'discards':>8} rates (1-in-N)"
    ]
    for agent, entry in sorted(heard.items()):
        rates = ", ".join(str(rate) for rate in sorted(entry.rates)) or "-"
        lines.append(
            f"{agent:<40} {entry.datagrams:>9} {entry.flow_samples:>12} "
            f"{entry.counter_samples:>15} {entry.discard_samples:>8} {rates}"
        )
    return "\n".join(lines) + "\n"
