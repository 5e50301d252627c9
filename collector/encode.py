"""sFlow v5 encoding: typed records -> datagram bytes (the decoder's inverse, for what we send).

Used by the re-export to downstream collectors (samples re-sent under their origin server's agent
address with the renormalised rate), and by tests and the benchmark to build streams exactly as
OVS lays them out (``decode`` documents the layout).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cosample.collector.decode import (
    COUNTER_SAMPLE,
    DISCARDED_PACKET,
    FLOW_SAMPLE,
    GENERIC_INTERFACE_COUNTERS,
    RAW_PACKET_HEADER,
    TUNNEL_IPV4_INGRESS,
    VNI_INGRESS,
)

#: sFlow agents keep datagrams within a common MTU; so does the re-export.
DATAGRAM_BUDGET_BYTES = 1400
_ETHERNET = 1


@dataclass(frozen=True, slots=True)
class SampleSpec:
    """What to put in one flow sample."""

    sequence: int
    sampling_rate: int
    sample_pool: int
    header: bytes
    frame_length: int
    input_port: int = 0
    output_port: int = 0
    drops: int = 0
    source_index: int = 1000
    tunnel_src: str | None = None
    tunnel_dst: str | None = None
    vni: int | None = None


def _record(fmt: int, body: bytes) -> bytes:
    return struct.pack("!II", fmt, len(body)) + body


def flow_sample(spec: SampleSpec) -> bytes:
    """One flow sample (format 1) with the raw header and, if given, tunnel-ingress records."""
    header = spec.header + b"\0" * (-len(spec.header) % 4)
    records = [
        _record(
            RAW_PACKET_HEADER,
            struct.pack("!IIII", _ETHERNET, spec.frame_length, 4, len(spec.header)) + header,
        )
    ]
    if spec.tunnel_src is not None:
        records.append(
            _record(
                TUNNEL_IPV4_INGRESS,
                struct.pack(
                    "!II4s4sIIII",
                    0,
                    17,
                    socket.inet_aton(spec.tunnel_src),
                    socket.inet_aton(spec.tunnel_dst or "0.0.0.0"),
                    0,
                    4789,
                    0,
                    0,
                ),
            )
        )
    if spec.vni is not None:
        records.append(_record(VNI_INGRESS, struct.pack("!I", spec.vni)))
    body = struct.pack(
        "!IIIIIIII",
        spec.sequence,
        spec.source_index & 0xFFFFFF,
        spec.sampling_rate,
        spec.sample_pool & 0xFFFFFFFF,
        spec.drops,
        spec.input_port,
        spec.output_port,
        len(records),
    ) + b"".join(records)
    return _record(FLOW_SAMPLE, body)


def discard_sample(
    sequence: int,
    reason: int,
    header: bytes,
    frame_length: int,
    source_index: int = 1000,
    drops: int = 0,
    input_port: int = 1,
    output_port: int = 0,
) -> bytes:
    """One discarded-packet sample (format 5, sflow_drops.txt) with the packet's header."""
    padded = header + b"\0" * (-len(header) % 4)
    record = _record(
        RAW_PACKET_HEADER, struct.pack("!IIII", _ETHERNET, frame_length, 4, len(header)) + padded
    )
    body = (
        struct.pack(
            "!IIIIIIII", sequence, 0, source_index, drops, input_port, output_port, reason, 1
        )
        + record
    )
    return _record(DISCARDED_PACKET, body)


def counter_sample(
    sequence: int,
    if_index: int,
    in_packets: int,
    out_packets: int,
    in_octets: int = 0,
    out_octets: int = 0,
) -> bytes:
    """One counter sample (format 2) with generic interface counters, as OVS fills them."""
    generic = struct.pack(
        "!IIQIIQIIIIIIQIIIIII",
        if_index,
        6,
        10**9,
        1,
        3,
        in_octets,
        in_packets & 0xFFFFFFFF,
        0,
        0xFFFFFFFF,
        0,
        0,
        0xFFFFFFFF,
        out_octets,
        out_packets & 0xFFFFFFFF,
        0xFFFFFFFF,
        0xFFFFFFFF,
        0,
        0,
        0,
    )
    body = struct.pack("!III", sequence, if_index, 1) + _record(GENERIC_INTERFACE_COUNTERS, generic)
    return _record(COUNTER_SAMPLE, body)


def datagram(
    agent: str, sequence: int, uptime_ms: int, samples: Sequence[bytes], sub_agent: int = 0
) -> bytes:
    """A datagram from an IPv4 agent holding already encoded samples."""
    head = struct.pack(
        "!II4sIIII",
        5,
        1,
        socket.inet_aton(agent),
        sub_agent,
        sequence & 0xFFFFFFFF,
        uptime_ms & 0xFFFFFFFF,
        len(samples),
    )
    return head + b"".join(samples)


def pack(samples: Iterable[bytes], budget: int = DATAGRAM_BUDGET_BYTES) -> list[list[bytes]]:
    """Samples grouped so every datagram stays within ``budget`` bytes (at least one each)."""
    groups: list[list[bytes]] = []
    size = budget
    for sample in samples:
        if size + len(sample) > budget - 28:
            groups.append([])
            size = 0
        groups[-1].append(sample)
        size += len(sample)
    return groups
