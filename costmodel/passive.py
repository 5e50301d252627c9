"""A server's current forwarding capacity from CPU statistics, without injecting traffic.

Over each interval: the packets the datapath processed (``ovs-appctl dpctl/show``: lookups hit +
missed + lost, for the kernel and the userspace datapath alike), the CPU time of forwarding
(ovs-vswitchd's threads, plus any ``--account-cgroup`` such as the VMs' slice), and the CPU time
of everything in the server's scope (the whole host, ``accounting.host_busy_ns``, or a ``--cgroup``).

    cost per packet   c = c0 of a cpu-method calibration    (--calibration; else measured:
                                                            forwarding CPU / packets)
    available CPUs      = budget - (busy - forwarding)       (what others leave to forwarding)
    capacity_pps        = available CPUs / c

A CPU hog in the scope raises ``busy`` and so lowers the capacity in the very next interval.
The calibrated cost is preferred because the measured one depends on the load: a switch starved
of CPU forwards the same packets in larger batches, so its cost per packet *falls* when a hog
arrives (measured here: 48 -> 27 us), which would hide the hog. The estimate is pure
(``estimate_capacity``); ``PassiveMonitor`` reads the counters.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cosample.costmodel.accounting import (
    cgroup_usage_ns,
    host_busy_ns,
    thread_run_ns,
)
from cosample.costmodel.errors import HarnessError
from cosample.validation import parse_refusal

_LOOKUPS = re.compile(r"lookups:\s*hit:(\d+)\s+missed:(\d+)\s+lost:(\d+)")
#: Below this many packets per second the measured cost is dominated by idle polling.
MIN_PPS = 1000.0


@dataclass(frozen=True)
class CapacityEstimate:
    """One interval's estimate; ``cost_source`` says where the per-packet cost came from."""

    capacity_pps: float
    forwarded_pps: float
    cost_ns_per_packet: float
    cost_source: str  # "measured" or "calibration"
    forwarding_cpus: float
    busy_cpus: float
    budget_cpus: float
    available_cpus: float
    interval_s: float


def parse_dpctl_lookups(text: str) -> int:
    """Packets the datapath(s) processed so far: sum of hit + missed + lost of ``dpctl/show``."""
    matches = _LOOKUPS.findall(text)
    if not matches:
        raise HarnessError(f"no 'lookups:' line in ovs-appctl dpctl/show output: {text[:120]!r}")
    return sum(int(hit) + int(missed) + int(lost) for hit, missed, lost in matches)


def calibrated_cost_s(document: Mapping[str, Any], where: str = "calibration") -> float:
    """c0 (CPU seconds per packet) from a cpu-method calibration: budget / capacity."""
    metadata = document.get("metadata") or {}
    budget, capacity = metadata.get("budget_cpus"), document.get("capacity_pps")
    if (
        metadata.get("method") != "cpu"
        or not isinstance(budget, (int, float))
        or not isinstance(capacity, (int, float))
        or capacity <= 0
        or budget <= 0
    ):
        raise HarnessError(
            f"{where}: not a cpu-method calibration (needs metadata.method = "
            f"'cpu', metadata.budget_cpus and capacity_pps > 0)"
        )
    return float(budget) / float(capacity)


def estimate_capacity(
    packets: float,
    forwarding_s: float,
    busy_s: float,
    interval_s: float,
    budget_cpus: float,
    calibrated_cost: float | None = None,
    min_pps: float = MIN_PPS,
) -> CapacityEstimate:
    """The capacity implied by one interval's counters (differences over ``interval_s``)."""
    if interval_s <= 0:
        raise HarnessError(f"interval must be > 0 s, got {interval_s!r}")
    forwarded = packets / interval_s
    forwarding, busy = forwarding_s / interval_s, busy_s / interval_s
    if calibrated_cost is not None:
        cost, source = calibrated_cost, "calibration"
    elif forwarded >= min_pps and forwarding > 0:
        cost, source = forwarding / forwarded, "measured"
    else:
        raise HarnessError(
            f"{forwarded:,.0f} packets/s is too little traffic to measure the cost "
            f"per packet (need {min_pps:,.0f}); give a cpu-method calibration "
            f"(--calibration) for idle servers"
        )
    available = max(budget_cpus - max(busy - forwarding, 0.0), 0.0)
    return CapacityEstimate(
        capacity_pps=available / cost,
        forwarded_pps=forwarded,
        cost_ns_per_packet=cost * 1e9,
        cost_source=source,
        forwarding_cpus=forwarding,
        busy_cpus=busy,
        budget_cpus=budget_cpus,
        available_cpus=available,
        interval_s=interval_s,
    )


@dataclass
class PassiveMonitor:
    """Reads the counters ``estimate_capacity`` needs; effects come in as callables.

    ``datapath_packets() -> int`` (e.g. dpctl/show through ovs-appctl), ``ovs_pids`` whose threads
    are forwarding, ``forwarding_cgroups`` counted as forwarding too, ``scope_cgroup`` the
    server's scope (None: the whole host)."""

    datapath_packets: Callable[[], int]
    ovs_pids: Iterable[int]
    budget_cpus: float
    forwarding_cgroups: Iterable[Path] = ()
    scope_cgroup: Path | None = None
    calibrated_cost: float | None = None
    clock: Callable[[], float] = time.monotonic

    def counters(self) -> tuple[float, int, int, int]:
        """(time, packets, forwarding ns, busy ns) so far."""
        stamp = self.clock()
        packets = self.datapath_packets()
        forwarding = sum(thread_run_ns(pid) for pid in self.ovs_pids)
        forwarding += sum(cgroup_usage_ns(path) for path in self.forwarding_cgroups)
        if self.scope_cgroup is not None:
            busy = cgroup_usage_ns(self.scope_cgroup)
        else:
            busy = host_busy_ns()
        return stamp, packets, forwarding, busy

    def estimate(self, before: tuple, after: tuple) -> CapacityEstimate:
        return estimate_capacity(
            after[1] - before[1],
            (after[2] - before[2]) / 1e9,
            (after[3] - before[3]) / 1e9,
            after[0] - before[0],
            self.budget_cpus,
            self.calibrated_cost,
        )

    def watch(
        self, interval_s: float, count: int, report: Callable[[CapacityEstimate], None]
    ) -> CapacityEstimate | None:
        """``count`` estimates (0: until interrupted), one per ``interval_s``, each to ``report``."""
        last, done, estimate = self.counters(), 0, None
        while count == 0 or done < count:
            time.sleep(max(interval_s - (self.clock() - last[0]), 0.0))
            now = self.counters()
            estimate = self.estimate(last, now)
            report(estimate)
            last, done = now, done + 1
        return estimate


def capacity_document(estimate: CapacityEstimate, host: str, date: str) -> dict[str, Any]:
    """The JSON a controller reads: ``capacity_pps`` on top, the reasoning beside it."""
    values = {
        key: (round(value, 6) if isinstance(value, float) and math.isfinite(value) else value)
        for key, value in asdict(estimate).items()
    }
    return {
        "capacity_pps": values.pop("capacity_pps"),
        "method": "passive cpu accounting",
        "host": host,
        "date": date,
        **values,
    }


def read_calibrated_cost(path: str) -> float:
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, 5,000 digits
        raise HarnessError(f"{path}: cannot read calibration: {parse_refusal(exc)}") from None
    if not isinstance(document, dict):
        raise HarnessError(f"{path}: calibration must be a JSON object")
    return calibrated_cost_s(document, where=path)
