"""``appmon run``: the live analyser's effects around the pure one.

One loop reads the packet ring in batches of blocks (the fast path: ``Analyser.ingest_all``,
the replay's, only updates state; compiled where built) and, every ``tick_s``, runs the normal
path: close windows that ended, expire idle connections, write each closed window's snapshot (``--state-dir``), its events (a value left its
band, seed 003) and refresh what ``/metrics`` and ``/snapshot`` serve. Nothing a frame holds can
stop the loop. ``--duration`` makes a bounded run (tests, experiments) that ends with the last
window flushed. ``send_records`` makes it the seeds' off-site sniffer (every request and response
also sent as a compact record to an analysis host); ``receive_records`` makes it that analysis
host (records fill the same windows as packets; ``interface`` may then be None).
"""

from __future__ import annotations

import select
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO

from cosample.appmon.analyser import Analyser
from cosample.appmon.capture import PacketRing
from cosample.appmon.errors import AppmonError
from cosample.appmon.losses import Losses
from cosample.appmon.metrics import AppMetrics, State
from cosample.appmon.recordlink import RecordReceiver, RecordSender
from cosample.appmon.records import DEFAULT_RATE, INSECURE_KEY
from cosample.appmon.snapshot import AppSnapshot, event_values, snapshot
from cosample.authenticity import HEADER, SIGNATURE_SUFFIX, AuthenticityError, Signer
from cosample.events import EventDetector, write_events
from cosample.files import write_atomic
from cosample.httpserver import BoundedHTTPServer, ServerMetrics, send_body
from cosample.plan.appmon import SHARE_BITS

#: Ring blocks read per batch before the loop looks at its clock again (about 700 frames each).
BATCH_BLOCKS = 16
SNAPSHOT_FILE = "snapshot.json"
WINDOWS_FILE = "windows.jsonl"


#: A receiver of compact records closes a window this long after its end, so records the
#: senders flushed at their last tick still land in it.
RECORD_GRACE_S = 1.0


@dataclass(frozen=True)
class Settings:
    interface: str | None
    name: str
    window_s: float = 10.0
    ports: frozenset[int] = frozenset()
    tick_s: float = 0.5
    metrics_port: int | None = None
    http_host: str = "127.0.0.1"
    state_dir: Path | None = None
    events: str | None = None  # path, or "-" for standard output
    band: float = 0.1
    max_silence_s: float = 300.0
    duration_s: float | None = None
    #: bytes of the packet ring (kernel memory, mapped): 64 MiB hold about 0.6 s of 300-byte
    #: frames at 300,000 frames/s, and at least 25 s at any rate (``capture.RETIRE_MS``)
    receive_buffer: int = 64 << 20
    send_records: tuple[str, int] | None = None  # the analysis host's UDP endpoint
    record_rate: float = DEFAULT_RATE
    receive_records: tuple[str, int] | None = None  # where this analyser listens for records
    #: signs what /snapshot serves and writes snapshot.json.sig (``cosample.authenticity``:
    #: the controller verifies analysers' snapshots as it does the collectors'); None: unsigned
    snapshot_key: str | Path | None = None
    #: only connections whose client port's low ``SHARE_BITS`` bits are below this (the plan's
    #: share, ``plan.appmon.selected_share``); 256: every connection
    selected: int = 1 << SHARE_BITS
    #: the compact records' pair key (``records.pair_key``; the well-known INSECURE_KEY only
    #: with ``--insecure-records``), the receiver's one sender (None: any) and the sender's
    #: own address to send from (None: the route's)
    record_key: bytes = INSECURE_KEY
    records_from: str | None = None
    send_records_from: str | None = None
    #: server port -> the protocol its service speaks (``appmon.protocols``); others detected
    protocols: dict[int, str] = field(default_factory=dict)
    #: the compiled fast path where built (``appmon.fastpath``); False: the Python path alone
    compiled: bool = True


class Service:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        counters: Counter = Counter()
        self._sender = (
            RecordSender(
                settings.send_records,
                counters,
                settings.record_rate,
                key=settings.record_key,
                source=settings.send_records_from,
            )
            if settings.send_records
            else None
        )
        self.analyser = Analyser(
            settings.window_s,
            ports=settings.ports,
            counters=counters,
            selected=settings.selected,
            records=self._sender.buffer if self._sender else None,
            protocols=settings.protocols,
            compiled=settings.compiled,
        )
        self._receiver: RecordReceiver | None = None
        self.detector = EventDetector(settings.band, settings.max_silence_s)
        self.state = State()
        self.metrics = AppMetrics(lambda: self.state)
        self.metrics.registry.register(ServerMetrics("cosample_appmon", lambda: self._http))
        self._stop = threading.Event()
        self._socket: PacketRing | None = None
        self.losses = Losses()
        self._http: BoundedHTTPServer | None = None
        self._events: IO[str] | None = None
        try:
            self._signer = Signer(settings.snapshot_key) if settings.snapshot_key else None
        except AuthenticityError as exc:
            raise AppmonError(f"--snapshot-key: {exc}") from None
        #: the last snapshot's bytes and signature, one pair (a reader never mixes two windows)
        self.signed: tuple[bytes, str | None] | None = None
        self.since = time.time()

    def start(self) -> "Service":
        if self.settings.receive_records:
            self._receiver = RecordReceiver(
                self.settings.receive_records,
                self.analyser.counters,
                self.analyser.windows,
                key=self.settings.record_key,
                sender=self.settings.records_from,
                ports=self.settings.ports,
            )
        if self.settings.interface is not None:
            self._socket = PacketRing(
                self.settings.interface, self.settings.ports, self.settings.receive_buffer
            )
        if self.settings.metrics_port is not None:
            self._http = _http_server(self, self.settings.http_host, self.settings.metrics_port)
            threading.Thread(
                target=self._http.serve_forever, name="appmon-http", daemon=True
            ).start()
            self.http_address = self._http.server_address[:2]
        if self.settings.events:
            self._events = (
                sys.stdout
                if self.settings.events == "-"
                else open(self.settings.events, "a", encoding="utf-8")
            )
        self.since = time.time()  # capturing from here: earlier parts of a window are not seen
        return self

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Capture until ``stop`` (or the duration); the last window is flushed at the end."""
        started = time.time()
        end = started + self.settings.duration_s if self.settings.duration_s else None
        next_tick = started + self.settings.tick_s
        ingest_all, sender = self.analyser.ingest_all, self._sender
        batch = self._socket.batch if self._socket is not None else lambda *_: []
        inputs = [source for source in (self._socket, self._receiver) if source is not None]
        # records arrive up to a sender's tick after their time: close windows that much later
        lag = RECORD_GRACE_S if self._receiver is not None else 0.0
        try:
            while not self._stop.is_set():
                now = time.time()
                if end is not None and now >= end:
                    break
                timeout = max(0.0, min(next_tick - now, 0.2))
                readable, _, _ = select.select(inputs, [], [], timeout)
                if self._socket in readable:
                    ingest_all(batch(BATCH_BLOCKS))
                    if sender is not None:
                        sender.send()
                if self._receiver is not None and self._receiver in readable:
                    self._receiver.receive()
                now = time.time()
                if now >= next_tick:
                    if sender is not None:
                        sender.send(partial=True)
                    self._publish(self._tick(now - lag), now)
                    next_tick = now + self.settings.tick_s
            ingest_all(batch())  # what the kernel handed over before the end
            if self._receiver is not None:
                self._receiver.receive()
                self._receiver.release()
            if sender is not None:
                self.analyser.table.close_all()
                sender.send(partial=True)
            self._publish(self.analyser.finish(), time.time())
        finally:
            self.close()

    def _tick(self, now: float) -> list:
        """Close what ended by this clock; then the records that waited for the next window."""
        closed = self.analyser.tick(now)
        if self._receiver is not None:
            self._receiver.release()
        return closed

    def _publish(self, windows, now: float) -> None:
        analyser = self.analyser
        counters = analyser.counters
        if self._socket is not None:
            frames, drops = self._socket.statistics()
            self.losses.update(kernel_frames=frames, kernel_drops=drops)
            if drops:
                counters["kernel_drops"] = drops
        if self._receiver is not None:
            self.losses.update(
                record_datagrams=self._receiver.datagrams,
                record_datagrams_lost=counters["record_datagrams_lost"],
            )
        for window in windows:
            covered = min(window.start + window.width_s, now) - max(window.start, self.since)
            snap = snapshot(
                window,
                analyser=self.settings.name,
                frames=analyser.frames,
                covered_s=min(window.width_s, max(0.0, covered)),
                connections=analyser.table.connections,
                dropped=analyser.dropped(),
                ignored=analyser.ignored(),
                share=self.settings.selected / (1 << SHARE_BITS),
                losses=self.losses.close(
                    frames=self._socket is not None, records=self._receiver is not None
                ),
            )
            self.state.snapshot = snap
            body = snap.to_json().encode()
            self.signed = (body, self._signer.sign(body) if self._signer else None)
            if self._events is not None:
                events = self.detector.update_all(event_values(snap), now)
                self.state.events += write_events(events, self._events)
            if self.settings.state_dir is not None:
                self._write(snap, self.settings.state_dir)
        self.state = State(
            frames=analyser.frames,
            events=self.state.events,
            connections=analyser.table.connections,
            totals=dict(analyser.totals),
            counters=dict(analyser.counters),
            snapshot=self.state.snapshot,
            kernel_frames=self.losses.totals["kernel_frames"] if self._socket else None,
            kernel_drops=self.losses.totals["kernel_drops"] if self._socket else None,
        )

    def _write(self, snap: AppSnapshot, state_dir: Path) -> None:
        directory = Path(state_dir)
        text = snap.to_json()
        write_atomic(directory / SNAPSHOT_FILE, lambda stream: stream.write(text), parents=True)
        if self.signed is not None and self.signed[1] is not None:
            signature = self.signed[1]
            write_atomic(
                directory / (SNAPSHOT_FILE + SIGNATURE_SUFFIX),
                lambda stream: stream.write(signature),
            )
        with open(directory / WINDOWS_FILE, "a", encoding="utf-8") as stream:
            stream.write(text + "\n")

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        for link in (self._socket, self._sender, self._receiver):
            if link is not None:
                link.close()
        self._socket = self._sender = self._receiver = None
        if self._events is not None and self._events is not sys.stdout:
            self._events.close()
            self._events = None


def _http_server(service: Service, host: str, port: int) -> BoundedHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            signed = service.signed
            signature = None
            if path == "/snapshot":
                if signed is None:
                    self.send_error(503, "no window closed yet")
                    return
                (body, signature), kind = signed, "application/json"
            elif path == "/metrics":
                body, kind = service.metrics.text(), "text/plain; version=0.0.4; charset=utf-8"
            elif path == "/healthz":
                body, kind = b"ok\n", "text/plain"
            else:
                self.send_error(404, "try /snapshot, /metrics or /healthz")
                return
            send_body(self, body, kind, {HEADER: signature} if signature else None)

        def log_message(self, *args) -> None:
            pass

    try:
        return BoundedHTTPServer((host, port), Handler)
    except OSError as exc:
        raise AppmonError(
            f"--metrics-port {port}: cannot listen on {host} ({exc.strerror})"
        ) from None
