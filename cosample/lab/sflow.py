"""A minimal sFlow v5 collector: parse datagrams, keep the flow samples, count them.

Enough of sFlow v5 (sflow.org/sflow_version_5.txt) to check what OVS sends: datagram header,
flow samples (format 1) and expanded flow samples (format 3), and the raw packet header record
(format 1) from which Ethernet and IPv4 addresses are decoded. Counter samples are counted and
skipped. Malformed input raises ``SflowError``; the collector counts such datagrams and goes on.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from cosample.errors import CosampleError

FLOW_SAMPLE, COUNTER_SAMPLE, FLOW_SAMPLE_EXPANDED, COUNTER_SAMPLE_EXPANDED = 1, 2, 3, 4
RAW_PACKET_HEADER = 1
ETHERTYPE_IPV4, ETHERTYPE_VLAN = 0x0800, 0x8100


class SflowError(CosampleError):
    """A datagram that is not well-formed sFlow v5."""


@dataclass(frozen=True)
class FlowSample:
    """One sampled packet as the switch reported it."""

    agent: str
    sequence: int
    sampling_rate: int
    sample_pool: int
    drops: int
    input_port: int
    output_port: int
    frame_length: int | None = None
    src_mac: str | None = None
    dst_mac: str | None = None
    src_ip: str | None = None
    dst_ip: str | None = None
    ip_protocol: int | None = None
    header: bytes = b""


@dataclass(frozen=True)
class Datagram:
    agent: str
    sequence: int
    uptime_ms: int
    flow_samples: tuple[FlowSample, ...]
    counter_samples: int


class _Reader:
    """Big-endian XDR reader over a bytes buffer with bounds checks."""

    def __init__(self, data: bytes) -> None:
        self.data, self.offset = data, 0

    def u32(self) -> int:
        return struct.unpack_from("!I", self.take(4))[0]

    def take(self, size: int) -> bytes:
        if size < 0 or self.offset + size > len(self.data):
            raise SflowError(f"truncated datagram: need {size} bytes at offset {self.offset}, "
                             f"have {len(self.data) - self.offset}")
        chunk = self.data[self.offset:self.offset + size]
        self.offset += size
        return chunk

    def address(self) -> str:
        kind = self.u32()
        if kind == 1:
            return str(ipaddress.IPv4Address(self.take(4)))
        if kind == 2:
            return str(ipaddress.IPv6Address(self.take(16)))
        raise SflowError(f"unknown agent address type {kind}")


def samples_announced(data: bytes) -> int:
    """How many samples a datagram's header announces, without decoding them (cheap)."""
    reader = _Reader(data)
    version = reader.u32()
    if version != 5:
        raise SflowError(f"not sFlow v5 (version {version})")
    reader.address()
    reader.take(12)  # sub-agent id, sequence, uptime
    return reader.u32()


def parse_datagram(data: bytes) -> Datagram:
    """Decode one sFlow v5 datagram."""
    reader = _Reader(data)
    version = reader.u32()
    if version != 5:
        raise SflowError(f"not sFlow v5 (version {version})")
    agent = reader.address()
    reader.u32()  # sub-agent id
    sequence, uptime, count = reader.u32(), reader.u32(), reader.u32()
    flows, counters = [], 0
    for _ in range(count):
        fmt, length = reader.u32(), reader.u32()
        body = _Reader(reader.take(length))
        kind = fmt & 0xFFF if fmt >> 12 == 0 else None
        if kind in (FLOW_SAMPLE, FLOW_SAMPLE_EXPANDED):
            flows.append(_flow_sample(body, agent, expanded=kind == FLOW_SAMPLE_EXPANDED))
        elif kind in (COUNTER_SAMPLE, COUNTER_SAMPLE_EXPANDED):
            counters += 1
    return Datagram(agent, sequence, uptime, tuple(flows), counters)


def _flow_sample(body: _Reader, agent: str, expanded: bool) -> FlowSample:
    sequence = body.u32()
    if expanded:
        body.u32(), body.u32()  # source id type, index
    else:
        body.u32()  # source id
    sampling_rate, pool, drops = body.u32(), body.u32(), body.u32()
    if expanded:
        body.u32(); input_port = body.u32(); body.u32(); output_port = body.u32()
    else:
        input_port, output_port = body.u32() & 0x3FFFFFFF, body.u32() & 0x3FFFFFFF
    fields: dict = {}
    for _ in range(body.u32()):
        fmt, length = body.u32(), body.u32()
        record = _Reader(body.take(length))
        if fmt == RAW_PACKET_HEADER:
            record.u32()  # header protocol (1 = Ethernet)
            frame_length = record.u32()
            record.u32()  # stripped
            header = record.take(record.u32())
            fields = {"frame_length": frame_length, "header": header, **_decode_ethernet(header)}
    return FlowSample(agent, sequence, sampling_rate, pool, drops, input_port, output_port, **fields)


def _decode_ethernet(header: bytes) -> dict:
    if len(header) < 14:
        return {}
    out = {"dst_mac": header[0:6].hex(":"), "src_mac": header[6:12].hex(":")}
    ethertype, offset = struct.unpack_from("!H", header, 12)[0], 14
    if ethertype == ETHERTYPE_VLAN and len(header) >= 18:
        ethertype, offset = struct.unpack_from("!H", header, 16)[0], 18
    if ethertype == ETHERTYPE_IPV4 and len(header) >= offset + 20:
        out.update(ip_protocol=header[offset + 9],
                   src_ip=str(ipaddress.IPv4Address(header[offset + 12:offset + 16])),
                   dst_ip=str(ipaddress.IPv4Address(header[offset + 16:offset + 20])))
    return out


class SflowCollector:
    """A UDP collector in a background thread; bind to ``port=0`` to get a free port.

    ``decode=False`` only counts the samples each datagram announces (``sample_count``), for
    calibration runs where decoding every header in Python would steal the CPU being measured.
    ``receive_buffer`` enlarges the socket buffer (bytes; forced past the sysctl limit as root):
    at several thousand samples per second a collector thread that waits for a shared CPU
    otherwise loses datagrams.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, decode: bool = True,
                 receive_buffer: int | None = None) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._socket.bind((host, port))
            if receive_buffer:
                option = getattr(socket, "SO_RCVBUFFORCE", 33) if os.geteuid() == 0 else socket.SO_RCVBUF
                self._socket.setsockopt(socket.SOL_SOCKET, option, receive_buffer)
        except OSError as exc:
            self._socket.close()
            raise SflowError(f"sFlow collector cannot bind {host}:{port}: {exc.strerror}") from None
        self._socket.settimeout(0.2)
        self.host, self.port = self._socket.getsockname()
        self.decode = decode
        self.samples: list[FlowSample] = []
        self.sample_count = 0
        self.datagrams = 0
        self.malformed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sflow-collector", daemon=True)

    @property
    def target(self) -> str:
        """``HOST:PORT`` as OVS's sFlow ``targets`` wants it."""
        return f"{self.host}:{self.port}"

    def start(self) -> "SflowCollector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self._socket.close()

    def __enter__(self) -> "SflowCollector":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._socket.recv(65535)
            except (socket.timeout, OSError):
                continue
            try:
                if self.decode:
                    flows = parse_datagram(data).flow_samples
                    count = len(flows)
                else:
                    flows, count = (), samples_announced(data)
            except SflowError:
                with self._lock:
                    self.malformed += 1
                continue
            with self._lock:
                self.datagrams += 1
                self.sample_count += count
                self.samples.extend(flows)

    def snapshot(self) -> list[FlowSample]:
        """A copy of the samples received so far."""
        with self._lock:
            return list(self.samples)

    def clear(self) -> None:
        with self._lock:
            self.samples.clear()
            self.sample_count = 0
            self.datagrams = 0
            self.malformed = 0

    def count_by(self, key: Callable[[FlowSample], Hashable]) -> Counter:
        """Samples counted by ``key`` (e.g. ``lambda s: s.src_ip``)."""
        return Counter(key(sample) for sample in self.snapshot())
