"""The collector's HTTP server, bounded: a fixed number of connections, idle ones closed, and
running out of file descriptors sheds load instead of exiting or spinning.

``http.server.ThreadingHTTPServer`` as it comes starts a thread per connection and waits on an
idle client forever: 1,100 idle connections at the usual 1,024-descriptor limit made the
daemon exit (its state file could not be written) or spin two cores (``accept`` failing with
``EMFILE`` while the listening socket stays readable), with HTTP dead. Here:

- at most ``max_connections`` are served at once; one more is accepted and closed at once
  (``refused["busy"]``);
- a connection that sends nothing for ``idle_timeout_s`` (per read or write) is closed;
- ``accept`` failing for want of descriptors (``EMFILE``, ``ENFILE``) closes a descriptor held
  in reserve, accepts and closes the waiting connection, and takes the reserve back
  (``refused["descriptors"]``); when even that fails it pauses the accept loop for a moment, so
  the loop never spins.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cosample.collector.httplimits import IDLE_TIMEOUT_S, MAX_CONNECTIONS

_STARVED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_PAUSE_S = 0.1


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
    ) -> None:
        handler = type(handler.__name__, (handler,), {"timeout": idle_timeout_s})
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.refused: Counter[str] = Counter()
        self.active = 0
        self._lock = threading.Lock()
        self._reserve: int | None = _open_reserve()

    def get_request(self):
        try:
            return self.socket.accept()
        except OSError as exc:
            if exc.errno in _STARVED:
                self.refused["descriptors"] += 1
                self._shed()
            raise  # socketserver skips this round

    def _shed(self) -> None:
        """Out of descriptors: refuse the waiting connection with the one held in reserve."""
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
            try:
                connection, _ = self.socket.accept()
                connection.close()
            except OSError:
                pass
            self._reserve = _open_reserve()
        if self._reserve is None:
            time.sleep(_PAUSE_S)  # nothing to close with: wait instead of spinning

    def process_request(self, request, client_address) -> None:
        with self._lock:
            busy = self.active >= self.max_connections
            if not busy:
                self.active += 1
        if busy:
            self.refused["busy"] += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            self.active -= 1

    def handle_error(self, request, client_address) -> None:
        """A connection that failed (client gone, no thread to serve it): counted, not printed."""
        self.refused["error"] += 1

    def server_close(self) -> None:
        super().server_close()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None


def _open_reserve() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None
