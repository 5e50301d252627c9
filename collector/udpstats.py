"""Datagrams the kernel dropped for a socket: the ``drops`` column of ``/proc/net/udp{,6}``.

A receive buffer that overflows (the daemon busy, a burst) loses datagrams before the collector
sees them, and sequence gaps only show the part that was sent by agents the plan names. The
kernel counts every datagram it could not queue on the socket; the row is found by the socket's
inode, in the network namespace of the process. Read once per export, off the receive path.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

_TABLES = (Path("/proc/net/udp"), Path("/proc/net/udp6"))


def kernel_drops(sock: socket.socket, tables: tuple[Path, ...] = _TABLES) -> int | None:
    """Datagrams the kernel dropped on ``sock`` since it was opened; None if not found (not
    Linux, the socket closed)."""
    try:
        inode = str(os.fstat(sock.fileno()).st_ino)
    except (OSError, ValueError):
        return None
    for table in tables:
        found = drops_of(table, inode)
        if found is not None:
            return found
    return None


def drops_of(table: Path, inode: str) -> int | None:
    """The ``drops`` field (the last) of the row whose ``inode`` field (the tenth) matches."""
    try:
        with table.open("r", encoding="ascii", errors="replace") as lines:
            next(lines, None)  # header
            for line in lines:
                fields = line.split()
                if len(fields) >= 13 and fields[9] == inode:
                    return int(fields[-1]) if fields[-1].isdigit() else None
    except OSError:
        return None
    return None
