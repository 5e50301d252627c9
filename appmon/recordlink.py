"""The compact records' transport: a UDP sender on the monitored host, a receiver on the
analysis host (format and bounds: ``records``).

The sender never blocks the capture loop: a non-blocking socket, and a datagram the kernel will
not take is dropped and counted (``records_send_errors``). The receiver feeds every record into
the analyser's windows as if its packets had been seen here; bad datagrams are counted, never
raised.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import time
from collections import Counter

from cosample.appmon.errors import AppmonError
from cosample.appmon.records import REQUEST, RecordBuffer, SequenceTracker, parse
from cosample.appmon.windows import Windows

#: Datagrams read per call of ``RecordReceiver.receive`` before the loop looks at its clock.
BATCH = 256
#: Records whose time is further than this from the receiver's clock are refused: one bad or
#: hostile datagram must not move the windows years ahead.
MAX_CLOCK_SKEW_S = 300.0


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


class RecordSender:
    """Sends a ``RecordBuffer``'s datagrams to the analysis host."""

    def __init__(self, endpoint: tuple[str, int], counters: Counter, rate: float) -> None:
        self.endpoint, self.counters = endpoint, counters
        self.buffer = RecordBuffer(counters, rate=rate)
        self.socket = _udp(endpoint[0])
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
    """A UDP socket on the analysis host; ``receive`` puts its records into ``windows``."""

    def __init__(
        self,
        endpoint: tuple[str, int],
        counters: Counter,
        windows: Windows,
        receive_buffer: int = 8 << 20,
    ) -> None:
        self.counters, self.windows = counters, windows
        self.sequences = SequenceTracker(counters)
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

    def ingest(self, data: bytes, sender: object, now: float) -> int:
        """One datagram from ``sender`` at the receiver's time ``now``; the records taken."""
        parsed = parse(data)
        if isinstance(parsed, str):
            self.counters[parsed] += 1
            return 0
        sequence, records = parsed
        if any(abs(record[2] - now) > MAX_CLOCK_SKEW_S for record in records):
            self.counters["record_datagrams_out_of_time"] += 1
            return 0
        self.sequences.seen(sender, sequence)
        windows = self.windows
        for kind, service, at, status, service_time in records:
            if windows.start is not None and at < windows.start:
                self.counters["records_late"] += 1  # its window closed: counted in this one
            if kind == REQUEST:
                windows.request(service, at)
            else:
                windows.response(service, at, status, service_time)
        return len(records)

    def close(self) -> None:
        self.socket.close()
