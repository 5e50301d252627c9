"""Per-service statistics over tumbling windows: load, service time, status classes.

Windows are aligned to multiples of ``window_s`` in capture time (Unix seconds), so two analysers,
or an analyser and a server's access log, cut time the same way. A request counts in the window
its first byte was seen in; a response (its status class and, when matched, its service time)
in the window its status line was seen in. Service-time quantiles come from a DDSketch (1 %
relative accuracy, mergeable across windows and analysers: docs/dependencies.md); mean, min and
max are exact.
"""

from __future__ import annotations

import bisect
import ipaddress
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ddsketch import DDSketch

from cosample.appmon.successinterval import degrees_of_freedom

#: Relative accuracy of the service-time quantiles.
SKETCH_ACCURACY = 0.01
QUANTILES = (0.5, 0.95, 0.99)
#: The status classes a window counts (HTTP's 1xx to 5xx).
StatusClass = Literal["1xx", "2xx", "3xx", "4xx", "5xx"]
STATUS_CLASSES: tuple[StatusClass, ...] = get_args(StatusClass)
#: Services a window holds; a request or response of one more is counted
#: (``services_over_limit``), not kept: each costs a sketch and a snapshot entry.
MAX_SERVICES = 4096
#: A service with nothing in this many windows in a row is forgotten (until it is seen again).
IDLE_WINDOWS = 30
#: Upper bounds (seconds) of the Prometheus service-time histogram's buckets.
HISTOGRAM_BOUNDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


def service_name(key: tuple[bytes, int]) -> str:
    """``10.0.0.2:80`` or ``[2001:db8::2]:80``."""
    address, port = key
    text = str(ipaddress.ip_address(address))
    return f"[{text}]:{port}" if len(address) == 16 else f"{text}:{port}"


@dataclass
class ServiceStats:
    """One service in one window (or merged windows)."""

    requests: int = 0
    responses: int = 0
    matched: int = 0
    statuses: list[int] = field(default_factory=lambda: [0] * 5)
    total_s: float = 0.0
    min_s: float = math.inf
    max_s: float = 0.0
    sketch: DDSketch = field(default_factory=lambda: DDSketch(SKETCH_ACCURACY))
    #: matched service times per HISTOGRAM_BOUNDS bucket (last: above the largest bound)
    buckets: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_BOUNDS) + 1))
    #: requests per connection (the unit a hash-sampled share samples); requests whose
    #: connection is unknown (compact records carry none) in ``unattributed``
    per_connection: dict[object, int] = field(default_factory=dict)
    unattributed: int = 0
    #: [final responses, successful ones] per connection (``appmon.successinterval``), and
    #: final responses whose connection is unknown in ``unattributed_final``
    finals: dict[object, list[int]] = field(default_factory=dict)
    unattributed_final: int = 0
    #: answers whose status could not be read (TLS: every one; in ``matched`` and the service
    #: times, never in ``responses``, the status classes or the success rate)
    unread: int = 0
    #: the protocol its connections speak (``protocols.PROTOCOLS``; None: not known here)
    protocol: str | None = None
    #: connections opened (a client's SYN) and TLS handshakes completed, with their times
    opened: int = 0
    handshakes: int = 0
    handshake_total_s: float = 0.0
    handshake_min_s: float = math.inf
    handshake_max_s: float = 0.0
    handshake_sketch: DDSketch | None = None

    def request(self, connection: Any = None) -> None:
        """One request, on ``connection`` (any protocol's, ``connections.AnyConnection``, as the
        table's callbacks pass it, as an object; None: from records)."""
        self.requests += 1
        if connection is None:
            self.unattributed += 1
        else:
            self.per_connection[connection] = self.per_connection.get(connection, 0) + 1
            if self.protocol is None or self.protocol == "http":  # or upgraded to h2c since
                self.protocol = connection.protocol

    def connection(self, protocol: str | None, handshake_s: float | None) -> None:
        """A connection opened (``handshake_s`` None) or a TLS handshake done in so long."""
        if protocol is not None:
            self.protocol = protocol
        if handshake_s is None:
            self.opened += 1
            return
        self.handshakes += 1
        self.handshake_total_s += handshake_s
        self.handshake_min_s = min(self.handshake_min_s, handshake_s)
        self.handshake_max_s = max(self.handshake_max_s, handshake_s)
        if self.handshake_sketch is None:
            self.handshake_sketch = DDSketch(SKETCH_ACCURACY)
        self.handshake_sketch.add(handshake_s)

    def connection_counts(self) -> tuple[int, int] | None:
        """(connections with requests, sum of their request counts squared), what a connection-
        level interval needs (``appmon.rateinterval``); None if some requests came unattributed."""
        if self.unattributed:
            return None
        return len(self.per_connection), sum(n * n for n in self.per_connection.values())

    def success_sums(self) -> tuple[int, int, int, int] | None:
        """(connections with final responses, sum(n_i**2), sum(ok_i*n_i), sum(ok_i**2)) over
        each connection's final responses ``n_i`` and successful ones ``ok_i``, what the success
        rate's interval needs; None if some final responses came unattributed."""
        if self.unattributed_final:
            return None
        pairs = self.finals.values()
        return (
            len(self.finals),
            sum(n * n for n, _ in pairs),
            sum(n * ok for n, ok in pairs),
            sum(ok * ok for _, ok in pairs),
        )

    def success_df(self) -> float | None:
        """The success rate's variance's effective degrees of freedom over the connections
        (``successinterval.degrees_of_freedom``); None if unknown or nothing to widen."""
        return None if self.unattributed_final else degrees_of_freedom(self.finals.values())

    def response(
        self, status: int | None, service_time: float | None, connection: object = None
    ) -> None:
        if status is None:
            self.unread += 1
        else:
            self.responses += 1
            self.statuses[status // 100 - 1] += 1
            if status >= 200:  # final (a 101's switch is not counted in the success rate)
                if connection is None:
                    self.unattributed_final += 1
                else:
                    counts = self.finals.get(connection)
                    if counts is None:
                        counts = self.finals[connection] = [0, 0]
                    counts[0] += 1
                    counts[1] += status < 400
        if service_time is not None:
            self.matched += 1
            self.total_s += service_time
            if service_time < self.min_s:
                self.min_s = service_time
            if service_time > self.max_s:
                self.max_s = service_time
            self.sketch.add(service_time)
            self.buckets[bisect.bisect_left(HISTOGRAM_BOUNDS, service_time)] += 1

    def merge(self, other: "ServiceStats") -> None:
        self.requests += other.requests
        self.responses += other.responses
        self.matched += other.matched  # per connection: a window's only (totals would grow)
        self.statuses = [a + b for a, b in zip(self.statuses, other.statuses)]
        self.total_s += other.total_s
        self.min_s, self.max_s = min(self.min_s, other.min_s), max(self.max_s, other.max_s)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets)]
        if other.sketch.count:
            self.sketch.merge(other.sketch)
        self.unread += other.unread
        self.protocol = self.protocol or other.protocol
        self.opened += other.opened
        self.handshakes += other.handshakes
        self.handshake_total_s += other.handshake_total_s
        self.handshake_min_s = min(self.handshake_min_s, other.handshake_min_s)
        self.handshake_max_s = max(self.handshake_max_s, other.handshake_max_s)
        if other.handshake_sketch is not None:
            if self.handshake_sketch is None:
                self.handshake_sketch = DDSketch(SKETCH_ACCURACY)
            self.handshake_sketch.merge(other.handshake_sketch)

    def success_rate(self) -> float | None:
        """Final responses with a 2xx or 3xx status over all final responses."""
        final = self.responses - self.statuses[0]
        return (self.statuses[1] + self.statuses[2]) / final if final else None

    def quantile(self, q: float) -> float | None:
        return self.sketch.get_quantile_value(q) if self.sketch.count else None


@dataclass
class Window:
    """A closed window: start, width and each service's statistics."""

    start: float
    width_s: float
    services: dict[tuple[bytes, int], ServiceStats]


class Windows:
    """The current window of every service; ``advance`` closes windows as time passes. At most
    ``max_services`` services; one idle for ``IDLE_WINDOWS`` windows is dropped."""

    def __init__(
        self, width_s: float, counters: Counter | None = None, max_services: int = MAX_SERVICES
    ) -> None:
        if not width_s > 0:
            raise ValueError(f"window width must be > 0, got {width_s}")
        self.width_s = width_s
        self.counters = Counter() if counters is None else counters
        self.max_services = max_services
        self.start: float | None = None
        self.end = -math.inf
        self.current: dict[tuple[bytes, int], ServiceStats] = {}
        self.idle: dict[tuple[bytes, int], int] = {}  # windows in a row with nothing
        self.closed: list[Window] = []

    def _new(self, service: tuple) -> ServiceStats | None:
        if len(self.current) >= self.max_services:
            self.counters["services_over_limit"] += 1
            return None
        stats = self.current[service] = ServiceStats()
        return stats

    def request(self, service: tuple, time: float, connection: object = None) -> None:
        if time >= self.end:
            self.advance(time)
        stats = self.current.get(service) or self._new(service)
        if stats is not None:
            stats.request(connection)

    def response(
        self,
        service: tuple,
        time: float,
        status: int | None,
        service_time: float | None,
        connection: object = None,
    ) -> None:
        if time >= self.end:
            self.advance(time)
        stats = self.current.get(service) or self._new(service)
        if stats is not None:
            stats.response(status, service_time, connection)

    def connection(
        self, service: tuple, time: float, protocol: str | None, handshake_s: float | None = None
    ) -> None:
        """A connection opened at ``time``, or (``handshake_s``) its TLS handshake began then."""
        if time >= self.end:
            self.advance(time)
        stats = self.current.get(service) or self._new(service)
        if stats is not None:
            stats.connection(protocol, handshake_s)

    def advance(self, now: float) -> list[Window]:
        """Close the current window if ``now`` is past its end; the windows closed."""
        if now < self.end:
            return []
        done = []
        if self.start is not None:
            done.append(Window(self.start, self.width_s, self.current))
            self.closed.append(done[-1])
        self.start = math.floor(now / self.width_s) * self.width_s
        self.end = self.start + self.width_s
        # services seen before stay, with zeros: a rate that fell to nothing is a value too (for
        # IDLE_WINDOWS windows: then the service is forgotten)
        idle = self.idle
        for service, stats in self.current.items():
            idle[service] = 0 if stats.requests or stats.responses else idle.get(service, 0) + 1
        self.current = {
            service: ServiceStats(protocol=stats.protocol)
            for service, stats in self.current.items()
            if idle[service] < IDLE_WINDOWS
        }
        self.idle = {s: idle[s] for s in self.current}
        return done

    def flush(self) -> list[Window]:
        """Close the current window however far it got (end of a capture)."""
        if self.start is None:
            return []
        window = Window(self.start, self.width_s, self.current)
        self.closed.append(window)
        self.start, self.end, self.current, self.idle = None, -math.inf, {}, {}
        return [window]

    def take_closed(self) -> list[Window]:
        closed, self.closed = self.closed, []
        return closed
