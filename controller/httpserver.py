"""A threaded HTTP server that survives descriptor exhaustion and idle or slow clients.

``http.server.ThreadingHTTPServer`` accepts every connection and keeps it for as long as the
client likes: 1,100 idle connections at the usual limit of 1,024 descriptors leave it unable
to accept (``EMFILE``), and its loop then spins on the listening socket that stays readable.
Here:

- at most ``max_connections`` are open at once; when one more arrives, the oldest *idle*
  connection (waiting for a request line) is shut down for it, else the oldest one whose
  request has run longer than ``request_deadline_s``, else the newcomer is closed at once;
- a connection idle for ``idle_timeout_s`` (no byte of a new request) is closed;
- when ``accept`` fails for want of descriptors, a descriptor kept in reserve is released to
  accept and close the waiting connection, so the backlog drains instead of spinning the loop;
- every one of these is counted (``Counts``, read by the metrics).
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_CONNECTIONS, IDLE_TIMEOUT_S, REQUEST_DEADLINE_S = 256, 10.0, 60.0


@dataclass
class Counts:
    """What the server had to do to stay alive (monotonic, except ``open``)."""

    open: int = 0
    evicted: dict[str, int] = field(default_factory=lambda: {"idle": 0, "slow": 0})
    refused: int = 0
    descriptor_exhaustion: int = 0


class _Connection:
    __slots__ = ("sock", "busy_since")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.busy_since = sock, None  # None: idle, waiting for a request line


class BoundedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        request_deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        self.max_connections, self.request_deadline_s = max_connections, request_deadline_s
        self.counts = Counts()
        self._lock = threading.Lock()
        self._open: OrderedDict[int, _Connection] = OrderedDict()  # by accept order
        self._reserve: int | None = _spare()
        handler_type = _bounded(handler, idle_timeout_s)
        super().__init__(address, handler_type)

    # socketserver hooks --------------------------------------------------------------------
    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self.counts.descriptor_exhaustion += 1
                self._shed()
            raise

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self._lock:
            if len(self._open) >= self.max_connections and not self._evict():
                self.counts.refused += 1
                return False  # socketserver closes it
            self._open[id(request)] = _Connection(request)
            self.counts.open = len(self._open)
        return True

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            if self._open.pop(id(request), None) is not None:
                self.counts.open = len(self._open)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None

    # what the handler reports --------------------------------------------------------------
    def mark(self, request: Any, busy: bool) -> None:
        with self._lock:
            connection = self._open.get(id(request))
            if connection is not None:
                connection.busy_since = time.monotonic() if busy else None

    # pieces -------------------------------------------------------------------------------
    def _evict(self) -> bool:
        """Shut down the oldest idle connection, else the oldest overdue one (lock held)."""
        now = time.monotonic()
        victim = next((c for c in self._open.values() if c.busy_since is None), None)
        kind = "idle"
        if victim is None:
            victim = next(
                (c for c in self._open.values() if now - c.busy_since > self.request_deadline_s),
                None,
            )
            kind = "slow"
        if victim is None:
            return False
        try:
            victim.sock.shutdown(socket.SHUT_RDWR)  # its thread wakes, ends, and closes it
        except OSError:
            pass
        del self._open[id(victim.sock)]  # no longer counts against the limit
        self.counts.evicted[kind] += 1
        return True

    def _shed(self) -> None:
        """Out of descriptors: use the reserve to accept one waiting connection and close it,
        so the listening socket stops being readable for it; pause a moment if even that fails."""
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
            try:
                sock, _ = self.socket.accept()
                sock.close()
                self.counts.refused += 1
            except OSError:
                pass
            self._reserve = _spare()
        if self._reserve is None:
            time.sleep(0.05)


def _spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


def _bounded(
    handler: type[BaseHTTPRequestHandler], idle_timeout_s: float
) -> type[BaseHTTPRequestHandler]:
    """``handler`` that tells the server when it is idle and gives up on silent clients."""

    class Bounded(handler):  # type: ignore[valid-type, misc]
        timeout = idle_timeout_s  # every read of the socket (StreamRequestHandler)

        def parse_request(self) -> bool:
            self.server.mark(self.request, busy=True)
            return super().parse_request()

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (TimeoutError, ConnectionError):
                self.close_connection = True
            self.server.mark(self.request, busy=False)

    Bounded.__name__ = handler.__name__
    return Bounded
