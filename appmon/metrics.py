"""Prometheus metrics of the analyser, rendered at scrape time from the normal path's state.

Names are ``cosample_appmon_*``; per-service series carry a ``service`` label (``10.0.0.2:80``).
Counters and the service-time histogram are totals since the start (Prometheus computes rates
and quantiles over any range); gauges are the last closed window's values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from cosample.appmon.snapshot import AppSnapshot
from cosample.appmon.windows import HISTOGRAM_BOUNDS, STATUS_CLASSES, ServiceStats, service_name


@dataclass
class State:
    """What a scrape reads: totals since start, the last window's snapshot, the counters."""

    frames: int = 0
    events: int = 0
    connections: int = 0
    totals: dict[tuple, ServiceStats] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    snapshot: AppSnapshot | None = None
    #: frames the kernel's filter passed and dropped since the start (None: no packet input)
    kernel_frames: int | None = None
    kernel_drops: int | None = None


class AppMetrics:
    """A prometheus_client collector over ``source()`` -> ``State``."""

    def __init__(self, source: Callable[[], State]) -> None:
        self.source = source
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        state = self.source()
        yield CounterMetricFamily("cosample_appmon_frames", "frames read", value=state.frames)
        yield CounterMetricFamily("cosample_appmon_events", "events exported", value=state.events)
        yield GaugeMetricFamily(
            "cosample_appmon_connections", "connections tracked", value=state.connections
        )
        unused = CounterMetricFamily(
            "cosample_appmon_unused",
            "frames, segments or messages not counted, by reason",
            labels=["reason"],
        )
        for reason, count in sorted(state.counters.items()):
            unused.add_metric([reason], count)
        yield unused
        if state.kernel_frames is not None:
            yield CounterMetricFamily(
                "cosample_appmon_kernel_frames",
                "frames the kernel's filter passed to the ring, dropped ones included",
                value=state.kernel_frames,
            )
            yield CounterMetricFamily(
                "cosample_appmon_kernel_drops",
                "frames the kernel dropped: the ring was full",
                value=state.kernel_drops or 0,
            )
        requests = CounterMetricFamily(
            "cosample_appmon_requests", "requests seen", labels=["service"]
        )
        responses = CounterMetricFamily(
            "cosample_appmon_responses",
            "final responses seen, by status class",
            labels=["service", "class"],
        )
        histogram = HistogramMetricFamily(
            "cosample_appmon_service_time_seconds",
            "request first byte to status line",
            labels=["service"],
        )
        for key, stats in sorted(state.totals.items(), key=lambda item: service_name(item[0])):
            name = service_name(key)
            requests.add_metric([name], stats.requests)
            for label, count in zip(STATUS_CLASSES, stats.statuses):
                responses.add_metric([name, label], count)
            cumulative, buckets = 0, []
            for bound, count in zip((*HISTOGRAM_BOUNDS, math.inf), stats.buckets):
                cumulative += count
                buckets.append(("+Inf" if bound == math.inf else repr(bound), cumulative))
            histogram.add_metric([name], buckets, sum_value=stats.total_s)
        yield requests
        yield responses
        yield histogram
        if state.snapshot is None:
            return
        snap = state.snapshot
        yield GaugeMetricFamily(
            "cosample_appmon_window_lower_bound",
            "1: the last window lost frames or records, its counts are lower bounds",
            value=int(snap.lower_bound),
        )
        for name, text, value in (
            (
                "kernel_drop_ratio",
                "share of the last window's frames the kernel dropped",
                snap.kernel_drop_share,
            ),
            (
                "record_loss_ratio",
                "share of the last window's record datagrams lost",
                snap.record_loss_share,
            ),
        ):
            if value is not None:
                yield GaugeMetricFamily(f"cosample_appmon_{name}", text, value=value)
        gauges = {
            key: GaugeMetricFamily(f"cosample_appmon_{key}", text, labels=["service"])
            for key, text in (
                ("requests_per_second", "requests/s, last window"),
                ("success_ratio", "2xx+3xx share of final responses, last window"),
                ("service_time_mean_seconds", "mean service time, last window"),
                ("service_time_p95_seconds", "95th percentile, last window"),
            )
        }
        for service in state.snapshot.services:
            gauges["requests_per_second"].add_metric([service.service], service.requests_per_s)
            if service.success_rate is not None:
                gauges["success_ratio"].add_metric([service.service], service.success_rate)
            if service.service_time_s is not None:
                gauges["service_time_mean_seconds"].add_metric(
                    [service.service], service.service_time_s.mean
                )
                gauges["service_time_p95_seconds"].add_metric(
                    [service.service], service.service_time_s.p95
                )
        yield from gauges.values()
