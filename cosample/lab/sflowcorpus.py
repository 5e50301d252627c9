"""sFlow streams built from real datagrams: a captured datagram repeated with its datagram and
sample sequence numbers and uptime renumbered as its agent would have sent them. The loss
correction's tests and the collector benchmark use them, so both run on real layouts (expanded
samples, several samplers per datagram, QinQ headers, agent-side drops), not only on ours."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from cosample.collector.decode import parse_datagram
from cosample.collector.pcap import udp_payloads

#: The real captures kept with the project (source and licence in its README).
CORPUS = Path(__file__).resolve().parents[2] / "tests" / "data" / "sflow"


@dataclass(frozen=True)
class Template:
    """One real datagram and where its sequence-bearing fields are."""

    data: bytes
    agent: str
    header_sequence: int  # offset of the datagram sequence number; uptime follows it
    samples: tuple[tuple[int, int, int, int], ...]  # (sequence, source id, drops offset, source)

    @property
    def uptime(self) -> int:
        return self.header_sequence + 4


def template(name: str | Path) -> Template:
    """The first datagram of capture ``name`` (in ``CORPUS``, or a path) with its flow samples'
    field offsets."""
    data = next(udp_payloads(CORPUS / name))[1]
    ipv6 = struct.unpack_from("!I", data, 4)[0] == 2
    offset = 40 if ipv6 else 28
    samples = []
    for _ in range(struct.unpack_from("!I", data, offset - 4)[0]):
        fmt, length = struct.unpack_from("!II", data, offset)
        body = offset + 8
        if fmt == 1:
            samples.append((body, body + 4, body + 16, struct.unpack_from("!I", data, body + 4)[0]))
        elif fmt == 3:
            samples.append((body, body + 8, body + 20, struct.unpack_from("!I", data, body + 8)[0]))
        offset = body + length
    return Template(data, parse_datagram(data).agent, 32 if ipv6 else 16, tuple(samples))


def stream(
    base: Template,
    count: int,
    *,
    start: float = 1_700_000_000.0,
    spacing: float = 0.05,
    first_sequence: int = 1000,
    uptime_ms: int = 5000,
) -> list[tuple[float, bytearray]]:
    """``count`` datagrams of ``base`` as its agent would number them, ``spacing`` s apart."""
    out = []
    numbers: dict[int, int] = {}
    for k in range(count):
        data = bytearray(base.data)
        struct.pack_into(
            "!II",
            data,
            base.header_sequence,
            (first_sequence + k) % (1 << 32),
            int(spacing * k * 1000) + uptime_ms,
        )
        for sequence_at, _, _, source in base.samples:
            numbers[source] = (numbers.get(source, first_sequence) + 1) % (1 << 32)
            struct.pack_into("!I", data, sequence_at, numbers[source])
        out.append((start + spacing * k, data))
    return out
