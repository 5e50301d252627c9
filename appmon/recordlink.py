"""The compact records' transport: a UDP sender on the monitored host, a receiver on the
analysis host (format and bounds: ``records``).

The sender never blocks the capture loop: a non-blocking socket, and a datagram the kernel will
not take is dropped and counted (``records_send_errors``). The receiver takes a datagram only
from the one sender the plan names (its address, ``records_from``) and only under the pair's key
(``records.authentic``), once (``records.SequenceTracker``); it feeds the records into the
analyser's windows as if their packets had been seen here. Its own clock closes the windows: a
record dated after the current window waits (``pending``, bounded) until that window closed, a
record dated more than ``MAX_AHEAD_S`` after the receiver's clock is refused with its datagram,
one whose window has closed is refused alone (``records_late``). Every refusal is counted by
name, never raised.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import time
from collections import Counter

from cosample.appmon.errors import AppmonError
from cosample.appmon.records import (
    DEFAULT_RATE,
    INSECURE_KEY,
    REQUEST,
    RecordBuffer,
    SequenceTracker,
    authentic,
    parse,
)
from cosample.appmon.windows import Windows
from cosample.dataplane import recordkeys

#: Datagrams read per call of ``RecordReceiver.receive`` before the loop looks at its clock.
BATCH = 256
#: A record dated more than this after the receiver's clock is refused (with its datagram):
#: hosts' clocks agree to milliseconds (NTP); a sender's records are at most a tick old.
MAX_AHEAD_S = 2.0
#: Records dated after the current window, waiting for the receiver's clock to close it (the
#: current window ends ``RECORD_GRACE_S`` behind the clock, so with 1-s windows every fresh
#: record waits about a second): four seconds of one sender at its bound, ``DEFAULT_RATE``
#: (``records_pending_full`` beyond; about 120 bytes each, 24 MB at most).
MAX_PENDING = 4 * DEFAULT_RATE


def parse_endpoint(text: str, option: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` with a literal address; an error naming ``option``."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = str(ipaddress.ip_address(host))
        number = int(port)
    except ValueError:
        raise AppmonError(
            f"{option} {text!r}: expected ADDRESS:PORT with a literal IPv4 or [IPv6] address"
        ) from None
    if not 0 < number < 65536:
        raise AppmonError(f"{option} {text!r}: port must be 1-65535")
    return address, number


def _udp(address: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return socket.socket(family, socket.SOCK_DGRAM)


def read_key(path: str, option: str = "--record-key") -> bytes:
    """A key file (``recordkeys.read_key``); one ``AppmonError`` naming ``option`` otherwise."""
    try:
        return recordkeys.read_key(path, option)
    except ValueError as exc:
        raise AppmonError(str(exc)) from None


class RecordSender:
    """Sends a ``RecordBuffer``'s datagrams to the analysis host, from ``source`` (the address
    the receiver expects; None: the route's)."""

    def __init__(
        self,
        endpoint: tuple[str, int],
        counters: Counter,
        rate: float,
        key: bytes = INSECURE_KEY,
        source: str | None = None,
    ) -> None:
        self.endpoint, self.counters = endpoint, counters
        self.buffer = RecordBuffer(counters, rate=rate, key=key)
        self.socket = _udp(endpoint[0])
        if source is not None:
            try:
                self.socket.bind((source, 0))
            except OSError as exc:
                self.socket.close()
                raise AppmonError(
                    f"--send-records-from {source}: cannot send from it ({exc.strerror})"
                ) from None
        self.socket.setblocking(False)

    def send(self, partial: bool = False) -> None:
        """Send the finished datagrams (with ``partial``, the one being filled too)."""
        for datagram in self.buffer.take(partial):
            try:
                self.socket.sendto(datagram, self.endpoint)
            except OSError as exc:
                # ENOBUFS/EAGAIN: the queue is full; ECONNREFUSED: nobody listens (yet)
                if exc.errno not in (
                    errno.ENOBUFS,
                    errno.EAGAIN,
                    errno.ECONNREFUSED,
                    errno.ENETUNREACH,
                    errno.EHOSTUNREACH,
                ):
                    self.counters["records_send_errors_other"] += 1
                self.counters["records_send_errors"] += 1

    def close(self) -> None:
        self.socket.close()


class RecordReceiver:
    """A UDP socket on the analysis host; ``receive`` puts the records of ``sender`` (an
    address; None: any, ``--insecure-records``) signed with ``key`` into ``windows``, only those
    of services on ``ports`` when that is not empty; ``release`` (after each tick) the records
    that waited for their window."""

    def __init__(
        self,
        endpoint: tuple[str, int],
        counters: Counter,
        windows: Windows,
        receive_buffer: int = 8 << 20,
        *,
        key: bytes = INSECURE_KEY,
        sender: str | None = None,
        ports: frozenset[int] = frozenset(),
    ) -> None:
        self.counters, self.windows, self.key, self.ports = counters, windows, key, ports
        self.sender = _normal(sender) if sender is not None else None
        self.sequences: dict[str, SequenceTracker] = {}
        self.datagrams = 0  # taken
        self.pending: list[tuple] = []
        self.socket = _udp(endpoint[0])
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            self.socket.bind(endpoint)
        except OSError as exc:
            self.socket.close()
            raise AppmonError(
                f"--receive-records {endpoint[0]}:{endpoint[1]}: cannot listen ({exc.strerror})"
            ) from None
        self.socket.setblocking(False)

    def fileno(self) -> int:
        return self.socket.fileno()

    def receive(self) -> int:
        """Read what is queued (at most ``BATCH`` datagrams); the records taken."""
        taken, now = 0, time.time()
        for _ in range(BATCH):
            try:
                data, sender = self.socket.recvfrom(65535)
            except BlockingIOError:
                break
            taken += self.ingest(data, sender[0], now)
        return taken

    def ingest(self, data: bytes, sender: str, now: float) -> int:
        """One datagram from ``sender`` at the receiver's time ``now``; the records taken
        (counted in a window, or waiting for it)."""
        counters = self.counters
        source = _normal(sender)
        if self.sender is not None and source != self.sender:
            counters["record_datagrams_wrong_sender"] += 1
            return 0
        if not authentic(data, self.key):
            counters["record_datagrams_unauthenticated"] += 1
            return 0
        parsed = parse(data)
        if isinstance(parsed, str):
            counters[parsed] += 1
            return 0
        session, sequence, records = parsed
        if any(record[2] > now + MAX_AHEAD_S for record in records):
            counters["record_datagrams_ahead"] += 1
            return 0
        tracker = self.sequences.get(source)
        if tracker is None:
            if len(self.sequences) >= MAX_SENDERS:  # any sender (insecure): forget the oldest
                del self.sequences[next(iter(self.sequences))]
            tracker = self.sequences[source] = SequenceTracker(counters)
        refused = tracker.seen(session, sequence)
        if refused:
            counters[refused] += 1
            return 0
        self.datagrams += 1
        taken = 0
        for record in records:
            if self.ports and record[1][1] not in self.ports:
                counters["records_other_service"] += 1
            elif self._place(record):
                taken += 1
        return taken

    def _place(self, record: tuple) -> bool:
        windows = self.windows
        at = record[2]
        if windows.start is not None and at < windows.start:
            self.counters["records_late"] += 1  # its window closed: it counts in none
            return False
        if at >= windows.end:  # a later window's: only the receiver's clock opens it
            if len(self.pending) >= MAX_PENDING:
                self.counters["records_pending_full"] += 1
                return False
            self.pending.append(record)
            return True
        kind, service, _, status, service_time = record
        if kind == REQUEST:
            windows.request(service, at)
        else:
            windows.response(service, at, status, service_time)
        return True

    def release(self) -> None:
        """After the windows advanced: the waiting records whose window is now open."""
        waiting, self.pending = self.pending, []
        for record in waiting:
            self._place(record)

    def close(self) -> None:
        self.socket.close()


#: Senders whose sequences an insecure receiver (any sender) remembers.
MAX_SENDERS = 64


def _normal(address: str) -> str:
    """An address in one spelling (``::ffff:10.0.0.1`` is ``10.0.0.1``)."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    mapped = getattr(parsed, "ipv4_mapped", None)
    return str(mapped or parsed)
