"""Synthetic sFlow streams from a plan, laid out as OVS sends them: for tests and the benchmark.

Each server's VMs send a known number of packets; every packet is sampled by its own bridge with
probability ``1/N`` and, independently, copied to at most one receiver (exclusive mirror shares)
whose bridge samples the copy with its own ``1/N`` and reports it with tunnel-ingress records
(outer source = the sender's ``tunnel_ip``, VNI = the pair's key). Samples are packed into
datagrams per agent (flushed when full or after a second, as OVS does) with consecutive sequence
numbers and a growing sample pool. Optional tenant overlay samples and interface counters.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import repeat

import numpy as np

from cosample.collector.encode import (
    DATAGRAM_BUDGET_BYTES,
    SampleSpec,
    counter_sample,
    datagram,
    flow_sample,
)
from cosample.dataplane.tunnels import pair_vni
from cosample.plan.document import Plan

OVERLAY_VNI = 5001  # a tenant network's VNI (no mirror pair key in tests collides with it)


def vm_address(server_index: int, vm: int = 1) -> str:
    return f"10.{100 + server_index // 250}.{server_index % 250}.{vm}"


def frame(src: str, dst: str, length: int) -> tuple[bytes, int]:
    """A 128-byte-or-shorter Ethernet + IPv4 + UDP header of a ``length``-byte frame."""
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        length - 14,
        0,
        0,
        64,
        17,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    udp = struct.pack("!HHHH", 40000, 5201, length - 34, 0)
    head = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + ip + udp
    return (head + bytes(max(0, min(128, length) - len(head))))[:128], length + 4


@dataclass
class Stream:
    """The datagrams (time, bytes), sorted by time, and the truth they were drawn from."""

    datagrams: list[tuple[float, bytes]]
    packets: dict[str, int]
    duration_s: float
    samples: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def simulate(
    plan: Plan,
    packets: Mapping[str, int],
    *,
    duration_s: float = 10.0,
    start: float | None = None,
    seed: int = 0,
    frame_bytes: int = 1000,
    destinations: Mapping[str, str] | None = None,
    overlay_samples: int = 0,
    counters: bool = False,
) -> Stream:
    """Sample ``packets[server]`` packets per server over ``duration_s`` as the plan says.

    ``start`` (Unix seconds) defaults to ``duration_s`` before now, so captures are recent.
    """
    if start is None:
        start = float(int(time.time() - duration_s - 1))
    rng = np.random.default_rng(seed)
    names = sorted(plan.hosts)
    pending: dict[str, list[tuple[float, SampleSpec]]] = {}
    by_kind = {"local": 0, "mirrored": 0, "overlay": 0}
    _draw(pending, by_kind, plan, packets, start, duration_s, rng, frame_bytes, destinations)
    if overlay_samples and len(names) > 1:
        sender, receiver = plan.hosts[names[0]], plan.hosts[names[1]]
        header, length = frame(vm_address(0), vm_address(1, 2), frame_bytes)
        _add(
            pending,
            agent_address(plan, names[1]),
            rng.uniform(start, start + duration_s, overlay_samples),
            SampleSpec(
                0,
                receiver.sflow_sampling or 1,
                0,
                header,
                length,
                tunnel_src=sender.tunnel_ip,
                tunnel_dst=receiver.tunnel_ip,
                vni=OVERLAY_VNI,
            ),
        )
        by_kind["overlay"] += overlay_samples
    out: list[tuple[float, bytes]] = []
    for agent, items in pending.items():
        out.extend(_datagrams(agent, sorted(items, key=lambda item: item[0]), start, counters))
    out.sort(key=lambda item: item[0])
    return Stream(
        out, {n: int(packets.get(n, 0)) for n in names}, duration_s, sum(by_kind.values()), by_kind
    )


def _draw(
    pending,
    by_kind,
    plan: Plan,
    packets: Mapping[str, int],
    start: float,
    duration_s: float,
    rng,
    frame_bytes: int,
    destinations: Mapping[str, str] | None,
) -> None:
    """Sample each server's ``packets`` (uniform over the interval) as ``plan`` says."""
    names = sorted(plan.hosts)
    index = {name: k for k, name in enumerate(names)}
    for name in names:
        host, total = plan.hosts[name], int(packets.get(name, 0))
        dst_name = (destinations or {}).get(name, name)
        header, length = frame(vm_address(index[name]), vm_address(index[dst_name], 2), frame_bytes)
        shares = [(m.peer, m.rate) for m in host.mirrors]
        local_n = rng.binomial(total, 1.0 / host.sflow_sampling) if host.sflow_sampling else 0
        _add(
            pending,
            agent_address(plan, name),
            rng.uniform(start, start + duration_s, local_n),
            SampleSpec(0, host.sflow_sampling or 1, 0, header, length, input_port=index[name] + 1),
        )
        by_kind["local"] += local_n
        if shares:
            probabilities = [
                rate / (plan.hosts[peer].sflow_sampling or 1e18) for peer, rate in shares
            ]
            counts = rng.multinomial(total, probabilities + [max(0.0, 1 - sum(probabilities))])
            for (peer, _), count in zip(shares, counts):
                receiver = plan.hosts[peer]
                _add(
                    pending,
                    agent_address(plan, peer),
                    rng.uniform(start, start + duration_s, count),
                    SampleSpec(
                        0,
                        receiver.sflow_sampling or 1,
                        0,
                        header,
                        length,
                        input_port=0,
                        tunnel_src=host.tunnel_ip,
                        tunnel_dst=receiver.tunnel_ip,
                        vni=pair_vni(name, peer),
                    ),
                )
                by_kind["mirrored"] += int(count)


def agent_address(plan: Plan, host: str) -> str:
    """The address a host's sFlow agent sends from: the plan's ``agent_ip`` when the host entry
    has one (the collector's attribution honours it too), else its ``tunnel_ip``."""
    value = (plan.raw or {}).get("hosts", {}).get(host, {}).get("agent_ip")
    address = value if isinstance(value, str) and value else plan.hosts[host].tunnel_ip
    if address is None:
        raise ValueError(f"{host}: the plan gives it no agent_ip or tunnel_ip to send from")
    return address


def _add(pending, agent: str, times, spec: SampleSpec) -> None:
    bucket = pending.setdefault(agent, [])
    bucket.extend(zip(np.asarray(times, dtype=float).tolist(), repeat(spec)))


def _datagrams(
    agent: str, items: list[tuple[float, SampleSpec]], start: float, counters: bool
) -> list[tuple[float, bytes]]:
    out: list[tuple[float, bytes]] = []
    batch: list[bytes] = []
    size, opened, sequence, pool, number = 0, None, 0, 0, 0
    # each spec's sample encoded once; per sample only its sequence and pool differ
    templates: dict[int, tuple[bytes, bytes, bytes]] = {}
    word = struct.Struct("!I").pack
    budget = DATAGRAM_BUDGET_BYTES - 28

    def flush(when: float) -> None:
        nonlocal batch, size, opened, number
        if batch:
            number += 1
            out.append((when, datagram(agent, number, int((when - start) * 1000), batch)))
        batch, size, opened = [], 0, None

    for when, spec in items:
        if opened is not None and when - opened >= 1.0:
            flush(opened + 1.0)
        sequence += 1
        pool += spec.sampling_rate
        parts = templates.get(id(spec))
        if parts is None:
            parts = templates[id(spec)] = _sample_template(spec)
        head, middle, tail = parts
        encoded = head + word(sequence) + middle + word(pool & 0xFFFFFFFF) + tail
        if size + len(encoded) > budget:
            flush(when)
        if opened is None:
            opened = when
        batch.append(encoded)
        size += len(encoded)
    if batch:
        flush(items[-1][0])
    if counters and items:
        end = items[-1][0]
        for k, when in enumerate((start, end)):
            out.append(
                (
                    when,
                    datagram(
                        agent,
                        number + 1 + k,
                        0,
                        [
                            counter_sample(
                                k + 1,
                                7,
                                1000 * k * int(end - start + 1),
                                500 * k * int(end - start + 1),
                            )
                        ],
                    ),
                )
            )
    return out


def _sample_template(spec: SampleSpec) -> tuple[bytes, bytes, bytes]:
    """``flow_sample(spec)`` around its sequence number and sample pool: the bytes before the
    one (after the record's format and length), between the two, and after the other."""
    encoded = flow_sample(replace(spec, sequence=0, sample_pool=0))
    return encoded[:8], encoded[12:20], encoded[24:]


def plan_change(
    before: Plan,
    after: Plan,
    packets_per_s: Mapping[str, float],
    *,
    change_s: float,
    duration_s: float,
    start: float,
    seed: int = 0,
    frame_bytes: int = 1000,
) -> Stream:
    """Steady traffic sampled under ``before`` until ``start + change_s``, then under ``after``.

    ``change_s`` is when the *agents* apply the new plan (a collector sees it earlier or later).
    Each agent packs the samples of both plans into one run of datagrams, as OVS does.
    """
    rng = np.random.default_rng(seed)
    pending: dict[str, list[tuple[float, SampleSpec]]] = {}
    by_kind = {"local": 0, "mirrored": 0, "overlay": 0}
    for plan, begin, length in (
        (before, start, change_s),
        (after, start + change_s, duration_s - change_s),
    ):
        if length > 0:
            counts = {name: int(round(rate * length)) for name, rate in packets_per_s.items()}
            _draw(pending, by_kind, plan, counts, begin, length, rng, frame_bytes, None)
    out: list[tuple[float, bytes]] = []
    for agent, items in pending.items():
        out.extend(_datagrams(agent, sorted(items, key=lambda item: item[0]), start, False))
    out.sort(key=lambda item: item[0])
    return Stream(
        out,
        {name: int(round(rate * duration_s)) for name, rate in packets_per_s.items()},
        duration_s,
        sum(by_kind.values()),
        by_kind,
    )
