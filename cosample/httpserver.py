"""The daemons' one HTTP server (collector, controller, analyser): heads read by one loop, answers
written by threads, a deadline for each phase of a connection, and one rule at the limit.

``http.server.ThreadingHTTPServer`` as it comes gives every connection a thread for as long as
the client likes: idle connections exhaust descriptors (its accept loop then spins on a
listening socket that stays readable), and a client sending one byte every few seconds holds
its thread forever, because socket timeouts count silence, not time. 64 such clients made the
collector refuse every ``/snapshot`` (issue 41). Here (the numbers are ``httplimits.Limits``):

- one loop (``serve_forever``, ``selectors``) accepts connections and reads every request's head
  (request line and headers, at most ``head_bytes``: 431 beyond); a connection costs a
  descriptor and its head's bytes, no thread, until its head is complete. Then a thread runs
  the daemon's ``BaseHTTPRequestHandler`` on it and writes the answer; a connection kept alive
  comes back to the loop for its next request. Requests with a body are answered 413: no
  daemon takes one, so nothing a client sends is kept beyond its head;
- a connection is *idle* (no byte of a request yet), reading its *head*, or being *answered*,
  and each phase has a deadline counted from its start: the loop shuts down a connection whose
  phase has lasted too long, however it trickles (``evicted``: ``idle``, or ``slow`` for a head
  or an answer);
- at most ``max_connections`` are open; one more shuts down the connection that has waited
  longest without a whole request (idle since the oldest moment, or reading its head since the
  oldest: a whole request takes a client well under a millisecond, so the stalled sender is the
  one that goes), else it is closed unserved (``refused["busy"]``). Connections being answered
  are never shut to make room;
- ``accept`` failing for want of descriptors (``EMFILE``, ``ENFILE``) uses a descriptor held in
  reserve to accept and close the waiting connection (``refused["descriptors"]``), so the loop
  never spins; a connection whose answer failed is ``refused["error"]``.

``ServerMetrics`` exposes the counts with prometheus_client under a daemon's prefix.
"""

from __future__ import annotations

import errno
import io
import os
import queue
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cosample.httplimits import Limits

IDLE, HEAD, ANSWER = "idle", "head", "answer"
#: The longest the loop waits before it looks at the deadlines again.
POLL_S = 0.25
#: Connections accepted per turn of the loop (a flood of them does not starve the reads).
ACCEPTS_PER_TURN = 16
#: An answer is written in blocks this large, each within the idle timeout.
SEND_BYTES = 1 << 20
_STARVED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)


class Counts:
    """What the server did to stay within its limits (monotonic, but ``open``)."""

    def __init__(self) -> None:
        self.open = 0
        self.evicted: Counter[str] = Counter({"idle": 0, "slow": 0})
        self.refused: Counter[str] = Counter({"busy": 0, "descriptors": 0, "error": 0})
        self.descriptor_exhaustion = 0


class _Connection:
    __slots__ = ("sock", "address", "phase", "since", "buffer")

    def __init__(self, sock: socket.socket, address: Any) -> None:
        self.sock, self.address, self.buffer = sock, address, bytearray()
        self.enter(IDLE)

    def enter(self, phase: str) -> None:
        self.phase, self.since = phase, time.monotonic()


class BoundedHTTPServer:
    """``http.server``'s handlers served within ``limits``; ``serve_forever`` on a thread of its
    own, ``shutdown`` from another, then ``server_close``, as with ``socketserver``."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        limits: Limits = Limits(),
    ) -> None:
        self.limits, self.counts = limits, Counts()
        self.handler = _bounded(handler)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ)
        self._wake, self._waker = socket.socketpair()
        self._wake.setblocking(False)
        self._waker.setblocking(False)
        self._selector.register(self._wake, selectors.EVENT_READ, self._wake)
        self._answered: queue.SimpleQueue[tuple[_Connection, bool, bool]] = queue.SimpleQueue()
        self._open: dict[socket.socket, _Connection] = {}  # in accept order
        self._reserve: int | None = _spare()
        self._stop, self._stopped = threading.Event(), threading.Event()
        self._stopped.set()

    # the loop ------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._stopped.clear()
        try:
            while not self._stop.is_set():
                for key, _ in self._selector.select(POLL_S):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.data is self._wake:
                        _drain(self._wake)
                    else:
                        self._read(key.data)
                self._take_back()
                self._sweep()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop the loop and wait for it (connections stay open until ``server_close``)."""
        self._stop.set()
        self._poke()
        self._stopped.wait()

    def server_close(self) -> None:
        for connection in list(self._open.values()):
            _close(connection.sock)
        self._open.clear()
        self._selector.close()
        for sock in (self.socket, self._wake, self._waker):
            sock.close()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in _STARVED:
                    self.counts.descriptor_exhaustion += 1
                    self._shed()
                return
            if len(self._open) >= self.limits.max_connections and not self._make_room():
                self.counts.refused["busy"] += 1
                sock.close()
                continue
            sock.setblocking(False)
            connection = _Connection(sock, address)
            self._open[sock] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)
            self.counts.open = len(self._open)

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client left
            self._drop(connection)
            return
        if connection.phase == IDLE:
            connection.enter(HEAD)
        connection.buffer += data
        self._parse(connection)

    def _parse(self, connection: _Connection) -> None:
        """Hand a complete head to a thread, refuse one too large, or wait for more."""
        buffer = connection.buffer
        ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (at := buffer.find(mark)) >= 0]
        end = min(ends) if ends else None
        if (end or len(buffer)) > self.limits.head_bytes:
            try:
                connection.sock.send(_TOO_LARGE)
            except OSError:
                pass
            self._drop(connection)
            return
        if end is None:
            return
        head = bytes(buffer[:end])
        del buffer[:end]
        self._selector.unregister(connection.sock)
        connection.enter(ANSWER)
        threading.Thread(
            target=self._answer, args=(connection, head), name="http-answer", daemon=True
        ).start()

    def _answer(self, connection: _Connection, head: bytes) -> None:
        """On a thread of its own: the handler answers the request in ``head``."""
        sock, keep, failed = connection.sock, False, False
        try:
            sock.setblocking(True)
            sock.settimeout(self.limits.idle_s)  # every write: no more silence than this
            keep = not self.handler(sock, connection.address, self, head).close_connection
        except Exception:  # noqa: BLE001 - a failed answer closes its connection, counted
            failed = True
        self._answered.put((connection, keep, failed))
        self._poke()

    def _take_back(self) -> None:
        """Connections whose answer is written: back to the loop for their next request."""
        while True:
            try:
                connection, keep, failed = self._answered.get_nowait()
            except queue.Empty:
                return
            self.counts.refused["error"] += failed
            if self._open.get(connection.sock) is not connection:  # shut meanwhile (deadline)
                _close(connection.sock)
                continue
            if not keep:
                self._drop(connection)
                continue
            connection.sock.setblocking(False)
            connection.enter(HEAD if connection.buffer else IDLE)
            self._selector.register(connection.sock, selectors.EVENT_READ, connection)
            if connection.buffer:  # a pipelined request already read
                self._parse(connection)

    def _sweep(self) -> None:
        now = time.monotonic()
        limits = self.limits
        for connection in [
            c for c in self._open.values() if now - c.since > limits.deadline(c.phase)
        ]:
            self._evict(connection)

    def _make_room(self) -> bool:
        """Shut down the connection that has waited longest without a whole request (idle, or
        reading its head); False when every connection is being answered."""
        waiting = [c for c in self._open.values() if c.phase != ANSWER]
        if not waiting:
            return False
        self._evict(min(waiting, key=lambda c: c.since))
        return True

    def _evict(self, connection: _Connection) -> None:
        self.counts.evicted["idle" if connection.phase == IDLE else "slow"] += 1
        if connection.phase == ANSWER:  # its thread wakes with an error and hands it back
            del self._open[connection.sock]
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.counts.open = len(self._open)
        else:
            self._drop(connection)

    def _drop(self, connection: _Connection) -> None:
        """Close a connection the loop holds (not one being answered)."""
        try:
            self._selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        self._open.pop(connection.sock, None)
        self.counts.open = len(self._open)
        _close(connection.sock)

    def _poke(self) -> None:
        try:
            self._waker.send(b"\0")
        except OSError:  # full: the loop has wake-ups pending anyway; closed: it stopped
            pass

    def _shed(self) -> None:
        """Out of descriptors: accept one waiting connection with the reserve and close it, so
        the listening socket stops being readable for it; pause a moment if even that fails."""
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
            try:
                sock, _ = self.socket.accept()
                sock.close()
                self.counts.refused["descriptors"] += 1
            except OSError:
                pass
            self._reserve = _spare()
        if self._reserve is None:
            time.sleep(0.05)


class _Writer(io.BufferedIOBase):
    """The answer's stream: each write sent whole, nothing buffered or copied, in blocks of
    ``SEND_BYTES`` (``sendall``'s timeout covers one call: a block, not a 200 MB answer)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), SEND_BYTES):
            self._sock.sendall(view[start : start + SEND_BYTES])
        return len(view)


def _bounded(
    handler: type[BaseHTTPRequestHandler],
) -> Callable[[socket.socket, Any, Any, bytes], BaseHTTPRequestHandler]:
    """``handler`` answering one request whose head the loop has read, refusing bodies."""

    class Bounded(handler):  # type: ignore[valid-type, misc]
        def __init__(self, sock: socket.socket, address: Any, server: Any, head: bytes) -> None:
            self._head = head
            super().__init__(sock, address, server)

        def setup(self) -> None:
            self.connection = self.request
            self.rfile = io.BytesIO(self._head)
            self.wfile = _Writer(self.request)

        def handle(self) -> None:
            self.close_connection = True
            self.handle_one_request()

        def finish(self) -> None:
            pass  # the server keeps or closes the socket

        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            if self.headers.get("Content-Length", "0").strip() != "0" or self.headers.get(
                "Transfer-Encoding"
            ):
                self.close_connection = True
                self.send_error(413, "this server takes no request bodies")
                return False
            return True

    Bounded.__name__ = handler.__name__
    return Bounded


def send_body(
    request: BaseHTTPRequestHandler,
    body: bytes,
    kind: str,
    headers: dict[str, str] | None = None,
) -> None:
    """A 200 answer of ``body`` (type ``kind``) with ``headers`` besides (a signature)."""
    request.send_response(200)
    request.send_header("Content-Type", kind)
    request.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        request.send_header(name, value)
    request.end_headers()
    request.wfile.write(body)


class ServerMetrics:
    """A prometheus_client collector of a server's counts as ``PREFIX_http_*``: connections
    open, evicted by reason (idle, slow), refused by reason (busy, descriptors, error), and the
    accepts that found no descriptor. ``server()``: the server, or None before it starts."""

    def __init__(self, prefix: str, server: Callable[[], BoundedHTTPServer | None]) -> None:
        self.prefix, self.server = prefix, server

    def collect(self) -> Iterator[Metric]:
        server = self.server()
        counts = server.counts if server is not None else Counts()
        name = f"{self.prefix}_http"
        yield GaugeMetricFamily(f"{name}_connections", "HTTP connections open", value=counts.open)
        for family, reasons, text in (
            (
                "evicted",
                counts.evicted,
                "HTTP connections shut down: idle (no request within the idle timeout, or shut "
                "to make room), slow (a head or an answer past its deadline, or a head shut to "
                "make room)",
            ),
            (
                "refused",
                counts.refused,
                "HTTP connections closed unserved: busy (at the connection limit, every one "
                "being answered), descriptors (none left), error (the answer failed)",
            ),
        ):
            metric = CounterMetricFamily(f"{name}_{family}", text, labels=["reason"])
            for reason, value in sorted(reasons.items()):
                metric.add_metric([reason], value)
            yield metric
        yield CounterMetricFamily(
            f"{name}_descriptor_exhaustion",
            "accepts that failed for want of file descriptors",
            value=counts.descriptor_exhaustion,
        )


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None
