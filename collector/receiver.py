"""Move datagrams from the kernel into a queue, stamped with their arrival, apart from the estimator.

The estimator's thread does everything else (admission, the fast path, snapshots, plan
switches), and a snapshot of a 10^5-server fleet takes seconds of CPU: were it also what reads
the socket, a receive buffer of megabytes would overflow during each snapshot. The socket is
read by a process of its own (``relay.py``: no other thread of this process, and no C call
holding the interpreter lock, can keep it from reading); this thread reads the relay's pipe and
appends ``(data, source address, arrival time)`` to a queue the estimator's thread drains. If
the relay cannot start or dies, this thread reads the socket itself (logged). The queue is
bounded in bytes (``max_bytes``); datagrams beyond it, here or in the relay, are counted in
``overflow`` and dropped, as the kernel would.
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from cosample.collector.relay import FRAME, OVERFLOW

#: Datagrams read per wake-up before looking at the stop flag again.
BATCH = 4096
#: Bytes of datagrams held for the estimator's thread (seconds of traffic at any usual rate).
MAX_QUEUED_BYTES = 256 << 20


class Receiver:
    def __init__(
        self,
        sock: socket.socket,
        clock: Callable[[], float] = time.time,
        max_bytes: int = MAX_QUEUED_BYTES,
        *,
        relay: bool = True,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.socket, self.clock, self.max_bytes, self.log = sock, clock, max_bytes, log
        self.relay: subprocess.Popen | None = None
        self._pipe: int | None = None
        if relay:
            self._spawn()
        self.queue: deque[tuple[bytes, str, float]] = deque()
        self.queued_bytes = 0
        self.overflow = 0  # datagrams dropped because the queue was full
        self.errors = 0  # receive errors other than "nothing to read"
        self.ready = threading.Event()  # set when something was queued
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards queued_bytes
        self._thread = threading.Thread(target=self._run, name="collector-receive", daemon=True)

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self.relay is not None:
            if self.relay.poll() is None:
                self.relay.terminate()
            try:
                self.relay.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait()
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None

    def _spawn(self) -> None:
        read, write = os.pipe()
        try:
            fcntl.fcntl(read, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except OSError:
            pass  # the default pipe size: the relay holds the rest
        try:
            self.relay = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cosample.collector.relay",
                    str(self.socket.fileno()),
                    str(write),
                ],
                pass_fds=(self.socket.fileno(), write),
                stdin=subprocess.DEVNULL,
            )
            self._pipe = read
        except OSError as exc:
            os.close(read)
            self.log(
                f"collector: cannot start the receive process ({exc.strerror}); "
                "receiving in this process"
            )
        finally:
            os.close(write)

    def take(self, limit: int = BATCH) -> list[tuple[bytes, str, float]]:
        """Up to ``limit`` queued datagrams, oldest first (never blocks)."""
        out, size, queue = [], 0, self.queue
        for _ in range(limit):
            try:
                item = queue.popleft()
            except IndexError:
                break
            out.append(item)
            size += len(item[0])
        if size:
            with self._lock:
                self.queued_bytes -= size
        if not queue:
            self.ready.clear()
            if queue:  # appended between the check and the clear
                self.ready.set()
        return out

    def _run(self) -> None:
        if self._pipe is not None:
            self._run_relay()
        if not self._stop.is_set():
            self._run_socket()

    def _run_relay(self) -> None:
        """Frames from the relay's pipe into the queue, until it ends."""
        pipe, append, buffer = self._pipe, self.queue.append, b""
        assert pipe is not None  # (the relay's, set before this thread starts)
        unpack, head = FRAME.unpack_from, FRAME.size
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([pipe], [], [], 0.2)
                if not readable:
                    continue
                chunk = os.read(pipe, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                code = self.relay.poll() if self.relay is not None else None
                if not self._stop.is_set():
                    self.log(
                        f"collector: the receive process ended (exit {code}); receiving "
                        "in this process"
                    )
                return
            buffer = buffer + chunk if buffer else chunk
            offset, size, added, end = 0, 0, 0, len(buffer)
            while end - offset >= head:
                length, when, source_length = unpack(buffer, offset)
                start = offset + head
                if length == OVERFLOW:  # the relay's count of datagrams it had no room for
                    self.overflow += int(when)
                    offset = start
                    continue
                stop = start + source_length + length
                if stop > end:
                    break
                if self.queued_bytes + size + length > self.max_bytes:
                    self.overflow += 1
                else:
                    append(
                        (
                            buffer[start + source_length : stop],
                            buffer[start : start + source_length].decode("ascii"),
                            when,
                        )
                    )
                    size += length
                    added += 1
                offset = stop
            buffer = buffer[offset:]
            if added:
                with self._lock:
                    self.queued_bytes += size
                self.ready.set()

    def _run_socket(self) -> None:
        sock, append, clock = self.socket, self.queue.append, self.clock
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], 0.2)
            except (OSError, ValueError):  # closed under us: the daemon is stopping
                return
            if not readable:
                continue
            now, size, added = clock(), 0, 0
            for _ in range(BATCH):
                try:
                    data, source = sock.recvfrom(65535)
                except BlockingIOError:
                    break
                except OSError:
                    self.errors += 1
                    break
                if self.queued_bytes + size + len(data) > self.max_bytes:
                    self.overflow += 1
                    continue
                append((data, source[0], now))
                size += len(data)
                added += 1
            if added:
                with self._lock:
                    self.queued_bytes += size
                self.ready.set()
