"""The analyser: frames in, per-service windows out (the fast path of ``run`` and ``replay``).
With ``records`` (a ``records.RecordBuffer``), every request and response is also written as a
compact record for an analysis host (the off-site sniffer).

``ingest(frame, time)`` decodes, reassembles and matches; it only updates state (INTCollector's
fast path). ``ingest_all`` does the same for a list of ``(time, frame)`` pairs (a ring's batch,
a replay's chunk), the common frames of HTTP/1.x connections through the compiled fast path
(``appmon.fastpath``) with the same effect, the others through ``ingest``. Closed windows wait in
``windows.closed`` for the normal path (snapshot, metrics, events). Every frame or message not
counted increments a named reason in ``counters``; nothing a frame contains can raise out of
``ingest``.
"""

from __future__ import annotations

from collections import Counter

from cosample.appmon.connections import MAX_CONNECTIONS, ConnectionTable
from cosample.appmon.decode import LINK_ETHERNET, Segment, decode
from cosample.appmon.fastpath import engine
from cosample.appmon.windows import ServiceStats, Window, Windows
from cosample.plan.appmon import SHARE_BITS

#: Reasons that are deliberate (not this analyser's business, or seen before): reported apart
#: from the drops, which lose information the metrics would need.
IGNORED = frozenset(
    (
        "not_ip",
        "not_tcp",
        "not_tracked",
        "other_port",
        "not_selected",
        "retransmitted_segments",
        "overlapping_segments",
        "segments_after_close",
        "truncated_segments",
        "body_holes_skipped",
        "first_lines_cut",
        "first_lines_unseen",
        "framing_cut",
        "tls_tickets",
        "h2c_upgrades",
        "record_datagrams_reordered",
        "record_senders_restarted",
    )
)


class Analyser:
    """Decode -> connections -> windows; ``counters`` names every frame it did not use."""

    def __init__(
        self,
        window_s: float = 10.0,
        *,
        link: int = LINK_ETHERNET,
        ports: frozenset[int] = frozenset(),
        max_connections: int = MAX_CONNECTIONS,
        records=None,
        counters: Counter | None = None,
        selected: int = 1 << SHARE_BITS,
        protocols: dict[int, str] | None = None,
        compiled: bool = True,
    ) -> None:
        self.link = link
        self.counters: Counter = Counter() if counters is None else counters
        self.windows = Windows(window_s, self.counters)
        on_request, on_response = self.windows.request, self.windows.response
        if records is not None:  # an off-site sniffer: every request and response also as a record

            def on_request(
                service, time, connection=None, local=on_request, remote=records.request
            ):
                local(service, time, connection)
                remote(service, time)

            def on_response(
                service,
                time,
                status,
                service_time,
                connection=None,
                local=on_response,
                remote=records.response,
            ):
                local(service, time, status, service_time, connection)
                if status is not None:  # records carry HTTP statuses; a TLS answer has none
                    remote(service, time, status, service_time)

        self.table = ConnectionTable(
            self.counters,
            on_request,
            on_response,
            max_connections=max_connections,
            ports=frozenset(ports),
            selected=selected,
            protocols=protocols,
            on_connection=self.windows.connection,
        )
        self.frames = 0
        self.totals: dict[tuple, ServiceStats] = {}
        self.last_time: float | None = None
        #: the compiled fast path (None: not built, or ``compiled=False``: Python alone)
        self.fast = engine(self.table, link) if compiled else None

    def ingest(self, frame: bytes, time: float) -> None:
        self.frames += 1
        segment = decode(frame, self.link)
        if segment.__class__ is not Segment:
            self.counters[segment] += 1
            return
        if time >= self.windows.end:
            self.windows.advance(time)
        self.last_time = time
        self.table.segment(segment, time)

    def ingest_from(self, frames: list[tuple[float, bytes]], index: int = 0) -> int:
        """``frames[index:]`` through the compiled fast path while it takes them; the index of
        the first it did not take (give that one to ``ingest``, then call again): one that is
        not the common case, or at or after the current window's end."""
        if self.fast is None:
            return index
        taken = self.fast.run(frames, index, self.windows.end)
        if taken > index:
            self.frames += taken - index
            self.last_time = frames[taken - 1][0]
        return taken

    def ingest_all(self, frames: list[tuple[float, bytes]]) -> None:
        """Every ``(time, frame)`` of ``frames``, in order, as ``ingest`` would take them."""
        index, count, ingest_from, ingest = 0, len(frames), self.ingest_from, self.ingest
        while index < count:
            index = ingest_from(frames, index)
            if index < count:
                time, frame = frames[index]
                ingest(frame, time)
                index += 1

    def tick(self, now: float) -> list[Window]:
        """The normal path's clock: close windows that ended, expire connections; the windows
        closed since the last tick, also added to ``totals``."""
        self.windows.advance(now)
        self.table.expire(now)
        return self._closed()

    def finish(self) -> list[Window]:
        """End of input: close every connection and the last window."""
        self.table.close_all()
        self.windows.flush()
        return self._closed()

    def _closed(self) -> list[Window]:
        closed = self.windows.take_closed()
        for window in closed:
            for service, stats in window.services.items():
                self.totals.setdefault(service, ServiceStats()).merge(stats)
        if len(self.totals) > self.windows.max_services:  # the forgotten services' totals too
            live = set(self.windows.current).union(*(w.services for w in closed))
            self.totals = {s: t for s, t in self.totals.items() if s in live}
        return closed

    def dropped(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.counters.items()) if k not in IGNORED}

    def ignored(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.counters.items()) if k in IGNORED}
