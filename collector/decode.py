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
from collections.abc import Callable, Iterable, Iterator

from cosample.collector.errors import CollectorError
from cosample.collector.records import (
    HEADER_ETHERNET,
    Datagram,
    DiscardSample,
    FlowSample,
    InterfaceCounters,
)

FLOW_SAMPLE, COUNTER_SAMPLE, FLOW_SAMPLE_EXPANDED, COUNTER_SAMPLE_EXPANDED = 1, 2, 3, 4
DISCARDED_PACKET = 5
RAW_PACKET_HEADER, EXTENDED_SWITCH = 1, 1001
TUNNEL_IPV4_EGRESS, TUNNEL_IPV4_INGRESS, VNI_EGRESS, VNI_INGRESS = 1023, 1024, 1029, 1030
GENERIC_INTERFACE_COUNTERS = 1
#: The largest UDP payload over IPv4; anything longer cannot have come from an sFlow agent.
MAX_DATAGRAM_BYTES = 65507
#: Drop reasons the decoder can give (the collector adds its own: unknown_agent, ...).
DECODE_REASONS = ("truncated", "oversized", "bad_version", "bad_address_type", "bad_count")

_U32 = struct.Struct("!I")
_HEAD4 = struct.Struct(
    "!II4sIIII"
)  # version, address type, IPv4, sub-agent, sequence, uptime, count
_PAIR = struct.Struct("!II")
_FLOW = struct.Struct("!IIIIIIII")  # sequence, source id, rate, pool, drops, input, output, records
_FLOW_X = struct.Struct("!IIIIIIIIIII")  # expanded: id type, id index; in/out as format, value
_RAW = struct.Struct("!IIII")  # header protocol, frame length, stripped, header length
_DISCARD = struct.Struct(
    "!IIIIIIII"
)  # sequence, id type, id index, drops, in, out, reason, records
_COUNTERS = struct.Struct("!III")  # sequence, source id, records
_COUNTERS_X = struct.Struct("!IIII")
_GENERIC = struct.Struct("!IIQIIQIIIIIIQIIIIII")
_ntoa = socket.inet_ntoa

try:  # built by ``pip install -e .`` (setup.py); without it the Python decoder does all
    from cosample.collector._sflow import agent as _agent
    from cosample.collector._sflow import ingest as compiled_ingest
    from cosample.collector._sflow import scan as _scan
    from cosample.collector._sflow import scan_counted as _scan_counted
except ImportError:  # pragma: no cover - a source tree used without installing
    _agent = _scan = _scan_counted = compiled_ingest = None
#: Whether the compiled fast path is in use (tests assert it is built).
COMPILED = _scan is not None


class DecodeError(CollectorError):
    """A datagram that is not well-formed sFlow v5; ``reason`` is its drop counter's name."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _truncated(what: str, offset: int, need: int, have: int) -> DecodeError:
    return DecodeError(
        "truncated", f"truncated {what}: need {need} bytes at offset {offset}, have {max(have, 0)}"
    )


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
    return Datagram(*_decode(data, _flow_sample))


def _decode(data: bytes, flow: Callable[[str, bytes, tuple], object]) -> tuple:
    """(agent, sub-agent, sequence, uptime, flows, counters, discards), each flow sample as
    ``flow(agent, data, _flow_fields(...))`` makes it."""
    agent, sub_agent, sequence, uptime, count, offset = _header(data)
    flows: list = []
    counters: list[InterfaceCounters] = []
    discards: list[DiscardSample] = []
    for fmt, start, end in _samples(data, offset, count):
        if fmt == FLOW_SAMPLE or fmt == FLOW_SAMPLE_EXPANDED:
            flows.append(
                flow(agent, data, _flow_fields(data, start, end, fmt == FLOW_SAMPLE_EXPANDED))
            )
        elif fmt == COUNTER_SAMPLE or fmt == COUNTER_SAMPLE_EXPANDED:
            _counter_sample(data, start, end, agent, fmt == COUNTER_SAMPLE_EXPANDED, counters)
        elif fmt == DISCARDED_PACKET:
            discards.append(_discard_sample(data, start, end, agent))
    return agent, sub_agent, sequence, uptime, tuple(flows), tuple(counters), tuple(discards)


def _flow_sample(agent: str, data: bytes, fields: tuple) -> FlowSample:
    (
        sequence,
        index,
        rate,
        pool,
        drops,
        input_port,
        output_port,
        frame_length,
        head,
        tail,
        outer_src,
        outer_dst,
        vni,
        protocol,
    ) = fields
    return FlowSample(
        agent,
        sequence,
        rate,
        pool,
        drops,
        input_port,
        output_port,
        frame_length,
        data[head:tail],
        outer_src,
        outer_dst,
        vni,
        index,
        protocol,
    )


def _compact(agent: str, data: bytes, fields: tuple) -> tuple:
    """``parse_compact``'s tuple of one flow sample."""
    (
        sequence,
        index,
        rate,
        _,
        drops,
        input_port,
        output_port,
        frame_length,
        head,
        tail,
        outer,
        _,
        vni,
        protocol,
    ) = fields
    return (
        sequence,
        index,
        rate,
        drops,
        frame_length,
        vni,
        outer,
        head,
        tail,
        None,
        input_port,
        output_port,
        protocol,
    )


def _samples(data: bytes, offset: int, count: int) -> Iterator[tuple[int, int, int]]:
    """(format, start, end) of the datagram's ``count`` samples from ``offset``, each checked
    to lie inside the datagram."""
    size = len(data)
    for _ in range(count):
        if offset + 8 > size:
            raise _truncated("sample", offset, 8, size - offset)
        fmt, length = _PAIR.unpack_from(data, offset)
        start, offset = offset + 8, offset + 8 + length
        if offset > size or length & 3:
            raise _truncated("sample", start, length, size - start)
        yield fmt, start, offset


def _records(
    data: bytes, offset: int, end: int, count: int, what: str
) -> Iterator[tuple[int, int, int]]:
    """(format, body start, body length) of a sample's ``count`` records from ``offset``, each
    checked to lie inside the sample (which ends at ``end``): the one record reader of flow,
    discard and counter samples."""
    for _ in range(count):
        if offset + 8 > end:
            raise _truncated(f"{what} record", offset, 8, end - offset)
        fmt, length = _PAIR.unpack_from(data, offset)
        body, offset = offset + 8, offset + 8 + length
        if offset > end:
            raise _truncated(f"{what} record", body, length, end - body)
        yield fmt, body, length


def _raw_header(data: bytes, body: int, length: int) -> tuple[int, int, int, int]:
    """(header protocol, frame length, header start, header end) of a raw packet header."""
    if length < 16:
        raise _truncated("raw packet header", body, 16, length)
    protocol, frame_length, _, header_length = _RAW.unpack_from(data, body)
    if header_length > length - 16:
        raise _truncated("raw packet header", body + 16, header_length, length - 16)
    return protocol, frame_length, body + 16, body + 16 + header_length


def _flow_fields(data: bytes, start: int, end: int, expanded: bool) -> tuple:
    """A flow sample's (sequence, source index, rate, pool, drops, input port, output port,
    frame length, header start, header end, outer source, outer destination, VNI, header
    protocol); the header is ``data[start:end]``, empty without a raw packet header record."""
    if expanded:
        if start + 44 > end:
            raise _truncated("expanded flow sample", start, 44, end - start)
        (sequence, _, index, rate, pool, drops, _, input_port, _, output_port, records) = (
            _FLOW_X.unpack_from(data, start)
        )
        offset = start + 44
    else:
        if start + 32 > end:
            raise _truncated("flow sample", start, 32, end - start)
        sequence, source, rate, pool, drops, input_port, output_port, records = _FLOW.unpack_from(
            data, start
        )
        index, input_port, output_port = (
            source & 0xFFFFFF,
            input_port & 0x3FFFFFFF,
            output_port & 0x3FFFFFFF,
        )
        offset = start + 32
    frame_length = head = tail = 0
    outer_src = outer_dst = vni = None
    protocol = HEADER_ETHERNET
    for fmt, body, length in _records(data, offset, end, records, "flow"):
        if fmt == RAW_PACKET_HEADER:
            protocol, frame_length, head, tail = _raw_header(data, body, length)
        elif fmt == TUNNEL_IPV4_INGRESS:
            if length < 32:
                raise _truncated("tunnel ingress record", body, 32, length)
            outer_src, outer_dst = data[body + 8 : body + 12], data[body + 12 : body + 16]
        elif fmt == VNI_INGRESS:
            if length < 4:
                raise _truncated("VNI ingress record", body, 4, length)
            vni = _U32.unpack_from(data, body)[0]
    return (
        sequence,
        index,
        rate,
        pool,
        drops,
        input_port,
        output_port,
        frame_length,
        head,
        tail,
        outer_src,
        outer_dst,
        vni,
        protocol,
    )


def _discard_sample(data: bytes, start: int, end: int, agent: str) -> DiscardSample:
    if start + _DISCARD.size > end:
        raise _truncated("discarded packet sample", start, _DISCARD.size, end - start)
    sequence, _, index, drops, input_port, output_port, reason, records = _DISCARD.unpack_from(
        data, start
    )
    frame_length, header = 0, b""
    for fmt, body, length in _records(data, start + _DISCARD.size, end, records, "discard"):
        if fmt == RAW_PACKET_HEADER:
            _, frame_length, head, tail = _raw_header(data, body, length)
            header = data[head:tail]
    return DiscardSample(
        agent, sequence, index, drops, input_port, output_port, reason, frame_length, header
    )


def _counter_sample(
    data: bytes, start: int, end: int, agent: str, expanded: bool, out: list[InterfaceCounters]
) -> None:
    layout = _COUNTERS_X if expanded else _COUNTERS
    if start + layout.size > end:
        raise _truncated("counter sample", start, layout.size, end - start)
    fields = layout.unpack_from(data, start)
    sequence, records = fields[0], fields[-1]
    for fmt, body, length in _records(data, start + layout.size, end, records, "counter"):
        if fmt == GENERIC_INTERFACE_COUNTERS:
            if length < _GENERIC.size:
                raise _truncated("generic interface counters", body, _GENERIC.size, length)
            values = _GENERIC.unpack_from(data, body)
            out.append(
                InterfaceCounters(
                    agent,
                    if_index=values[0],
                    in_octets=values[5],
                    in_packets=values[6],
                    out_octets=values[12],
                    out_packets=values[13],
                    sequence=sequence,
                )
            )


def parse_compact(
    data: bytes,
) -> tuple[
    str, int, int, int, tuple[tuple, ...], tuple[InterfaceCounters, ...], tuple[DiscardSample, ...]
]:
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
    their squares, None)]`` in order of first appearance, or None (ingest groups them); and
    their samplers' runs of numbers as ``loss.sampler_runs`` gives them, or None (the loss
    tracker finds them)."""
    fast = _scan(data) if _scan is not None else None
    if fast is None:
        return (*parse_compact_python(data), None, None)
    return _others(data, *fast)


def parse_counted(data: bytes) -> tuple | None:
    """``parse_grouped``'s fields with the *number* of flow samples in place of their tuples,
    for ``Estimator.ingest``'s common case: the compiled scan grouped every sample and found
    each sampler's run of numbers, so no sample needs a tuple of its own. None when that is
    not the case (``parse_grouped`` then); errors as ``parse_grouped``'s."""
    fast = _scan_counted(data) if _scan_counted is not None else None
    return None if fast is None else _others(data, *fast)


def _others(data, agent, sub_agent, number, uptime, flows, others, alike, runs) -> tuple:
    """The compiled scan's result with its counter and discard samples decoded (in order: the
    first malformed one raises, as in Python)."""
    if not others:
        return agent, sub_agent, number, uptime, flows, (), (), alike, runs
    counters: list[InterfaceCounters] = []
    discards: list[DiscardSample] = []
    for fmt, start, end in others:
        if fmt == DISCARDED_PACKET:
            discards.append(_discard_sample(data, start, end, agent))
        else:
            _counter_sample(data, start, end, agent, fmt == COUNTER_SAMPLE_EXPANDED, counters)
    return agent, sub_agent, number, uptime, flows, tuple(counters), tuple(discards), alike, runs


def parse_compact_python(
    data: bytes,
) -> tuple[
    str, int, int, int, tuple[tuple, ...], tuple[InterfaceCounters, ...], tuple[DiscardSample, ...]
]:
    """``parse_compact`` in Python alone: the reference the compiled scan is tested against,
    and the decoder of every datagram the scan leaves (malformed ones)."""
    return _decode(data, _compact)
