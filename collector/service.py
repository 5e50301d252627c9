"""``collector run``: the daemon's effects around the pure estimator.

One thread receives datagrams (non-blocking socket drained in batches: the fast path only updates
sums) and, once per ``export_s``, runs the normal path: snapshot, events, state file, plan poll.
An HTTP thread serves the newest snapshot (``/snapshot``), metrics (``/metrics``) and
``/healthz`` without touching the estimator. Nothing received can stop the loop; a bad plan keeps
the last good one.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

from cosample.collector.admission import Admission
from cosample.collector.errors import CollectorError
from cosample.collector.estimate import Estimator
from cosample.collector.events import EventDetector, snapshot_values, write_events
from cosample.collector.inventory import Inventory
from cosample.collector.metrics import SnapshotMetrics, Status
from cosample.collector.planwatch import PlanWatcher, Update
from cosample.collector.polling import PLAN_INTERVAL_S, PLAN_TIMEOUT_S
from cosample.collector.reexport import Reexporter
from cosample.collector.snapshot import Snapshot
from cosample.files import write_atomic

SNAPSHOT_FILE = "snapshot.json"
#: Datagrams drained per batch before the loop looks at its timers again.
BATCH = 4096


@dataclass(frozen=True)
class Settings:
    listen: tuple[str, int]
    plan: str
    name: str
    metrics_port: int | None = None
    http_host: str = "127.0.0.1"
    state_dir: Path | None = None
    window_s: float = 30.0
    export_s: float = 1.0
    plan_interval_s: float = PLAN_INTERVAL_S
    plan_timeout_s: float = PLAN_TIMEOUT_S
    reexport: tuple[str, int] | None = None
    events: str | None = None  # path, or "-" for standard output
    band: float = 0.1
    max_silence_s: float = 300.0
    receive_buffer: int = 8 << 20
    reuse_port: bool = False
    partial: bool = False  # this instance hears only some agents (implied by reuse_port)


class Service:
    def __init__(self, settings: Settings, inventory: Inventory | None = None, *,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] | None = None):
        self.settings, self.clock = settings, clock
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.watcher = PlanWatcher(settings.plan, inventory, settings.plan_timeout_s)
        self.estimator = Estimator(None, window_s=settings.window_s, name=settings.name,
                                   partial=settings.reuse_port or settings.partial)
        self.admission = Admission(self.estimator.dropped)
        self.status = Status()
        self.detector = EventDetector(settings.band, settings.max_silence_s)
        self.reexporter: Reexporter | None = None
        self.snapshot: Snapshot | None = None
        self._snapshot_json = b""
        self._stop = threading.Event()
        self._socket: socket.socket | None = None
        self._http: ThreadingHTTPServer | None = None
        self._events: IO[str] | None = None
        self.metrics = SnapshotMetrics(lambda: (self.snapshot, self.status))

    # set-up --------------------------------------------------------------------------------
    def start(self) -> "Service":
        host, port = self.settings.listen
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if self.settings.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            _receive_buffer(sock, self.settings.receive_buffer)
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise CollectorError(f"--listen {host}:{port}: cannot bind ({exc.strerror})") from None
        sock.setblocking(False)
        self._socket = sock
        self.listen_address = sock.getsockname()[:2]
        if self.settings.metrics_port is not None:
            self._http = _http_server(self, self.settings.http_host, self.settings.metrics_port)
            threading.Thread(target=self._http.serve_forever, name="collector-http",
                             daemon=True).start()
            self.http_address = self._http.server_address[:2]
        if self.settings.reexport is not None:
            self.reexporter = Reexporter(self.settings.reexport, None,
                                         clock_ms=lambda: self.clock() * 1000.0)
            self.estimator.on_sample = self.reexporter
        if self.settings.events:
            self._events = sys.stdout if self.settings.events == "-" else \
                open(self.settings.events, "a", encoding="utf-8")
        self._poll_plan()
        self.export(self.clock())
        return self

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self.reexporter is not None:
            self.reexporter.close()
        if self._socket is not None:
            self._socket.close()
        if self._events is not None and self._events is not sys.stdout:
            self._events.close()

    # loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Receive and export until ``stop``; returns after closing everything."""
        next_export = self.clock() + self.settings.export_s
        next_plan = self.clock() + self.settings.plan_interval_s
        try:
            while not self._stop.is_set():
                timeout = max(0.0, min(next_export - self.clock(), 0.2))
                readable, _, _ = select.select([self._socket], [], [], timeout)
                if readable:
                    self._drain()
                now = self.clock()
                self._plan_due(now)
                if now >= next_plan:
                    self._poll_plan()
                    next_plan = now + self.settings.plan_interval_s
                if now >= next_export:
                    self.export(now)
                    next_export = now + self.settings.export_s
        finally:
            self.close()

    def _drain(self) -> None:
        receive, ingest, now = self._socket.recvfrom, self.estimator.ingest, self.clock()
        admit = self.admission.admit
        self._plan_due(now)  # a plan whose not_before came attributes what arrives from now on
        for _ in range(BATCH):
            try:
                data, source = receive(65535)
            except BlockingIOError:
                break
            except OSError:
                self.status.receive_errors += 1
                break
            if admit(data, source[0]):
                ingest(data, now)
        if self.reexporter is not None:
            self.reexporter.flush()

    def _poll_plan(self) -> None:
        update = self.watcher.poll(datetime.fromtimestamp(self.clock(), timezone.utc))
        self.status.plan_errors = self.watcher.errors
        if update is not None:
            self._switch(update)
        elif self.watcher.last_error:
            self.log(f"collector: {self.watcher.last_error}; keeping the last good plan")
            self.watcher.last_error = None

    def _plan_due(self, now: float) -> None:
        update = self.watcher.due(datetime.fromtimestamp(now, timezone.utc))
        if update is not None:
            self._switch(update)

    def _switch(self, update: Update) -> None:
        new = update.attribution
        self.estimator.set_attribution(new, update.at.timestamp() if update.at else None)
        self.admission.plan(new.server_of_agent)
        if self.reexporter is not None:
            self.reexporter.attribution = new
        at = f" from its not_before {update.at:%H:%M:%S.%f}" if update.at else ""
        self.log("collector: no plan yet: attributing by the inventory's agent addresses "
                 f"({len(new.servers)} servers, local sampling at their own rates)"
                 if new.plan_id is None else
                 f"collector: plan version {new.plan_version} ({new.plan_id[:12]}){at}"
                 f"{' expired: local sampling only' if self.watcher.safe else ''}")

    def export(self, now: float) -> Snapshot:
        """The normal path: a snapshot, its events, the state file."""
        snapshot = self.estimator.snapshot(now)
        self.snapshot = snapshot
        self._snapshot_json = snapshot.to_json().encode()
        self.status.datagrams, self.status.samples = self.estimator.datagrams, self.estimator.samples
        if self.reexporter is not None:
            self.status.reexported_samples = self.reexporter.sent_samples
            self.status.reexport_errors = self.reexporter.errors
        if self._events is not None:
            events = self.detector.update_all(dict(snapshot_values(snapshot)), now)
            self.status.events += write_events(events, self._events)
        if self.settings.state_dir is not None:
            text = snapshot.to_json()
            write_atomic(Path(self.settings.state_dir) / SNAPSHOT_FILE,
                         lambda stream: stream.write(text), parents=True)
        return snapshot

    def snapshot_json(self) -> bytes:
        return self._snapshot_json


def _receive_buffer(sock: socket.socket, size: int) -> None:
    """Enlarge the receive buffer (past the sysctl limit as root): bursts outlast a busy CPU."""
    option = getattr(socket, "SO_RCVBUFFORCE", 33) if os.geteuid() == 0 else socket.SO_RCVBUF
    try:
        sock.setsockopt(socket.SOL_SOCKET, option, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def _http_server(service: Service, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/snapshot" and service.snapshot is None:
                self.send_error(503, "no snapshot yet")
                return
            if path == "/snapshot":
                body, kind = service.snapshot_json(), "application/json"
            elif path == "/metrics":
                body, kind = service.metrics.text(), "text/plain; version=0.0.4; charset=utf-8"
            elif path == "/healthz":
                body, kind = b"ok\n", "text/plain"
            else:
                self.send_error(404, "try /snapshot, /metrics or /healthz")
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise CollectorError(f"--metrics-port {port}: cannot listen on {host} ({exc.strerror})") \
            from None
    server.daemon_threads = True
    return server
