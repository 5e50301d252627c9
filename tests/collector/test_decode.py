"""The decoder: every structure OVS sends, every way a datagram can be wrong, and fuzzing."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector.decode import DecodeError, FlowSample, parse_datagram, samples_announced
from cosample.collector.encode import SampleSpec, counter_sample, datagram, flow_sample
from cosample.lab.sflowstream import frame

HEADER, LENGTH = frame("10.1.0.1", "10.2.0.2", 200)


def sample(**fields) -> bytes:
    spec = dict(
        sequence=9,
        sampling_rate=64,
        sample_pool=640,
        header=HEADER,
        frame_length=LENGTH,
        input_port=3,
        output_port=4,
        drops=2,
    )
    spec.update(fields)
    return flow_sample(SampleSpec(**spec))


def test_flow_sample_fields_and_lazy_addresses():
    decoded = parse_datagram(datagram("172.29.0.9", 42, 1000, [sample()]))
    assert (decoded.agent, decoded.sequence, decoded.uptime_ms) == ("172.29.0.9", 42, 1000)
    (s,) = decoded.flow_samples
    assert (s.sequence, s.sampling_rate, s.sample_pool, s.drops) == (9, 64, 640, 2)
    assert (s.input_port, s.output_port, s.frame_length) == (3, 4, LENGTH)
    assert (s.src_ip, s.dst_ip, s.ip_protocol) == ("10.1.0.1", "10.2.0.2", 17)
    assert s.src_mac == "02:00:00:00:00:01" and s.dst_mac == "02:00:00:00:00:02"
    assert s.tunnel_src is None and s.vni is None


def test_tunnel_ingress_records_as_ovs_lays_them_out():
    """Tag 1024 is sampled_ipv4 (length, protocol, src, dst, ports, flags, tos); tag 1030 a VNI."""
    raw = sample(tunnel_src="172.29.0.1", tunnel_dst="172.29.0.2", vni=0xABCDE)
    (s,) = parse_datagram(datagram("172.29.0.2", 1, 0, [raw])).flow_samples
    assert (s.tunnel_src, s.tunnel_dst, s.vni) == ("172.29.0.1", "172.29.0.2", 0xABCDE)
    assert s.src_ip == "10.1.0.1"  # the inner (VM) packet


def test_expanded_flow_sample_and_unknown_records_are_read():
    inner = struct.pack("!II", 1001, 16) + bytes(16)  # extended switch, skipped by length
    header = HEADER + bytes(-len(HEADER) % 4)
    raw = (
        struct.pack("!II", 1, 16 + len(header))
        + struct.pack("!IIII", 1, LENGTH, 4, len(HEADER))
        + header
    )
    body = struct.pack("!IIIIIIIIIII", 5, 0, 1000, 8, 80, 0, 0, 7, 0, 9, 2) + inner + raw
    data = datagram(
        "10.0.0.1",
        1,
        0,
        [struct.pack("!II", 3, len(body)) + body, struct.pack("!II", 99, 4) + b"\0\0\0\0"],
    )
    (s,) = parse_datagram(data).flow_samples
    assert (s.sequence, s.sampling_rate, s.input_port, s.output_port) == (5, 8, 7, 9)
    assert s.source_index == 1000 and s.src_ip == "10.1.0.1"


def test_generic_interface_counters():
    decoded = parse_datagram(
        datagram("10.0.0.1", 1, 0, [counter_sample(3, 12, 1000, 2000, 64000, 128000)])
    )
    (c,) = decoded.counters
    assert (c.if_index, c.in_packets, c.out_packets, c.in_octets, c.out_octets) == (
        12,
        1000,
        2000,
        64000,
        128000,
    )
    assert decoded.counter_samples == 1 and decoded.flow_samples == ()


def test_ipv6_agent_address():
    head = struct.pack("!II", 5, 2) + bytes(15) + b"\1" + struct.pack("!IIII", 0, 1, 2, 1)
    decoded = parse_datagram(head + sample())
    assert decoded.agent == "::1" and len(decoded.flow_samples) == 1


GOOD = datagram("10.0.0.1", 1, 0, [sample(), sample(tunnel_src="10.0.0.2", vni=5)])


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "truncated"),
        (GOOD[:20], "truncated"),
        (GOOD[:-3], "truncated"),
        (GOOD[:-40], "truncated"),
        (struct.pack("!I", 4) + GOOD[4:], "bad_version"),
        (GOOD[:4] + struct.pack("!I", 7) + GOOD[8:], "bad_address_type"),
        (GOOD[:24] + struct.pack("!I", 10**6) + GOOD[28:], "bad_count"),
        (GOOD + bytes(70000), "oversized"),
    ],
)
def test_bad_datagrams_name_their_reason(data, reason):
    with pytest.raises(DecodeError) as caught:
        parse_datagram(data)
    assert caught.value.reason == reason


def test_samples_announced_reads_only_the_header():
    assert samples_announced(GOOD) == 2
    with pytest.raises(DecodeError):
        samples_announced(b"\0\0\0\5")


def test_lab_collector_uses_the_same_decoder():
    from cosample.lab import sflow

    assert sflow.parse_datagram is parse_datagram and sflow.SflowError is DecodeError


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_only_ever_raise_decode_errors(data):
    try:
        parse_datagram(data)
    except DecodeError as exc:
        assert exc.reason
    try:
        parse_datagram(b"\0\0\0\5\0\0\0\1" + data)
    except DecodeError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_datagrams_only_ever_raise_decode_errors(data):
    raw = bytearray(GOOD)
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        parse_datagram(bytes(raw[:cut]))
    except DecodeError:
        pass


def test_fuzz_a_hundred_thousand_datagrams_through_the_estimator(four_plan):
    """10^5 random and mutated datagrams: the estimator counts each one and never raises."""
    from cosample.collector.attribution import build
    from cosample.collector.estimate import Estimator

    rng = random.Random(11)
    estimator = Estimator(build(four_plan), window_s=30.0)
    valid = datagram(
        "172.29.0.2",
        1,
        0,
        [sample(), sample(tunnel_src="172.29.0.1", vni=77), counter_sample(1, 2, 3, 4)],
    )
    total = 100_000
    for k in range(total):
        kind = k % 3
        if kind == 0:
            data = rng.randbytes(rng.randrange(0, 300))
        else:
            raw = bytearray(valid)
            for _ in range(rng.randrange(1, 6)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            data = bytes(raw[: rng.randrange(len(raw) + 1)] if kind == 1 else raw)
        estimator.ingest(data, 1.7e9 + k * 1e-4)
    snapshot = estimator.snapshot()
    assert estimator.datagrams + sum(snapshot.dropped.values()) >= total - 1
    assert (
        sum(
            v
            for k, v in snapshot.dropped.items()
            if k in ("truncated", "bad_version", "bad_address_type", "bad_count", "oversized")
        )
        + estimator.datagrams
        == total
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_fast_path_decoder_agrees_with_the_record_decoder(data):
    """``parse_compact`` (the estimator's) gives the same fields and the same drop reasons."""
    from cosample.collector.decode import parse_compact
    from cosample.collector.records import flow_record

    raw = bytearray(GOOD)
    for _ in range(data.draw(st.integers(0, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    try:
        full = parse_datagram(raw)
    except DecodeError as exc:
        with pytest.raises(DecodeError) as caught:
            parse_compact(raw)
        assert caught.value.reason == exc.reason
        return
    agent, _, number, uptime, flows, counters, discards = parse_compact(raw)
    assert agent == full.agent and counters == full.counters and discards == full.discards
    assert (number, uptime) == (full.sequence, full.uptime_ms)
    assert [flow_record(agent, f, raw) for f in flows] == [
        FlowSample(
            s.agent,
            s.sequence,
            s.sampling_rate,
            0,
            s.drops,
            s.input_port,
            s.output_port,
            s.frame_length,
            s.header,
            s.outer_src,
            None,
            s.vni,
            s.source_index,
            s.header_protocol,
        )
        for s in full.flow_samples
    ]


def test_a_synthetic_streams_samples_are_flow_samples_bytes(four_plan):
    """``sflowstream`` patches each sample's sequence number and pool into bytes it encoded once
    per kind: every datagram is what ``flow_sample`` and ``datagram`` make of its decoded
    fields, each agent numbers its samples 1, 2, 3, ... and its pool grows by each rate."""
    from cosample.lab.sflowstream import simulate

    stream = simulate(four_plan, {name: 3000 for name in four_plan.hosts}, start=1e6, seed=5)
    assert stream.by_kind["mirrored"] > 0
    numbered: dict = {}
    for _, data in stream.datagrams:
        decoded = parse_datagram(data)
        again = [
            flow_sample(
                SampleSpec(
                    f.sequence,
                    f.sampling_rate,
                    f.sample_pool,
                    f.header,
                    f.frame_length,
                    f.input_port,
                    f.output_port,
                    f.drops,
                    f.source_index,
                    f.tunnel_src,
                    f.tunnel_dst,
                    f.vni,
                )
            )
            for f in decoded.flow_samples
        ]
        assert datagram(decoded.agent, decoded.sequence, decoded.uptime_ms, again) == data
        for f in decoded.flow_samples:
            sequence, pool = numbered.get(f.agent, (0, 0))
            assert (f.sequence, f.sample_pool) == (sequence + 1, pool + f.sampling_rate)
            numbered[f.agent] = (f.sequence, f.sample_pool)
    assert sum(sequence for sequence, _ in numbered.values()) == stream.samples
