"""Read what happened: datapath and kernel packet counters, and sFlow samples by source server.

Counters are read live (``ovs-appctl dpctl/show -s`` for every port of a server's datapath,
``ip -s -j link`` for kernel devices such as the agents' mirror VXLAN devices); OVSDB's
``statistics`` column is refreshed only every 5 s and is not used. A sampled packet is
attributed to its *source* server by its source IP (VM address -> server) and to the server
that *sampled* it by the sFlow agent address (each server's tunnel IP, which OVS picks as the
agent address because the collector is reached through that interface).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cosample.dataplane.run import CommandError, run
from cosample.experiments.testbed.errors import TestbedError
from cosample.lab.sflow import FlowSample

_PORT_LINE = re.compile(r"^\s*port \d+: (\S+)")
_RX_LINE = re.compile(r"^\s*RX packets:(\d+) errors:\d+ dropped:(\d+)")
_TX_LINE = re.compile(r"^\s*TX packets:(\d+) errors:\d+ dropped:(\d+)")


@dataclass(frozen=True)
class PortCounters:
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0

    def __sub__(self, other: "PortCounters") -> "PortCounters":
        return PortCounters(
            self.rx_packets - other.rx_packets,
            self.tx_packets - other.tx_packets,
            self.rx_dropped - other.rx_dropped,
            self.tx_dropped - other.tx_dropped,
        )


Counters = dict[str, dict[str, PortCounters]]  # server -> interface -> counters


def parse_dpctl_show(text: str) -> dict[str, PortCounters]:
    """Per-port counters from ``ovs-appctl dpctl/show -s`` output."""
    ports: dict[str, list[int]] = {}
    current = None
    for line in text.splitlines():
        if match := _PORT_LINE.match(line):
            current = match.group(1)
            ports[current] = [0, 0, 0, 0]
        elif current and (match := _RX_LINE.match(line)):
            ports[current][0], ports[current][2] = int(match.group(1)), int(match.group(2))
        elif current and (match := _TX_LINE.match(line)):
            ports[current][1], ports[current][3] = int(match.group(1)), int(match.group(2))
    return {name: PortCounters(rx, tx, rxd, txd) for name, (rx, tx, rxd, txd) in ports.items()}


def parse_ip_link_stats(text: str) -> dict[str, PortCounters]:
    """Per-interface counters from ``ip -s -j link show`` output."""
    try:
        links = json.loads(text or "[]")
    except json.JSONDecodeError as exc:
        raise TestbedError(f"ip -s -j link: output is not JSON ({exc})") from exc
    out = {}
    for link in links:
        stats = link.get("stats64") or link.get("stats") or {}
        rx, tx = stats.get("rx", {}), stats.get("tx", {})
        out[link["ifname"]] = PortCounters(
            int(rx.get("packets", 0)),
            int(tx.get("packets", 0)),
            int(rx.get("dropped", 0)),
            int(tx.get("dropped", 0)),
        )
    return out


def read_counters(testbed) -> tuple[Counters, Counters]:
    """(datapath counters, kernel counters) of every server, read now."""
    datapath, kernel = {}, {}
    for server in testbed.topology.servers:
        try:
            datapath[server.name] = parse_dpctl_show(testbed.ovs(server).appctl("dpctl/show", "-s"))
        except CommandError as exc:
            raise TestbedError(f"{server.name}: cannot read datapath counters: {exc}") from exc
        kernel[server.name] = parse_ip_link_stats(
            run(["ip", "-n", server.namespace, "-s", "-j", "link", "show"]).stdout
        )
    return datapath, kernel


def delta(after: Counters, before: Counters) -> Counters:
    """Counter increase per server and interface (interfaces absent before count from zero)."""
    return {
        server: {
            name: value - before.get(server, {}).get(name, PortCounters())
            for name, value in ports.items()
        }
        for server, ports in after.items()
    }


@dataclass(frozen=True)
class SampleCounts:
    """sFlow samples of one run, counted by (source server, sampling server)."""

    by_pair: Mapping[tuple[str, str], int]
    unattributed: int  # not IPv4 between testbed VMs (ARP, unknown agent, ...)
    #: per sampling server: samples OVS numbered but the collector never got (sequence gaps)
    lost_in_transit: Mapping[str, int] = field(default_factory=dict)
    #: per source server: samples of the same packet beyond the first (iperf3 packet numbers)
    duplicates: Mapping[str, int] = field(default_factory=dict)
    #: per source server: packets sampled both by their own server and at a receiver
    local_and_mirrored: Mapping[str, int] = field(default_factory=dict)
    #: per source server: packets sampled at two or more receivers (mirrored twice)
    mirrored_twice: Mapping[str, int] = field(default_factory=dict)

    def distinct(self, source: str) -> int:
        """Different packets of ``source`` collected: ``collected`` less repeated samples."""
        return self.collected(source) - self.duplicates.get(source, 0)

    def collected(self, source: str) -> int:
        """Packets of ``source`` that reached an sFlow agent anywhere (its collected volume)."""
        return sum(n for (src, _), n in self.by_pair.items() if src == source)

    def local(self, source: str) -> int:
        return self.by_pair.get((source, source), 0)

    def mirrored(self, source: str) -> int:
        return self.collected(source) - self.local(source)

    def sampled_by(self, sampler: str) -> int:
        return sum(n for (_, by), n in self.by_pair.items() if by == sampler)

    def received_by(self, sampler: str) -> int:
        """Samples ``sampler`` took of other servers' packets (mirrored to it)."""
        return sum(n for (src, by), n in self.by_pair.items() if by == sampler and src != sampler)


def count_samples(
    samples: Iterable[FlowSample],
    server_of_ip: Mapping[str, str],
    server_of_agent: Mapping[str, str],
) -> SampleCounts:
    """Attribute each sample to its source server (by source IP) and sampler (by agent IP)."""
    pairs: Counter[tuple[str, str]] = Counter()
    unattributed = 0
    sequences: dict[str, list[int]] = {}
    samplers_of_packet: dict[tuple, list[str]] = {}
    for sample in samples:
        sequences.setdefault(sample.agent, []).append(sample.sequence)
        source = server_of_ip.get(sample.src_ip or "")
        sampler = server_of_agent.get(sample.agent)
        if source is None or sampler is None:
            unattributed += 1
            continue
        pairs[(source, sampler)] += 1
        key = packet_key(sample)
        if key is not None:
            samplers_of_packet.setdefault((source, key), []).append(sampler)
    lost: Counter[str] = Counter()
    for agent, numbers in sequences.items():
        if agent in server_of_agent:
            lost[server_of_agent[agent]] += sequence_gaps(numbers)
    duplicates: Counter[str] = Counter()
    both: Counter[str] = Counter()
    twice: Counter[str] = Counter()
    for (source, _), samplers in samplers_of_packet.items():
        duplicates[source] += len(samplers) - 1
        receivers = [by for by in samplers if by != source]
        both[source] += bool(receivers) and source in samplers
        twice[source] += len(set(receivers)) > 1
    return SampleCounts(
        dict(pairs), unattributed, dict(lost), dict(duplicates), dict(both), dict(twice)
    )


def packet_key(sample: FlowSample) -> tuple | None:
    """Identity of a sampled iperf3 UDP datagram: addresses, ports and iperf3's packet number.

    iperf3 starts each UDP payload with 32-bit seconds, microseconds and packet count (network
    byte order), all inside the 128 sampled header bytes; None for anything else.
    """
    header = sample.header
    if sample.ip_protocol != 17 or len(header) < 34:
        return None
    offset = 14 + (4 if header[12:14] == b"\x81\x00" else 0)
    udp = offset + (header[offset] & 0x0F) * 4
    if len(header) < udp + 8 + 12:
        return None
    source_port, destination_port = struct.unpack_from("!HH", header, udp)
    number = struct.unpack_from("!I", header, udp + 8 + 8)[0]
    return (sample.src_ip, sample.dst_ip, source_port, destination_port, number)


def sequence_gaps(numbers: Iterable[int]) -> int:
    """Numbers missing from a run of one agent's flow-sample sequence numbers (no 32-bit wrap).

    OVS has one sampler per bridge and numbers its flow samples consecutively (checked here:
    grouping by input port leaves gaps, grouping by agent does not when nothing is lost), so a
    gap is a sample sent but not received: lost between ovs-vswitchd and the collector.
    """
    unique = sorted(set(numbers))
    return unique[-1] - unique[0] + 1 - len(unique) if unique else 0


def binomial_tolerance(
    trials: float, probability: float, sigmas: float = 4.0, slack: float = 0.03
) -> float:
    """Allowed |measured - expected| for a count of ``Binomial(trials, probability)``.

    ``sigmas`` standard deviations plus ``slack`` of the expectation, for what the model does
    not count (iperf3's control connection, ARP, packets in flight when the window closes).
    """
    p = min(max(probability, 0.0), 1.0)
    return sigmas * (trials * p * (1 - p)) ** 0.5 + slack * trials * p + 2.0


def vswitchd_cpu_seconds(testbed) -> dict[str, float]:
    """CPU time (user + system) each server's ovs-vswitchd has used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for server in testbed.topology.servers:
        pidfile = testbed.ovs(server).directory / "ovs-vswitchd.pid"
        try:
            pid = int(pidfile.read_text().strip())
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError) as exc:
            raise TestbedError(f"{server.name}: cannot read ovs-vswitchd CPU time: {exc}") from exc
        out[server.name] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return out
