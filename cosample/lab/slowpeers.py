"""Peers that never finish, for the daemons' limits (issue 41, item 6): the tests of
``tests/collector/test_slow_peers.py``, ``tests/controller/test_slow_peers.py`` and
``research/slow_peers.py``.

``LoopbackServer``: the accepting part of a test server on loopback. ``Endless``: an HTTP server on loopback whose every answer is 200 with a body that never ends
(close-delimited or chunked), sent as fast as the reader takes it. ``Drippers``: ``count``
connections to a server, each sending one byte of a request head every ``every_s`` seconds and
reconnecting when shut. ``peak_mb``: a process's peak resident memory (``VmHWM``).
"""

from __future__ import annotations

import socket
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Self

BLOCK = b"x" * (1 << 20)


class LoopbackServer(ABC):
    """A TCP server on 127.0.0.1 answering each connection in a thread of its own
    (``_answer``); ``close`` stops accepting and wakes the waits on ``stop``."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        self.stop.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @abstractmethod
    def _answer(self, conn: socket.socket) -> None:
        """Answer one connection (each server says how)."""


class Endless(LoopbackServer):
    def __init__(self, chunked: bool = False) -> None:
        self.chunked = chunked
        self.served = 0
        super().__init__()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                conn.recv(65536)
                self.served += 1
                framing = b"Transfer-Encoding: chunked" if self.chunked else b"Connection: close"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + framing)
                conn.sendall(b"\r\n\r\n")
                chunk = b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n" if self.chunked else BLOCK
                while not self.stop.is_set():
                    conn.sendall(chunk)
            except OSError:
                return


class Drippers:
    """``count`` connections dripping a request head to ``address``, one byte each every
    ``every_s``; a connection the server shut is replaced at the next round."""

    HEAD = b"GET /snapshot HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 4096

    def __init__(self, address: tuple[str, int], count: int, every_s: float = 5.0) -> None:
        self.address, self.count, self.every_s = address, count, every_s
        self.replaced = 0
        self.socks = [self._connect() for _ in range(count)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        for sock in self.socks:
            if sock is not None:
                sock.close()

    def __enter__(self) -> "Drippers":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> socket.socket | None:
        try:
            return socket.create_connection(self.address, timeout=3)
        except OSError:
            return None

    def _drip(self) -> None:
        offset = 0
        while not self.stop.is_set():
            for k, sock in enumerate(self.socks):
                try:
                    if sock is None:
                        raise OSError
                    sock.send(self.HEAD[offset % len(self.HEAD) : offset % len(self.HEAD) + 1])
                except OSError:
                    if sock is not None:
                        sock.close()
                    self.socks[k] = self._connect()
                    self.replaced += 1
            offset += 1
            self.stop.wait(self.every_s)


def peak_mb(pid: int) -> float:
    """The process's peak resident set (``VmHWM`` in /proc), in MB (10^6 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise AssertionError(f"no VmHWM for process {pid}")
