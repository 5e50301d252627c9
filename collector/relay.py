"""Reception in a process of its own: the UDP socket is drained by a process that does nothing else.

Threads of one Python process share one interpreter lock, and a C call holds it for as long as
it runs: validating a 10^5-server plan (pydantic, in Rust) holds it for seconds, during which no
thread of the daemon reads the socket, and the kernel drops what its buffer cannot hold (3 % of
the datagrams at 20k samples/s in a measured run, ``research/collector_scale.py``). This
process (started by ``receiver.Receiver`` with the daemon's socket and a pipe, standard library
only) reads the socket and writes each datagram, framed with its arrival time and source
address, into the pipe; what the pipe cannot take waits in this process's memory (up to
``MAX_PENDING_BYTES``; beyond, datagrams are dropped and their number sent as a frame of their
own). It exits when the daemon closes the pipe or is gone.

Frame: ``!IdB`` (datagram length, arrival time in Unix seconds, source length), the source
address (ASCII), the datagram. A frame whose length is ``OVERFLOW`` (no datagram is that long)
carries, in its time field, a number of datagrams dropped for want of room, and nothing after
its head. An empty datagram is a frame of length 0 like any other (before, length 0 was the
overflow report: each empty datagram added its arrival time, in Unix seconds, to the overflow
counter; issue 41).
"""

from __future__ import annotations

import os
import select
import socket
import struct
import sys
import time

FRAME = struct.Struct("!IdB")
#: The length field of an overflow report (a UDP datagram is at most 65,535 bytes).
OVERFLOW = 0xFFFFFFFF
MAX_PENDING_BYTES = 256 << 20
BATCH = 4096
_WRITE = 1 << 20


def relay(udp_fd: int, out_fd: int, max_pending: int = MAX_PENDING_BYTES) -> int:
    sock = socket.socket(fileno=udp_fd)
    sock.setblocking(False)
    os.set_blocking(out_fd, False)
    parent, pending, dropped = os.getppid(), bytearray(), 0
    pack = FRAME.pack
    while True:
        try:
            readable, writable, _ = select.select([sock], [out_fd] if pending else [], [], 1.0)
        except InterruptedError:
            continue
        if readable:
            now = time.time()
            for _ in range(BATCH):
                try:
                    data, source = sock.recvfrom(65535)
                except BlockingIOError:
                    break
                except OSError:
                    break
                address = source[0].encode("ascii", "replace")[:255]
                if len(pending) + len(data) > max_pending:
                    dropped += 1
                    continue
                pending += pack(len(data), now, len(address))
                pending += address
                pending += data
        if dropped and len(pending) < max_pending:
            pending += pack(OVERFLOW, float(dropped), 0)
            dropped = 0
        if pending and (writable or readable):
            try:
                written = os.write(out_fd, pending[:_WRITE])
            except BlockingIOError:
                written = 0
            except (BrokenPipeError, OSError):
                return 0  # the daemon closed its end: stop
            del pending[:written]
        if not readable and not pending and os.getppid() != parent:
            return 0  # the daemon is gone


if __name__ == "__main__":
    raise SystemExit(relay(int(sys.argv[1]), int(sys.argv[2])))
