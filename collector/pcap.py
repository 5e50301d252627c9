"""Read UDP payloads from a pcap capture (``tcpdump -w``): the offline input of ``replay``.

Classic pcap only (micro- or nanosecond timestamps, either byte order) with Ethernet (optionally
802.1Q-tagged), Linux cooked (SLL, SLL2), raw IP or BSD loopback link layers; IPv4 and IPv6;
UDP on any port. Frames that are not UDP, or are IP fragments, are counted and skipped; a file
that is not a pcap is one ``CollectorError`` naming the file. A capture cut off inside a record
(a copy interrupted, a disk that filled) gives the records before the cut, as tcpdump and the
peers do, and says how many bytes at its end it could not use (``Capture.unused_bytes``).
"""

from __future__ import annotations

import mmap
import socket
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from cosample.collector.errors import CollectorError
from cosample.files import write_atomic
from cosample.pcapfile import MAGIC, PCAPNG_MAGIC, header_problem

try:  # built by ``pip install -e .`` (setup.py); without it every record is read in Python
    from cosample.collector._sflow import pcap_run as _pcap_run
except ImportError:  # pragma: no cover - a source tree used without installing
    _pcap_run = None

LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_RAW_ALT, LINK_SLL, LINK_SLL2 = 0, 1, 101, 12, 113, 276
LINKS = (LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_RAW_ALT, LINK_SLL, LINK_SLL2)
ETHERTYPE_IPV4, ETHERTYPE_IPV6, VLAN_TAGS = 0x0800, 0x86DD, (0x8100, 0x88A8)
UDP = 17
#: Records the compiled reader returns at once (bounds the memory a run holds).
RUN_RECORDS = 4096
#: A record longer than this is no frame (the largest snap length tcpdump takes is 262144):
#: the capture is cut or corrupt from there on.
MAX_RECORD_BYTES = 1 << 18


@dataclass
class Capture:
    """Where the datagrams came from, and what else the capture held."""

    path: Path
    skipped: Counter = field(default_factory=Counter)
    #: Bytes at the end of a cut-off capture that hold no complete record, and the record they
    #: begin (1-based), or 0 and None for a whole capture.
    unused_bytes: int = 0
    cut_record: int | None = None


def udp_payloads(path: str | Path, capture: Capture | None = None) -> Iterator[tuple[float, bytes]]:
    """``(unix time, UDP payload)`` for every UDP datagram in the capture, in file order."""
    return chain.from_iterable(udp_payload_runs(path, capture))


def udp_payload_runs(
    path: str | Path, capture: Capture | None = None
) -> Iterator[list[tuple[float, bytes]]]:
    """``udp_payloads`` in lists of consecutive records (up to ``RUN_RECORDS``, as the compiled
    reader returns them): the items reach a list without a generator step each."""
    path = Path(path)
    capture = capture if capture is not None else Capture(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise CollectorError(f"{path}: cannot read capture ({exc.strerror})") from None
    with handle:
        head = handle.read(24)
        if head[:4] == PCAPNG_MAGIC:
            raise CollectorError(
                f"{path}: pcapng is not supported; capture with "
                "'tcpdump -w FILE' (pcap) or convert with 'editcap -F pcap'"
            )
        problem = header_problem(head)
        if problem:
            raise CollectorError(f"{path}: {problem}")
        order, unit = MAGIC[head[:4]]
        link = struct.unpack(order + "I", head[20:24])[0] & 0x0FFFFFFF
        if link not in LINKS:
            raise CollectorError(
                f"{path}: link type {link} is not supported (Ethernet, Linux "
                "cooked, raw IP or loopback captures are)"
            )
        record = struct.Struct(order + "IIII")
        size = path.stat().st_size
        if size <= 24:
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield from _records(data, size, record, unit, link, capture)


def _records(
    data, size: int, record: struct.Struct, unit: float, link: int, capture: Capture
) -> Iterator[list[tuple[float, bytes]]]:
    """The records of a mapped capture after its file header (see ``udp_payloads``).

    Runs of ordinary records (Ethernet, IPv4, UDP) are read by the compiled ``pcap_run``
    (collector/_sflow.c), which stops before any other record; that one is read here.
    """
    unpack, skipped, offset, number = record.unpack_from, capture.skipped, 24, 0
    run = _pcap_run if link == LINK_ETHERNET else None
    little = record.format.startswith("<")
    while offset < size:
        if run is not None:
            count, offset, items = run(data, offset, little, unit, RUN_RECORDS)
            number += count
            if items:
                yield items
            if count == RUN_RECORDS or offset >= size:
                continue
        number += 1
        if offset + 16 > size:
            capture.unused_bytes, capture.cut_record = size - offset, number
            return
        seconds, fraction, included, _ = unpack(data, offset)
        start = offset + 16
        offset = start + included
        if included > MAX_RECORD_BYTES or offset > size:
            capture.unused_bytes, capture.cut_record = size - start + 16, number
            return
        payload = _udp_payload(data[start:offset], link, skipped)
        if payload is not None:
            yield [(seconds + fraction * unit, payload)]


def _udp_payload(frame: bytes, link: int, skipped: Counter) -> bytes | None:
    if link == LINK_ETHERNET:
        ethertype, offset = _u16(frame, 12), 14
        while ethertype in VLAN_TAGS:
            ethertype, offset = _u16(frame, offset + 2), offset + 4
    elif link == LINK_SLL:
        ethertype, offset = _u16(frame, 14), 16
    elif link == LINK_SLL2:
        ethertype, offset = _u16(frame, 0), 20
    elif link == LINK_NULL:
        family = int.from_bytes(frame[:4], "little") if len(frame) >= 4 else -1
        ethertype, offset = (ETHERTYPE_IPV4 if family == 2 else ETHERTYPE_IPV6), 4
    else:
        version = frame[0] >> 4 if frame else 0
        ethertype, offset = (ETHERTYPE_IPV4 if version == 4 else ETHERTYPE_IPV6), 0
    if ethertype == ETHERTYPE_IPV4 and len(frame) >= offset + 20:
        header_length = (frame[offset] & 0x0F) * 4
        total = _u16(frame, offset + 2)
        if frame[offset + 9] != UDP:
            skipped["not_udp"] += 1
            return None
        if _u16(frame, offset + 6) & 0x3FFF:  # more fragments, or a fragment offset
            skipped["ip_fragment"] += 1
            return None
        udp, end = offset + header_length, offset + total
    elif ethertype == ETHERTYPE_IPV6 and len(frame) >= offset + 40:
        if frame[offset + 6] != UDP:  # extension headers are not followed
            skipped["not_udp"] += 1
            return None
        udp, end = offset + 40, offset + 40 + _u16(frame, offset + 4)
    else:
        skipped["not_ip"] += 1
        return None
    if len(frame) < udp + 8:
        skipped["truncated_frame"] += 1
        return None
    length = _u16(frame, udp + 4)
    return frame[udp + 8 : min(udp + length, end, len(frame))]


def _u16(data: bytes, offset: int) -> int:
    return (data[offset] << 8) | data[offset + 1] if len(data) >= offset + 2 else -1


def write_pcap(
    path: str | Path,
    datagrams: list[tuple[float, bytes]],
    source: str = "10.0.0.1",
    destination: str = "10.0.0.254",
    port: int = 6343,
) -> Path:
    """A pcap (Ethernet, IPv4, UDP) of ``(unix time, payload)``: for tests and the benchmark."""

    def frames():
        for when, payload in datagrams:
            udp = struct.pack("!HHHH", 50000, port, 8 + len(payload), 0) + payload
            ip = struct.pack(
                "!BBHHHBBH4s4s",
                0x45,
                0,
                20 + len(udp),
                0,
                0,
                64,
                UDP,
                0,
                socket.inet_aton(source),
                socket.inet_aton(destination),
            )
            frame = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + ip + udp
            seconds = int(when)
            yield (
                struct.pack(
                    "<IIII",
                    seconds,
                    min(999999, int((when - seconds) * 1e6)),
                    len(frame),
                    len(frame),
                )
                + frame
            )

    def write(stream):
        stream.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINK_ETHERNET))
        for frame in frames():
            stream.write(frame)

    return write_atomic(path, write, binary=True)
