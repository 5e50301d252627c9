"""``collector run``: the daemon's effects around the pure estimator.

One thread receives datagrams (non-blocking socket drained in batches: the admission check,
then the fast path that only updates sums) and, once per ``export_s``, takes a snapshot of the
estimator. Nothing slow runs on it: the plan is read, verified and parsed on a thread of its own
and handed over between batches (``workers.PlanPoller``); the snapshot's JSON, the events, the
state file and the kernel's drop counter are done by another (``workers.SnapshotWriter``). An
HTTP thread serves the newest snapshot (``/snapshot``), metrics (``/metrics``), counters
(``/status``) and ``/healthz``
without touching the estimator. Nothing received can stop the loop; a bad plan keeps the last
good one.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from cosample.authenticity import Signer
from cosample.collector import ipfixtemplates, snapshotbin
from cosample.collector.admission import Admission, is_guard_report
from cosample.collector.errors import CollectorError
from cosample.collector.estimate import Estimator
from cosample.collector.events import snapshot_values
from cosample.collector.httpapi import http_server
from cosample.collector.inventory import Inventory
from cosample.collector.metrics import SnapshotMetrics, Status
from cosample.collector.planread import Reading
from cosample.collector.planwatch import PlanWatcher, Update
from cosample.collector.polling import PLAN_INTERVAL_S, PLAN_TIMEOUT_S
from cosample.collector.receiver import Receiver
from cosample.collector.reexport import Reexporter
from cosample.collector.snapshot import Snapshot
from cosample.collector.udpstats import kernel_drops
from cosample.collector.workers import PlanPoller, SnapshotWriter
from cosample.errors import CosampleError
from cosample.events import EventDetector, write_events
from cosample.files import write_atomic, write_bytes_atomic
from cosample.httplimits import Limits
from cosample.httpserver import BoundedHTTPServer, ServerMetrics
from cosample.plan.formats import COLLECTOR_MAX_PLAN_MIB, SAFE_SAMPLING

logger = logging.getLogger("cosample.collector")

SNAPSHOT_FILE = "snapshot.json"
#: After a snapshot that took d seconds, at least this many times d of ingest before the next.
EXPORT_SHARE = 3.0


@dataclass(frozen=True)
class Settings:
    listen: tuple[str, int]
    plan: str
    name: str
    metrics_port: int | None = None
    http_host: str = "127.0.0.1"
    http_max_connections: int = Limits.max_connections
    http_idle_timeout_s: float = Limits.idle_s
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
    #: the agents' safe-state 1-in-N: the only one weighed without a plan in force (``declared``)
    safe_sampling: int = SAFE_SAMPLING
    snapshot_key: str | None = None  # signs /snapshot (``authenticity``); None: unsigned
    public_key: str | None = None  # verify PLAN.sig with it, as the agents
    insecure_unsigned: bool = False  # accept unsigned plans (labs): one of the two is required
    ipfix: tuple[str, int] | None = None  # IPFIX from OVS's sample action (off: None)
    max_plan_bytes: int = COLLECTOR_MAX_PLAN_MIB * 1024 * 1024  # a larger plan is refused


class Service:
    def __init__(
        self,
        settings: Settings,
        inventory: Inventory | None = None,
        *,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
    ):
        self.settings, self.clock = settings, clock
        #: ``log``: a line for the record; ``warn``: a change of state an operator must act on
        #: (no plan, a plan refused, a plan expired, a stream it cannot receive), logged once
        #: when it happens (default: the ``cosample.collector`` logger, INFO and WARNING)
        self.log = log or (lambda line: logger.info("%s", line))
        self.warn = log or (lambda line: logger.warning("%s", line))
        if settings.public_key is None and not settings.insecure_unsigned:
            raise CollectorError(
                "--public-key: required to verify plans as the agents do "
                "(or --insecure-unsigned for a lab)"
            )
        if settings.public_key is not None and not os.access(settings.public_key, os.R_OK):
            raise CollectorError(f"--public-key {settings.public_key}: cannot read the key")
        self.watcher = PlanWatcher(
            settings.plan,
            inventory,
            settings.plan_timeout_s,
            public_key=settings.public_key,
            insecure_unsigned=settings.insecure_unsigned,
            max_bytes=settings.max_plan_bytes,
        )
        self.poller = PlanPoller(self.watcher.reader, settings.plan_interval_s)
        self.writer = SnapshotWriter(self._write, self.log)
        self._logged_error: str | None = None
        self.estimator = Estimator(
            None,
            window_s=settings.window_s,
            name=settings.name,
            partial=settings.reuse_port or settings.partial,
            safe_sampling=settings.safe_sampling,
        )
        self.admission = Admission(self.estimator.dropped)
        self.status = Status()
        self.detector = EventDetector(settings.band, settings.max_silence_s)
        self.reexporter: Reexporter | None = None
        self.snapshot: Snapshot | None = None
        #: this process's start and its exports: each snapshot's ``started`` and ``serial``
        self.started, self.exports = datetime.fromtimestamp(clock(), timezone.utc), 0
        self._snapshot_json = b""
        self._signer = Signer(settings.snapshot_key) if settings.snapshot_key else None
        # one reference each: body and signature; None until the writer thread has rendered
        # the first export (``snapshot`` is set before, on the exporting thread)
        self._signed: tuple[bytes, str | None] | None = None
        self._signed_binary: tuple[bytes, str | None] | None = None  # ``snapshotbin``'s form
        self._stop = threading.Event()
        self._socket: socket.socket | None = None
        self._receiver: Receiver | None = None
        self._ipfix_socket: socket.socket | None = None
        self._ipfix_receiver: Receiver | None = None
        self._ipfix_warned: str | None = None
        self._templates_written = 0  # ``Templates.changes`` at the last save (ipfixtemplates)
        self._http: BoundedHTTPServer | None = None
        self._events: IO[str] | None = None
        self.metrics = SnapshotMetrics(lambda: (self.snapshot, self.status))
        self.metrics.registry.register(ServerMetrics("cosample_collector", lambda: self._http))

    # set-up --------------------------------------------------------------------------------
    def start(self) -> "Service":
        self._socket = self._bind(self.settings.listen, "--listen")
        self.listen_address = self._socket.getsockname()[:2]
        if self.settings.ipfix is not None:
            try:
                self._ipfix_socket = self._bind(self.settings.ipfix, "--ipfix")
            except CollectorError:
                self._socket.close()
                raise
            self.ipfix_address = self._ipfix_socket.getsockname()[:2]
            self._restore_templates()
        if self.settings.metrics_port is not None:
            self._http = http_server(self, self.settings.http_host, self.settings.metrics_port)
            threading.Thread(
                target=self._http.serve_forever, name="collector-http", daemon=True
            ).start()
            self.http_address = self._http.server_address[:2]
        if self.settings.reexport is not None:
            self.reexporter = Reexporter(
                self.settings.reexport, None, clock_ms=lambda: self.clock() * 1000.0
            )
            self.estimator.on_sample = self.reexporter
        if self.settings.events:
            self._events = (
                sys.stdout
                if self.settings.events == "-"
                else open(self.settings.events, "a", encoding="utf-8")
            )
        warning = unsigned_warning(self.settings)
        if warning:
            self.status.insecure_unsigned = True
            self.warn(f"collector: WARNING: {warning}")
        self.writer.start()
        self.poller.start()
        try:  # start with the plan when it comes in time (datagrams wait in the socket buffer)
            self._accept(self.poller.readings.get(timeout=self.settings.plan_timeout_s + 1.0))
        except queue.Empty:
            self.warn(
                f"collector: plan {self.settings.plan}: not read within "
                f"{self.settings.plan_timeout_s:g} s; no plan yet, receiving meanwhile"
            )
        self.export(self.clock())
        return self

    def _bind(self, address: tuple[str, int], option: str) -> socket.socket:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if self.settings.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            _receive_buffer(sock, self.settings.receive_buffer)
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise CollectorError(f"{option} {host}:{port}: cannot bind ({exc.strerror})") from None
        sock.setblocking(False)
        return sock

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.poller.stop()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self.writer.stop()
        if self.reexporter is not None:
            self.reexporter.close()
        for sock in (self._socket, self._ipfix_socket):
            if sock is not None:
                sock.close()
        if self._events is not None and self._events is not sys.stdout:
            self._events.close()

    # loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Estimate and export until ``stop``; returns after closing everything.

        The socket is read by ``receiver.Receiver`` on its own thread; this loop drains its
        queue. A snapshot that took ``d`` seconds is followed by at least ``EXPORT_SHARE`` x
        ``d`` seconds of ingest before the next one (a 10^5-server snapshot takes seconds):
        snapshots get rarer, ingest keeps its pace."""
        next_export = self.clock() + self.settings.export_s
        relay = self.clock is time.time  # the relay stamps arrivals with the wall clock
        assert self._socket is not None  # (``start`` opened it)
        receiver = self._receiver = Receiver(self._socket, self.clock, relay=relay, log=self.log)
        ipfix = None
        if self._ipfix_socket is not None:  # a second socket, its own receive process
            ipfix = self._ipfix_receiver = Receiver(
                self._ipfix_socket, self.clock, relay=relay, log=self.log
            )
            ipfix.ready = receiver.ready  # one event wakes the loop for either
            ipfix.start()
        receiver.start()
        try:
            while not self._stop.is_set():
                if not receiver.queue and not (ipfix is not None and ipfix.queue):
                    receiver.ready.wait(max(0.0, min(next_export - self.clock(), 0.2)))
                self._drain(receiver.take())
                if ipfix is not None:
                    self._drain_ipfix(ipfix.take())
                for reading in self.poller.take():
                    self._accept(reading)
                now = self.clock()
                self._plan_due(now)
                if now >= next_export:
                    began = time.monotonic()
                    self.export(now)
                    spent = time.monotonic() - began
                    next_export = self.clock() + max(self.settings.export_s, EXPORT_SHARE * spent)
        finally:
            receiver.stop()
            if ipfix is not None:
                ipfix.stop()
            self.close()

    def _drain(self, batch: list[tuple[bytes, str, float]]) -> None:
        """Admission, then the fast path, each datagram at its arrival time."""
        ingest, admit, wake = self.estimator.ingest, self.admission.admit, self.watcher.wake_ts
        for data, source, when in batch:
            if when >= wake:  # a plan whose not_before came attributes what arrived since
                self._plan_due(when)
                wake = self.watcher.wake_ts
            if admit(data, source):
                ingest(data, when)
            elif is_guard_report(data):  # a host's guard stepped (collector/guardstate.py)
                self.estimator.guard_report(data, source, when)
        if batch and self.reexporter is not None:
            self.reexporter.flush()

    def _drain_ipfix(self, batch: list[tuple[bytes, str, float]]) -> None:
        """IPFIX messages, each at its arrival time (admission: ``ingest_ipfix`` counts only
        exporters the plan gives a ``sample`` host)."""
        ingest, wake = self.estimator.ingest_ipfix, self.watcher.wake_ts
        for data, source, when in batch:
            if when >= wake:
                self._plan_due(when)
                wake = self.watcher.wake_ts
            ingest(data, source, when)

    def _accept(self, reading: Reading) -> None:
        """A read of the plan (made on the poller's thread) takes effect here, between batches."""
        update = self.watcher.accept(reading, datetime.fromtimestamp(self.clock(), timezone.utc))
        self.status.plan_errors = self.watcher.errors
        self.status.plan_refused = dict(self.watcher.refused)
        if reading.changed and reading.plans is not None:
            self.log(
                f"collector: plan {self.settings.plan}: read, verified and parsed in "
                f"{reading.seconds:.1f} s (off the receive path): versions "
                f"{', '.join(str(plan.version) for plan in reading.plans)}"
            )
        if update is not None:
            self._switch(update)
        error, self.watcher.last_error = self.watcher.last_error, None
        if error and error != self._logged_error:  # the same refusal again: counted, not logged
            self.warn(f"collector: {error}; keeping the last good plan")
        if reading.plans is not None or error:
            self._logged_error = error

    def _plan_due(self, now: float) -> None:
        update = self.watcher.due(datetime.fromtimestamp(now, timezone.utc))
        if update is not None:
            self._switch(update)

    def _switch(self, update: Update) -> None:
        new, began = update.attribution, time.monotonic()
        self.estimator.set_attribution(new, update.at.timestamp() if update.at else None)
        self.admission.plan(new.server_of_agent)
        if self.reexporter is not None:
            self.reexporter.attribution = new
        sampling = sorted(s.name for s in new.servers.values() if s.sample_probability)
        if sampling and self._ipfix_socket is None and self._ipfix_warned != new.plan_id:
            self._ipfix_warned = new.plan_id
            self.warn(
                f"collector: WARNING: {', '.join(sampling[:5])}"
                f"{' ...' if len(sampling) > 5 else ''} take their local share with OVS's "
                "sample action, whose IPFIX this collector does not receive (no --ipfix): "
                "their local streams will be missing"
            )
        at = f" from its not_before {update.at:%H:%M:%S.%f}" if update.at else ""
        # an expired plan is a state to act on (the controller stopped refreshing it)
        (self.warn if self.watcher.safe and new.plan_id is not None else self.log)(
            "collector: no plan yet: attributing by the inventory's agent addresses "
            f"({len(new.servers)} servers, local sampling at their own rates)"
            if new.plan_id is None
            else f"collector: plan version {new.plan_version} ({new.plan_id[:12]}){at}"
            f"{' expired: local sampling only' if self.watcher.safe else ''}"
            f" (switched in {time.monotonic() - began:.1f} s)"
        )

    def _restore_templates(self) -> None:
        """The IPFIX templates the last run saved, before anything is received; a file
        refused is logged and the daemon starts without it, as on a first start."""
        if self.settings.state_dir is None:
            return
        try:
            restored = ipfixtemplates.load(
                self.settings.state_dir, self.estimator.templates, self.clock()
            )
        except CollectorError as exc:
            self.log(f"collector: {exc}; starting without the saved IPFIX templates")
            return
        self._templates_written = self.estimator.templates.changes
        if restored:
            self.log(
                f"collector: {restored} IPFIX template(s) restored from "
                f"{ipfixtemplates.path_in(self.settings.state_dir)}"
            )

    def export(self, now: float) -> Snapshot:
        """The normal path: a snapshot of the estimator, handed to the writer thread."""
        self.exports += 1
        snapshot = self.estimator.snapshot(now).model_copy(
            update={"started": self.started, "serial": self.exports}
        )
        self.snapshot = snapshot
        self.status.datagrams, self.status.samples = (
            self.estimator.datagrams,
            self.estimator.samples,
        )
        if self._receiver is not None:
            self.status.receive_errors = self._receiver.errors
            self.status.queue_overflow = self._receiver.overflow
        self.status.ipfix_messages = self.estimator.ipfix_messages
        self.status.ipfix_records = self.estimator.ipfix_records
        self.status.guard_reports = self.estimator.guards.accepted
        if self._ipfix_receiver is not None:
            self.status.ipfix_receive_errors = self._ipfix_receiver.errors
            self.status.ipfix_queue_overflow = self._ipfix_receiver.overflow
        if self.reexporter is not None:
            self.status.reexported_samples = self.reexporter.sent_samples
            self.status.reexport_errors = self.reexporter.errors
        templates = None
        changes = self.estimator.templates.changes
        if (
            self.settings.state_dir is not None
            and self.settings.ipfix is not None
            and changes != self._templates_written
        ):
            templates = (changes, ipfixtemplates.encode(self.estimator.templates))
        self.writer.submit((snapshot, now, templates))
        return snapshot

    def _write(self, item: tuple[Snapshot, float, tuple[int, bytes] | None]) -> None:
        """On the writer thread: JSON for ``/snapshot`` and the binary columnar form for
        ``/snapshot.bin`` (``snapshotbin``: what the controller reads at scale), events, the
        state files, kernel drops."""
        snapshot, now, templates = item
        text = snapshot.to_json()
        self._snapshot_json = text.encode()
        self._signed = (
            self._snapshot_json,
            self._signer.sign(self._snapshot_json) if self._signer else None,
        )
        binary = snapshotbin.encode(snapshot)
        self._signed_binary = (binary, self._signer.sign(binary) if self._signer else None)
        if self._events is not None:
            events = self.detector.update_all(dict(snapshot_values(snapshot)), now)
            self.status.events += write_events(events, self._events)
        if self.settings.state_dir is not None:
            try:
                write_atomic(
                    Path(self.settings.state_dir) / SNAPSHOT_FILE,
                    lambda stream: stream.write(text),
                    parents=True,
                )
                write_bytes_atomic(Path(self.settings.state_dir) / snapshotbin.BINARY_FILE, binary)
                if templates is not None:
                    ipfixtemplates.save(templates[1], self.settings.state_dir)
                    self._templates_written = templates[0]
            except (OSError, CosampleError) as exc:
                self.status.state_write_errors += 1
                if self.status.state_write_errors == 1 or self.status.state_write_errors % 100 == 0:
                    self.log(
                        f"collector: {exc} ({self.status.state_write_errors} state writes "
                        "failed so far; still receiving)"
                    )
        if self._socket is not None:
            drops = kernel_drops(self._socket)
            if drops is not None:
                self.status.kernel_drops = drops
        if self._ipfix_socket is not None:
            drops = kernel_drops(self._ipfix_socket)
            if drops is not None:
                self.status.ipfix_kernel_drops = drops

    def snapshot_json(self) -> bytes:
        return self._snapshot_json

    def signed_snapshot(self, binary: bool = False) -> tuple[bytes, str | None] | None:
        """The snapshot's bytes and their signature (None: no ``snapshot_key``), one pair;
        ``binary``: the columnar binary form's (``snapshotbin``); None before the first export
        is rendered."""
        return self._signed_binary if binary else self._signed

    def status_json(self) -> bytes:
        """The daemon's counters without the per-server rows: cheap at any fleet size (a
        scrape of ``/metrics`` renders every server)."""
        status, snapshot, running = self.status, self.snapshot, self.estimator.attribution
        return json.dumps(
            {
                "time": snapshot.time if snapshot is not None else None,  # of the newest snapshot
                "plan_version": running.plan_version if running is not None else None,  # in force
                "snapshot_plan_version": snapshot.plan.version
                if snapshot is not None and snapshot.plan
                else None,
                "datagrams": self.estimator.datagrams,
                "samples": self.estimator.samples,  # live
                "ipfix_messages": self.estimator.ipfix_messages,
                "ipfix_records": self.estimator.ipfix_records,
                "kernel_receive_drops": status.kernel_drops,
                "plan_errors": status.plan_errors,
                "receive_queue_overflow": self._receiver.overflow if self._receiver else 0,
                "receive_queued_bytes": self._receiver.queued_bytes if self._receiver else 0,
                "dropped": dict(snapshot.dropped) if snapshot is not None else {},
            },
            default=str,
        ).encode()


def unsigned_warning(settings: Settings) -> str | None:
    """The loud warning for ``--insecure-unsigned`` (worse over plain http), or None."""
    if settings.public_key is not None or not settings.insecure_unsigned:
        return None
    over = (
        " over plain http: anyone on the path"
        if settings.plan.startswith("http://")
        else ": anyone who can write the plan location"
    )
    return (
        f"INSECURE: plans are accepted unsigned (--insecure-unsigned){over} decides how "
        "every server's samples are weighed, and the controller plans from that; set "
        "--public-key"
    )


def _receive_buffer(sock: socket.socket, size: int) -> None:
    """Enlarge the receive buffer (past the sysctl limit as root): bursts outlast a busy CPU."""
    option = getattr(socket, "SO_RCVBUFFORCE", 33) if os.geteuid() == 0 else socket.SO_RCVBUF
    try:
        sock.setsockopt(socket.SOL_SOCKET, option, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
