"""sFlow v5 decoding: datagram bytes -> typed records, nothing else.

What OVS sends (sflow.org/sflow_version_5.txt, sflow_tunnels.txt): the datagram header, flow
samples (format 1, expanded 3) with the raw packet header (record 1), the extended switch record
(1001, skipped) and, for packets that entered through a tunnel port, the extended tunnel-ingress
records: outer IPv4 (1024, laid out as ``sampled_ipv4``: length, protocol, source, destination,
source port, destination port, TCP flags, ToS) and VNI (1030); counter samples (format 2,
expanded 4) with generic interface counters (record 1); discarded-packet samples (format 5,
sflow.org/sflow_drops.txt: packets the switch dropped, with the drop reason and the packet's
header). Other formats and records are skipped by their length. A datagram that is not well formed raises ``DecodeError`` whose ``reason`` names the
drop counter (``truncated``, ``bad_version``, ...); nothing here keeps state.

The fast path touches only the fields attribution needs; addresses of the sampled packet are
decoded when asked for (``src_ip``, ``dst_ip``, ...).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv6Address

from cosample.collector.errors import CollectorError

FLOW_SAMPLE, COUNTER_SAMPLE, FLOW_SAMPLE_EXPANDED, COUNTER_SAMPLE_EXPANDED = 1, 2, 3, 4
DISCARDED_PACKET = 5
RAW_PACKET_HEADER, EXTENDED_SWITCH = 1, 1001
TUNNEL_IPV4_EGRESS, TUNNEL_IPV4_INGRESS, VNI_EGRESS, VNI_INGRESS = 1023, 1024, 1029, 1030
GENERIC_INTERFACE_COUNTERS = 1
ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
#: 802.1Q, 802.1ad (QinQ outer tag) and the pre-standard QinQ tag: skipped to find the IP header.
VLAN_TAGS = (0x8100, 0x88A8, 0x9100)
#: sFlow's header_protocol of a raw packet header record (sflow_version_5.txt).
HEADER_ETHERNET, HEADER_IPV4, HEADER_IPV6 = 1, 11, 12
#: The largest UDP payload over IPv4; anything longer cannot have come from an sFlow agent.
MAX_DATAGRAM_BYTES = 65507
#: Drop reasons the decoder can give (the collector adds its own: unknown_agent, ...).
DECODE_REASONS = ("truncated", "oversized", "bad_version", "bad_address_type", "bad_count")

_U32 = struct.Struct("!I")
_HEAD4 = struct.Struct("!II4sIIII")  # version, address type, IPv4, sub-agent, sequence, uptime, count
_PAIR = struct.Struct("!II")
_FLOW = struct.Struct("!IIIIIIII")  # sequence, source id, rate, pool, drops, input, output, records
_FLOW_X = struct.Struct("!IIIIIIIIIII")  # expanded: id type, id index; in/out as format, value
_RAW = struct.Struct("!IIII")  # header protocol, frame length, stripped, header length
_DISCARD = struct.Struct("!IIIIIIII")  # sequence, id type, id index, drops, in, out, reason, records
_COUNTERS = struct.Struct("!III")  # sequence, source id, records
_COUNTERS_X = struct.Struct("!IIII")
_GENERIC = struct.Struct("!IIQIIQIIIIIIQIIIIII")
_ntoa = socket.inet_ntoa

try:  # built by ``pip install -e .`` (setup.py); without it the Python decoder does all
    from cosample.collector._sflow import agent as _agent, scan as _scan
except ImportError:  # pragma: no cover - a source tree used without installing
    _agent = _scan = None
#: Whether the compiled fast path is in use (tests assert it is built).
COMPILED = _scan is not None


class DecodeError(CollectorError):
    """A datagram that is not well-formed sFlow v5; ``reason`` is its drop counter's name."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(slots=True)
class FlowSample:
    """One sampled packet as an agent reported it.

    ``outer_src``/``outer_dst`` (raw 4 bytes) and ``vni`` come from the tunnel-ingress records,
    present only for packets that entered the bridge through a tunnel port; ``tunnel_src`` and
    ``tunnel_dst`` give the addresses as text.
    """

    agent: str
    sequence: int
    sampling_rate: int
    sample_pool: int
    drops: int
    input_port: int
    output_port: int
    frame_length: int = 0
    header: bytes = b""
    outer_src: bytes | None = None
    outer_dst: bytes | None = None
    vni: int | None = None
    source_index: int = 0
    header_protocol: int = HEADER_ETHERNET

    @property
    def tunnel_src(self) -> str | None:
        return _ntoa(self.outer_src) if self.outer_src is not None else None

    @property
    def tunnel_dst(self) -> str | None:
        return _ntoa(self.outer_dst) if self.outer_dst is not None else None

    @property
    def src_mac(self) -> str | None:
        ethernet = self.header_protocol == HEADER_ETHERNET and len(self.header) >= 14
        return self.header[6:12].hex(":") if ethernet else None

    @property
    def dst_mac(self) -> str | None:
        ethernet = self.header_protocol == HEADER_ETHERNET and len(self.header) >= 14
        return self.header[0:6].hex(":") if ethernet else None

    def _ip(self) -> tuple[int, int]:
        """(IP version, offset of its header in ``header``), or (0, -1): Ethernet with any
        number of VLAN tags (802.1Q, QinQ), or a raw IPv4 or IPv6 header."""
        header, kind = self.header, self.header_protocol
        if kind == HEADER_ETHERNET:
            if len(header) < 14:
                return 0, -1
            ethertype, offset = (header[12] << 8) | header[13], 14
            while ethertype in VLAN_TAGS and len(header) >= offset + 4:
                ethertype, offset = (header[offset + 2] << 8) | header[offset + 3], offset + 4
            version = 4 if ethertype == ETHERTYPE_IPV4 else 6 if ethertype == ETHERTYPE_IPV6 \
                else 0
        elif kind in (HEADER_IPV4, HEADER_IPV6):
            version, offset = (4 if kind == HEADER_IPV4 else 6), 0
        else:
            return 0, -1
        if version == 4 and len(header) >= offset + 20 and header[offset] >> 4 == 4:
            return 4, offset
        if version == 6 and len(header) >= offset + 40 and header[offset] >> 4 == 6:
            return 6, offset
        return 0, -1

    def _address(self, where4: int, where6: int) -> str | None:
        version, at = self._ip()
        if version == 4:
            return _ntoa(self.header[at + where4:at + where4 + 4])
        if version == 6:  # written as the inventory writes it (ipaddress, RFC 5952)
            return str(IPv6Address(self.header[at + where6:at + where6 + 16]))
        return None

    @property
    def src_ip(self) -> str | None:
        return self._address(12, 8)

    @property
    def dst_ip(self) -> str | None:
        return self._address(16, 24)

    @property
    def ip_protocol(self) -> int | None:
        """IPv4's protocol or IPv6's next header (extension headers are not followed)."""
        version, at = self._ip()
        return self.header[at + (9 if version == 4 else 6)] if version else None


def flow_record(agent: str, compact: tuple, data: bytes) -> FlowSample:
    """The ``FlowSample`` of one tuple from ``parse_compact`` (when a stage needs the record)."""
    (sequence, index, rate, drops, frame_length, vni, outer, head, tail, header, input_port,
     output_port, protocol) = compact
    return FlowSample(agent, sequence, rate, 0, drops, input_port, output_port, frame_length,
                      header if header is not None else data[head:tail], outer, None, vni, index,
                      protocol)


@dataclass(frozen=True, slots=True)
class DiscardSample:
    """A packet the agent's switch dropped (format 5): where, why (``reason``: sFlow's drop
    reason code, 0-255 ICMP unreachable codes, 256 and up named reasons in sflow_drops.txt) and
    the start of the packet."""

    agent: str
    sequence: int
    source_index: int
    drops: int
    input_port: int
    output_port: int
    reason: int
    frame_length: int = 0
    header: bytes = b""


@dataclass(frozen=True, slots=True)
class InterfaceCounters:
    """Generic interface counters of one port (OVS: ``in`` = received by the switch port)."""

    agent: str
    if_index: int
    in_octets: int
    in_packets: int
    out_octets: int
    out_packets: int
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class Datagram:
    agent: str
    sub_agent: int
    sequence: int
    uptime_ms: int
    flow_samples: tuple[FlowSample, ...]
    counters: tuple[InterfaceCounters, ...] = ()
    discards: tuple[DiscardSample, ...] = ()

    @property
    def counter_samples(self) -> int:
        return len(self.counters)


def _truncated(what: str, offset: int, need: int, have: int) -> DecodeError:
    return DecodeError("truncated", f"truncated {what}: need {need} bytes at offset {offset}, "
                                    f"have {max(have, 0)}")


def _header(data: bytes) -> tuple[str, int, int, int, int, int]:
    """(agent, sub-agent, sequence, uptime, sample count, offset of the first sample)."""
    size = len(data)
    if size > MAX_DATAGRAM_BYTES:
        raise DecodeError("oversized", f"datagram of {size} bytes exceeds {MAX_DATAGRAM_BYTES}")
    if size < 8:
        raise _truncated("datagram header", 0, 8, size)
    version, kind = _PAIR.unpack_from(data, 0)
    if version != 5:
        raise DecodeError("bad_version", f"not sFlow v5 (version {version})")
    if kind == 1:
        if size < 28:
            raise _truncated("datagram header", 0, 28, size)
        _, _, raw, sub_agent, sequence, uptime, count = _HEAD4.unpack_from(data, 0)
        agent, offset = _ntoa(raw), 28
    elif kind == 2:
        if size < 40:
            raise _truncated("datagram header", 0, 40, size)
        agent = socket.inet_ntop(socket.AF_INET6, data[8:24])
        sub_agent, sequence, uptime, count = struct.unpack_from("!IIII", data, 24)
        offset = 40
    else:
        raise DecodeError("bad_address_type", f"unknown agent address type {kind}")
    if count * 8 > size - offset:
        raise DecodeError("bad_count", f"{count} samples announced in {size - offset} bytes")
    return agent, sub_agent, sequence, uptime, count, offset


def datagram_agent(data: bytes) -> str:
    """The agent address of a datagram from its header alone (cheap), or ``DecodeError``."""
    return _header(data)[0]


def agent_or_none(data: bytes) -> str | None:
    """``datagram_agent``, or None where it raises (the compiled header check when built)."""
    if _agent is not None:
        return _agent(data)
    try:
        return _header(data)[0]
    except DecodeError:
        return None


def agents_of(payloads: Iterable[bytes]) -> list[str]:
    """The agent addresses of the datagrams with a well-formed header, in order of first
    appearance (one pass of the compiled header check when built)."""
    seen = dict.fromkeys(map(_agent if _agent is not None else agent_or_none, payloads))
    seen.pop(None, None)
    return list(seen)


def samples_announced(data: bytes) -> int:
    """How many samples a datagram's header announces, without decoding them (cheap)."""
    return _header(data)[4]


def parse_datagram(data: bytes) -> Datagram:
    """Decode one sFlow v5 datagram, or raise ``DecodeError``."""
    agent, sub_agent, sequence, uptime, count, offset = _header(data)
    size = len(data)
    flows: list[FlowSample] = []
    counters: list[InterfaceCounters] = []
    discards: list[DiscardSample] = []
    for _ in range(count):
        if offset + 8 > size:
            raise _truncated("sample", offset, 8, size - offset)
        fmt, length = _PAIR.unpack_from(data, offset)
        start, end = offset + 8, offset + 8 + length
        if end > size or length & 3:
            raise _truncated("sample", start, length, size - start)
        if fmt in (FLOW_SAMPLE, FLOW_SAMPLE_EXPANDED):
            flows.append(_flow_sample(data, start, end, agent, fmt == FLOW_SAMPLE_EXPANDED))
        elif fmt in (COUNTER_SAMPLE, COUNTER_SAMPLE_EXPANDED):
            _counter_sample(data, start, end, agent, fmt == COUNTER_SAMPLE_EXPANDED, counters)
        elif fmt == DISCARDED_PACKET:
            discards.append(_discard_sample(data, start, end, agent))
        offset = end
    return Datagram(agent, sub_agent, sequence, uptime, tuple(flows), tuple(counters),
                    tuple(discards))


def _discard_sample(data: bytes, start: int, end: int, agent: str) -> DiscardSample:
    if start + _DISCARD.size > end:
        raise _truncated("discarded packet sample", start, _DISCARD.size, end - start)
    sequence, _, index, drops, input_port, output_port, reason, records = \
        _DISCARD.unpack_from(data, start)
    offset, frame_length, header = start + _DISCARD.size, 0, b""
    for _ in range(records):
        if offset + 8 > end:
            raise _truncated("discard record", offset, 8, end - offset)
        fmt, length = _PAIR.unpack_from(data, offset)
        body, offset = offset + 8, offset + 8 + length
        if offset > end:
            raise _truncated("discard record", body, length, end - body)
        if fmt == RAW_PACKET_HEADER:
            if length < 16:
                raise _truncated("raw packet header", body, 16, length)
            _, frame_length, _, header_length = _RAW.unpack_from(data, body)
            if header_length > length - 16:
                raise _truncated("raw packet header", body + 16, header_length, length - 16)
            header = data[body + 16:body + 16 + header_length]
    return DiscardSample(agent, sequence, index, drops, input_port, output_port, reason,
                         frame_length, header)


def _flow_sample(data: bytes, start: int, end: int, agent: str, expanded: bool) -> FlowSample:
    if expanded:
        if start + 44 > end:
            raise _truncated("expanded flow sample", start, 44, end - start)
        (sequence, _, index, rate, pool, drops, _, input_port, _, output_port,
         records) = _FLOW_X.unpack_from(data, start)
        offset = start + 44
    else:
        if start + 32 > end:
            raise _truncated("flow sample", start, 32, end - start)
        sequence, source, rate, pool, drops, input_port, output_port, records = \
            _FLOW.unpack_from(data, start)
        index, input_port, output_port = source & 0xFFFFFF, input_port & 0x3FFFFFFF, \
            output_port & 0x3FFFFFFF
        offset = start + 32
    frame_length, header, outer_src, outer_dst, vni = 0, b"", None, None, None
    protocol = HEADER_ETHERNET
    for _ in range(records):
        if offset + 8 > end:
            raise _truncated("flow record", offset, 8, end - offset)
        fmt, length = _PAIR.unpack_from(data, offset)
        body, offset = offset + 8, offset + 8 + length
        if offset > end:
            raise _truncated("flow record", body, length, end - body)
        if fmt == RAW_PACKET_HEADER:
            if length < 16:
                raise _truncated("raw packet header", body, 16, length)
            protocol, frame_length, _, header_length = _RAW.unpack_from(data, body)
            if header_length > length - 16:
                raise _truncated("raw packet header", body + 16, header_length, length - 16)
            header = data[body + 16:body + 16 + header_length]
        elif fmt == TUNNEL_IPV4_INGRESS:
            if length < 32:
                raise _truncated("tunnel ingress record", body, 32, length)
            outer_src, outer_dst = data[body + 8:body + 12], data[body + 12:body + 16]
        elif fmt == VNI_INGRESS:
            if length < 4:
                raise _truncated("VNI ingress record", body, 4, length)
            vni = _U32.unpack_from(data, body)[0]
    return FlowSample(agent, sequence, rate, pool, drops, input_port, output_port, frame_length,
                      header, outer_src, outer_dst, vni, index, protocol)


def _counter_sample(data: bytes, start: int, end: int, agent: str, expanded: bool,
                    out: list[InterfaceCounters]) -> None:
    layout = _COUNTERS_X if expanded else _COUNTERS
    if start + layout.size > end:
        raise _truncated("counter sample", start, layout.size, end - start)
    sequence, records = (lambda v: (v[0], v[-1]))(layout.unpack_from(data, start))
    offset = start + layout.size
    for _ in range(records):
        if offset + 8 > end:
            raise _truncated("counter record", offset, 8, end - offset)
        fmt, length = _PAIR.unpack_from(data, offset)
        body, offset = offset + 8, offset + 8 + length
        if offset > end:
            raise _truncated("counter record", body, length, end - body)
        if fmt == GENERIC_INTERFACE_COUNTERS:
            if length < _GENERIC.size:
                raise _truncated("generic interface counters", body, _GENERIC.size, length)
            values = _GENERIC.unpack_from(data, body)
            out.append(InterfaceCounters(agent, if_index=values[0], in_octets=values[5],
                                         in_packets=values[6], out_octets=values[12],
                                         out_packets=values[13], sequence=sequence))


def parse_compact(data: bytes) -> tuple[str, int, int, int, tuple[tuple, ...],
                                        tuple[InterfaceCounters, ...], tuple[DiscardSample, ...]]:
    """The collector's fast path: ``(agent, sub-agent, datagram sequence, uptime, flows,
    counters, discards)`` with each flow sample as
    a plain tuple ``(sequence, source index, sampling rate, drops, frame length, vni, outer
    source (4 raw bytes) or None, header start, header end, header or None, input port, output
    port, header protocol)``; the header stays in ``data`` (``data[start:end]``) unless given.

    Same checks and errors as ``parse_datagram``; no objects per sample. The compiled scan
    (``_sflow.scan``, collector/_sflow.c) decodes well-formed datagrams' headers and flow
    samples; anything else (a malformed part) is decoded here in Python, which raises the
    named error, so the result is ``parse_compact_python``'s by construction.
    """
    return parse_grouped(data)[:7]


def parse_grouped(data: bytes) -> tuple:
    """``parse_compact``'s seven fields and, from the compiled scan, the flow samples grouped
    as ``Estimator.ingest`` adds them: ``[(rate, vni, outer, n, sum of frame lengths, sum of
    their squares, None)]`` in order of first appearance, or None (ingest groups them)."""
    fast = _scan(data) if _scan is not None else None
    if fast is None:
        return (*parse_compact_python(data), None)
    agent, sub_agent, number, uptime, flows, others, alike = fast
    if not others:
        return agent, sub_agent, number, uptime, flows, (), (), alike
    counters: list[InterfaceCounters] = []
    discards: list[DiscardSample] = []
    for fmt, start, end in others:  # in order: the first malformed one raises, as in Python
        if fmt == DISCARDED_PACKET:
            discards.append(_discard_sample(data, start, end, agent))
        else:
            _counter_sample(data, start, end, agent, fmt == COUNTER_SAMPLE_EXPANDED, counters)
    return agent, sub_agent, number, uptime, flows, tuple(counters), tuple(discards), alike


def parse_compact_python(data: bytes) -> tuple[str, int, int, int, tuple[tuple, ...],
                                               tuple[InterfaceCounters, ...],
                                               tuple[DiscardSample, ...]]:
    """``parse_compact`` in Python alone: the reference the compiled scan is tested against,
    and the decoder of every datagram the scan leaves (malformed ones)."""
    agent, sub_agent, number, uptime, count, offset = _header(data)
    size = len(data)
    flows: list[tuple] = []
    counters: list[InterfaceCounters] = []
    discards: list[DiscardSample] = []
    unpack_pair, unpack_flow, unpack_u32 = _PAIR.unpack_from, _FLOW.unpack_from, _U32.unpack_from
    unpack_expanded = _FLOW_X.unpack_from
    for _ in range(count):
        if offset + 8 > size:
            raise _truncated("sample", offset, 8, size - offset)
        fmt, length = unpack_pair(data, offset)
        start, end = offset + 8, offset + 8 + length
        if end > size or length & 3:
            raise _truncated("sample", start, length, size - start)
        offset = end
        if fmt == FLOW_SAMPLE:
            if start + 32 > end:
                raise _truncated("flow sample", start, 32, end - start)
            sequence, source, rate, _, drops, input_port, output_port, records = \
                unpack_flow(data, start)
            source, input_port, output_port = source & 0xFFFFFF, input_port & 0x3FFFFFFF, \
                output_port & 0x3FFFFFFF
            at = start + 32
        elif fmt == FLOW_SAMPLE_EXPANDED:
            if start + 44 > end:
                raise _truncated("expanded flow sample", start, 44, end - start)
            (sequence, _, source, rate, _, drops, _, input_port, _, output_port,
             records) = unpack_expanded(data, start)
            at = start + 44
        else:
            if fmt in (COUNTER_SAMPLE, COUNTER_SAMPLE_EXPANDED):
                _counter_sample(data, start, end, agent, fmt == COUNTER_SAMPLE_EXPANDED, counters)
            elif fmt == DISCARDED_PACKET:
                discards.append(_discard_sample(data, start, end, agent))
            continue
        frame_length = head = tail = 0
        vni = outer = None
        protocol = HEADER_ETHERNET
        for _ in range(records):
            if at + 8 > end:
                raise _truncated("flow record", at, 8, end - at)
            kind, length = unpack_pair(data, at)
            body, at = at + 8, at + 8 + length
            if at > end:
                raise _truncated("flow record", body, length, end - body)
            if kind == RAW_PACKET_HEADER:
                if length < 16:
                    raise _truncated("raw packet header", body, 16, length)
                protocol, frame_length, _, header_length = _RAW.unpack_from(data, body)
                if header_length > length - 16:
                    raise _truncated("raw packet header", body + 16, header_length, length - 16)
                head, tail = body + 16, body + 16 + header_length
            elif kind == TUNNEL_IPV4_INGRESS:
                if length < 32:
                    raise _truncated("tunnel ingress record", body, 32, length)
                outer = data[body + 8:body + 12]
            elif kind == VNI_INGRESS:
                if length < 4:
                    raise _truncated("VNI ingress record", body, 4, length)
                vni = unpack_u32(data, body)[0]
        flows.append((sequence, source, rate, drops, frame_length, vni, outer, head, tail, None,
                      input_port, output_port, protocol))
    return agent, sub_agent, number, uptime, tuple(flows), tuple(counters), tuple(discards)
