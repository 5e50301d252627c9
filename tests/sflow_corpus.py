"""Streams built from real sFlow datagrams (tests/data/sflow, see its README): a captured
datagram is repeated with its datagram and sample sequence numbers and uptime renumbered as the
agent would have sent them, so the loss correction is tested on real layouts (expanded samples,
several samplers per datagram, QinQ headers, agent-side drops)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from cosample.collector.pcap import udp_payloads

CORPUS = Path(__file__).parent / "data" / "sflow"
#: Captures whose samples have a sampling rate above 1 (a 1-in-1 interval has zero width).
TEMPLATES = ("data-1140.pcap", "data-qinq.pcap", "data-sflow-ipv4-data.pcap",
             "data-sflow-expanded-sample.pcap")


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


def template(name: str) -> Template:
    """The first datagram of capture ``name`` with its flow samples' field offsets."""
    from cosample.collector.decode import parse_datagram
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


def stream(base: Template, count: int, *, start: float = 1_700_000_000.0, spacing: float = 0.05,
           first_sequence: int = 1000, uptime_ms: int = 5000) -> list[tuple[float, bytearray]]:
    """``count`` datagrams of ``base`` as its agent would number them, ``spacing`` s apart."""
    out = []
    numbers: dict[int, int] = {}
    for k in range(count):
        data = bytearray(base.data)
        struct.pack_into("!II", data, base.header_sequence, (first_sequence + k) % (1 << 32),
                         int(spacing * k * 1000) + uptime_ms)
        for sequence_at, _, _, source in base.samples:
            numbers[source] = (numbers.get(source, first_sequence) + 1) % (1 << 32)
            struct.pack_into("!I", data, sequence_at, numbers[source])
        out.append((start + spacing * k, data))
    return out


def estimate(base: Template, datagrams, *, window_s: float | None = None):
    """(packets in the window, interval low, interval high, snapshot) of the template's agent,
    sampling at the rate it reports (plan-less attribution by its address)."""
    from cosample.collector.attribution import planless
    from cosample.collector.estimate import Estimator
    from cosample.collector.inventory import Inventory
    inventory = Inventory.model_validate({"servers": {"s": {"agent_ip": base.agent}}})
    estimator = Estimator(planless(inventory), window_s=window_s, name="t")
    last = 0.0
    for when, data in datagrams:
        estimator.ingest(bytes(data), when)
        last = max(last, when)
    snapshot = estimator.snapshot(last)
    row, window = snapshot.servers["s"], snapshot.window_s
    low, high = row.packets_per_s_ci95
    return row.packets_per_s * window, low * window, high * window, snapshot
