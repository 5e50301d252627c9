"""Prometheus metrics of the collector, rendered from its newest snapshot and counters at scrape time.

Names are ``cosample_collector_*``; per-server gauges carry a ``server`` label, the traffic matrix
``src`` and ``dst``, drops a ``reason``. Values come from the snapshot the normal path computed
last, so a scrape never waits for the fast path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cosample import __version__
from cosample.collector.snapshot import SNAPSHOT_VERSION, Snapshot
from cosample.plan.formats import FORMAT_VERSION


@dataclass
class Status:
    """What the service counts besides the snapshot."""

    datagrams: int = 0
    samples: int = 0
    plan_errors: int = 0
    events: int = 0
    reexported_samples: int = 0
    reexport_errors: int = 0
    receive_errors: int = 0
    plan_refused: dict[str, int] = field(default_factory=dict)  # failed plan reads by kind
    state_write_errors: int = 0
    kernel_drops: int = 0  # datagrams the kernel could not queue on the socket
    queue_overflow: int = 0  # datagrams the receive thread's queue had no room for
    insecure_unsigned: bool = False
    ipfix_messages: int = 0  # IPFIX messages decoded (``--ipfix``)
    ipfix_records: int = 0  # IPFIX data records counted into estimates
    ipfix_receive_errors: int = 0
    ipfix_queue_overflow: int = 0
    ipfix_kernel_drops: int = 0
    guard_reports: int = 0  # hosts' guard reports accepted (``guardstate``)


class SnapshotMetrics:
    """A prometheus_client collector over ``source()`` -> (snapshot or None, status)."""

    def __init__(self, source: Callable[[], tuple[Snapshot | None, Status]]) -> None:
        self.source = source
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        snapshot, status = self.source()
        build = GaugeMetricFamily(
            "cosample_collector_build_info",
            "1, labelled with the cosample "
            "version, the plan format versions it reads and the snapshot "
            "format version it writes",
            labels=["version", "plan_formats_read", "snapshot_format_written"],
        )
        build.add_metric([__version__, str(FORMAT_VERSION), str(SNAPSHOT_VERSION)], 1)
        yield build
        for name, value, text in (
            ("datagrams", status.datagrams, "sFlow datagrams decoded"),
            ("samples", status.samples, "flow samples decoded"),
            (
                "plan_errors",
                status.plan_errors,
                "plan fetches or validations that failed (the last good plan stays)",
            ),
            ("events", status.events, "events exported (value left its band or silence)"),
            ("reexported_samples", status.reexported_samples, "samples re-exported downstream"),
            ("reexport_errors", status.reexport_errors, "re-export datagrams not sent"),
            ("receive_errors", status.receive_errors, "socket receive errors"),
            (
                "state_write_errors",
                status.state_write_errors,
                "state files not written (the daemon goes on receiving)",
            ),
            (
                "receive_queue_overflow",
                status.queue_overflow,
                "datagrams dropped because the receive thread's queue was full",
            ),
            (
                "kernel_receive_drops",
                status.kernel_drops,
                "datagrams the kernel dropped on the receive socket (buffer full: "
                "/proc/net/udp drops)",
            ),
            ("guard_reports", status.guard_reports, "hosts' guard reports accepted"),
            ("ipfix_messages", status.ipfix_messages, "IPFIX messages decoded (--ipfix)"),
            ("ipfix_records", status.ipfix_records, "IPFIX data records counted into estimates"),
            ("ipfix_receive_errors", status.ipfix_receive_errors, "IPFIX socket receive errors"),
            (
                "ipfix_receive_queue_overflow",
                status.ipfix_queue_overflow,
                "IPFIX messages dropped because the receive thread's queue was full",
            ),
            (
                "ipfix_kernel_receive_drops",
                status.ipfix_kernel_drops,
                "IPFIX messages the kernel dropped on the IPFIX socket (buffer full)",
            ),
        ):
            yield CounterMetricFamily(f"cosample_collector_{name}", text, value=value)
        refused = CounterMetricFamily(
            "cosample_collector_plan_refused",
            "plan reads refused, by reason (fetch, signature, invalid); the last good plan stays",
            labels=["reason"],
        )
        for reason in ("fetch", "signature", "invalid"):
            refused.add_metric([reason], status.plan_refused.get(reason, 0))
        yield refused
        yield GaugeMetricFamily(
            "cosample_collector_insecure_unsigned",
            "1 when plans are accepted without a signature",
            value=1 if status.insecure_unsigned else 0,
        )
        if snapshot is None:
            return
        for name, counts, text in (
            ("dropped", snapshot.dropped, "datagrams or samples dropped"),
            ("ignored", snapshot.ignored, "samples deliberately not counted"),
        ):
            family = CounterMetricFamily(
                f"cosample_collector_{name}", f"{text}, by reason", labels=["reason"]
            )
            for reason, count in counts.items():
                family.add_metric([reason], count)
            yield family
        plan = GaugeMetricFamily(
            "cosample_collector_plan_version",
            "version of the plan in use (-1: none)",
            value=snapshot.plan.version if snapshot.plan else -1,
        )
        yield plan
        yield GaugeMetricFamily(
            "cosample_collector_window_seconds", "estimation window", value=snapshot.window_s
        )
        guarded = GaugeMetricFamily(
            "cosample_collector_guard_rung",
            "rung of its plan's ladder a host's guard runs it on (hosts off their plan only)",
            labels=["server"],
        )
        for server, entry in snapshot.guard.items():
            guarded.add_metric([server], entry.rung)
        yield guarded
        gauges = {
            key: GaugeMetricFamily(f"cosample_collector_{key}", text, labels=["server"])
            for key, text in (
                ("packets_per_second", "estimated packets/s sent by the server's VMs"),
                ("packets_per_second_ci95_low", "95 % interval, low"),
                ("packets_per_second_ci95_high", "95 % interval, high"),
                ("bytes_per_second", "estimated bytes/s sent by the server's VMs"),
                ("samples_per_second", "samples/s attributed to the server"),
                ("coverage_ratio", "fraction of the server's packets the plan selects"),
            )
        }
        interfaces = GaugeMetricFamily(
            "cosample_collector_interface_packets_per_second",
            "port packet rates from sFlow counters",
            labels=["server", "ifindex", "direction"],
        )
        for server, e in snapshot.estimates().items():
            for key, estimate in (
                ("packets_per_second", e.packets_per_s),
                ("packets_per_second_ci95_low", e.packets_per_s_ci95[0]),
                ("packets_per_second_ci95_high", e.packets_per_s_ci95[1]),
                ("bytes_per_second", e.bytes_per_s),
                ("samples_per_second", e.samples_per_s),
                ("coverage_ratio", e.coverage),
            ):
                gauges[key].add_metric([server], estimate)
            for index, rates in (e.interfaces or {}).items():
                interfaces.add_metric([server, index, "in"], rates.in_pps)
                interfaces.add_metric([server, index, "out"], rates.out_pps)
        yield from gauges.values()
        yield interfaces
        if snapshot.traffic_pps is not None:
            matrix = GaugeMetricFamily(
                "cosample_collector_traffic_packets_per_second",
                "estimated V[src][dst]",
                labels=["src", "dst"],
            )
            for src, row in snapshot.traffic_pps.as_dict().items():
                for dst, pps in row.items():
                    matrix.add_metric([src, dst], pps)
            yield matrix
