"""Frames from a classic pcap (``tcpdump -w``), and a writer of TCP frames for tests and benchmarks.

Micro- or nanosecond timestamps, either byte order; the link types ``decode`` reads. pcapng is
refused with a hint. A file that is not a pcap, or ends inside a record, is one ``AppmonError``
naming the file and the record.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from cosample.appmon.decode import LINK_ETHERNET, LINKS
from cosample.appmon.errors import AppmonError
from cosample.files import write_atomic
from cosample.pcapfile import MAGIC, PCAPNG_MAGIC, header_problem


def read_link(path: str | Path) -> int:
    """The capture's link type (checked: one ``decode`` reads)."""
    return _open(Path(path))[1]


def frames(path: str | Path) -> Iterator[tuple[float, bytes]]:
    """``(unix time, frame bytes as captured)`` in file order."""
    path = Path(path)
    handle, link, order, unit = _open(path)
    record = struct.Struct(order + "IIII")
    with handle:
        number = 0
        while True:
            header = handle.read(16)
            if not header:
                return
            number += 1
            if len(header) < 16:
                raise AppmonError(f"{path}: record {number}: truncated record header")
            seconds, fraction, included, _ = record.unpack(header)
            if included > 1 << 18:
                raise AppmonError(f"{path}: record {number}: implausible length {included}")
            frame = handle.read(included)
            if len(frame) < included:
                raise AppmonError(
                    f"{path}: record {number}: truncated ({len(frame)} of {included} bytes)"
                )
            yield seconds + fraction * unit, frame


def _open(path: Path):
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise AppmonError(f"{path}: cannot read capture ({exc.strerror})") from None
    head = handle.read(24)
    if head[:4] == PCAPNG_MAGIC:
        handle.close()
        raise AppmonError(
            f"{path}: pcapng is not supported; capture with 'tcpdump -w FILE' "
            "(pcap) or convert with 'editcap -F pcap IN OUT'"
        )
    problem = header_problem(head)
    if problem:
        handle.close()
        raise AppmonError(f"{path}: {problem}")
    order, unit = MAGIC[head[:4]]
    link = struct.unpack(order + "I", head[20:24])[0] & 0x0FFFFFFF
    if link not in LINKS:
        handle.close()
        raise AppmonError(
            f"{path}: link type {link} is not supported (Ethernet, Linux cooked "
            "or raw IP captures are)"
        )
    return handle, link, order, unit


def tcp_frame(
    src: str,
    dst: str,
    sport: int,
    dport: int,
    seq: int,
    flags: int,
    payload: bytes = b"",
    vlan: int | None = None,
    ack: int = 0,
) -> bytes:
    """An Ethernet frame carrying one TCP segment (IPv4 or IPv6 by the addresses' form)."""
    tcp = (
        struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack, 5 << 4, flags, 65535, 0, 0)
        + payload
    )
    if ":" in src:
        ip = (
            struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64)
            + socket.inet_pton(socket.AF_INET6, src)
            + socket.inet_pton(socket.AF_INET6, dst)
            + tcp
        )
        ethertype = 0x86DD
    else:
        ip = (
            struct.pack(
                "!BBHHHBBH4s4s",
                0x45,
                0,
                20 + len(tcp),
                0,
                0x4000,
                64,
                6,
                0,
                socket.inet_aton(src),
                socket.inet_aton(dst),
            )
            + tcp
        )
        ethertype = 0x0800
    tag = struct.pack("!HH", 0x8100, vlan) if vlan is not None else b""
    return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01" + tag + struct.pack("!H", ethertype) + ip


def write_pcap(
    path: str | Path, records: Iterable[tuple[float, bytes]], snaplen: int = 262144
) -> Path:
    """A pcap (Ethernet) of ``(unix time, frame)``; frames longer than ``snaplen`` are cut."""

    def write(stream):
        stream.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, LINK_ETHERNET))
        for when, frame in records:
            seconds = int(when)
            micros = min(999999, round((when - seconds) * 1e6))
            kept = frame[:snaplen]
            stream.write(struct.pack("<IIII", seconds, micros, len(kept), len(frame)) + kept)

    return write_atomic(path, write, binary=True)
