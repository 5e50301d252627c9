"""Counter parsers, sample attribution and tolerances (pure; the integration test reads the real thing)."""

from __future__ import annotations

import json

import pytest

from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.measure import (
    PortCounters,
    binomial_tolerance,
    count_samples,
    delta,
    parse_dpctl_show,
    parse_ip_link_stats,
)
from cosample.lab.sflow import FlowSample

# Captured from `ovs-appctl dpctl/show -s` of a testbed server (OVS 3.1, netdev datapath).
DPCTL = """netdev@ovs-netdev:
  lookups: hit:605 missed:41 lost:0
  flows: 41
  port 0: ovs-netdev (tap)
    RX packets:0 errors:0 dropped:0 overruns:0 frame:0
    TX packets:0 errors:0 dropped:0 aborted:0 carrier:0
    collisions:0
    RX bytes:0  TX bytes:0
  port 2: ct1ul
    RX packets:65 errors:0 dropped:3 overruns:0 frame:0
    TX packets:299 errors:0 dropped:0 aborted:0 carrier:0
    collisions:0
    RX bytes:6640 (6.5 KiB)  TX bytes:53503 (52.2 KiB)
  port 7: vxlan_sys_4789 (vxlan: packet_type=ptap)
    RX packets:3007 errors:0 dropped:0 overruns:0 frame:0
    TX packets:0 errors:0 dropped:9 aborted:0 carrier:0
"""


def test_parse_dpctl_show():
    ports = parse_dpctl_show(DPCTL)
    assert ports["ct1ul"] == PortCounters(65, 299, 3, 0)
    assert ports["vxlan_sys_4789"] == PortCounters(3007, 0, 0, 9)
    assert ports["ovs-netdev"] == PortCounters()


def test_parse_ip_link_stats_and_delta():
    text = json.dumps(
        [
            {
                "ifname": "cosm-1",
                "stats64": {
                    "rx": {"packets": 1, "dropped": 0},
                    "tx": {"packets": 50, "dropped": 2},
                },
            },
            {"ifname": "lo", "stats64": {"rx": {"packets": 7}, "tx": {"packets": 7}}},
        ]
    )
    now = {"s1": parse_ip_link_stats(text)}
    before = {"s1": {"cosm-1": PortCounters(1, 20, 0, 0)}}
    assert delta(now, before)["s1"]["cosm-1"] == PortCounters(0, 30, 0, 2)
    assert delta(now, before)["s1"]["lo"] == PortCounters(7, 7, 0, 0)  # new interfaces count from 0
    with pytest.raises(TestbedError, match="not JSON"):
        parse_ip_link_stats("{")


def _sample(agent: str, src: str | None, sequence: int = 1) -> FlowSample:
    """A sample of a UDP packet from ``src`` (None: a frame that is not IPv4)."""
    from cosample.lab.sflowstream import frame

    header = frame(src, "10.77.2.9", 100)[0][:42] if src else bytes(60)  # up to UDP, no payload
    return FlowSample(
        agent=agent,
        sequence=sequence,
        sampling_rate=1,
        sample_pool=1,
        drops=0,
        input_port=1,
        output_port=2,
        header=header,
    )


def test_samples_go_to_their_source_server_wherever_they_were_taken():
    server_of_ip = {"10.77.1.1": "s1", "10.77.2.1": "s2"}
    server_of_agent = {"172.29.77.1": "s1", "172.29.77.2": "s2"}
    samples = (
        [_sample("172.29.77.1", "10.77.1.1")] * 5  # s1 sampled its own
        + [_sample("172.29.77.2", "10.77.1.1")] * 3  # s2 sampled s1's mirrored packets
        + [_sample("172.29.77.2", "10.77.2.1")] * 4  # s2 sampled its own
        + [_sample("172.29.77.2", None), _sample("10.0.0.9", "10.77.2.1")]
    )
    counts = count_samples(samples, server_of_ip, server_of_agent)
    assert (counts.collected("s1"), counts.local("s1"), counts.mirrored("s1")) == (8, 5, 3)
    assert (counts.collected("s2"), counts.received_by("s2"), counts.sampled_by("s2")) == (4, 3, 7)
    assert counts.unattributed == 2


def test_binomial_tolerance_grows_like_the_standard_deviation():
    assert binomial_tolerance(10_000, 0.5, sigmas=4, slack=0) == pytest.approx(4 * 50 + 2)
    assert binomial_tolerance(10_000, 1.0, sigmas=4, slack=0) == pytest.approx(2)
    assert binomial_tolerance(10_000, 0.1) > binomial_tolerance(100, 0.1)


def test_sequence_gaps_count_samples_lost_on_the_way():
    from cosample.experiments.testbed.measure import sequence_gaps

    assert sequence_gaps([5, 6, 7]) == 0
    assert sequence_gaps([7, 5, 9, 9]) == 2
    assert sequence_gaps([]) == 0
    samples = [_sample("172.29.77.1", "10.77.1.1", seq) for seq in (1, 2, 5)]
    counts = count_samples(samples, {"10.77.1.1": "s1"}, {"172.29.77.1": "s1"})
    assert counts.lost_in_transit == {"s1": 2}


def _iperf3_sample(agent: str, number: int) -> FlowSample:
    """A sample whose header is Ethernet + IPv4 + UDP + iperf3's (sec, usec, packet number)."""
    import struct

    ethernet = bytes(12) + b"\x08\x00"
    ip = bytes([0x45]) + bytes(8) + bytes([17]) + bytes(2) + bytes([10, 77, 1, 1, 10, 77, 2, 1])
    udp = struct.pack("!HHHH", 40000, 5201, 20, 0)
    payload = struct.pack("!III", 1, 2, number)
    return FlowSample(agent, number, 1, 1, 0, 1, 2, header=ethernet + ip + udp + payload)


def test_packets_sampled_twice_are_recognised_by_their_iperf3_number():
    from cosample.experiments.testbed.measure import packet_key

    assert packet_key(_iperf3_sample("a", 7)) == ("10.77.1.1", "10.77.2.1", 40000, 5201, 7)
    assert packet_key(_sample("a", "10.77.1.1")) is None  # no header: not an iperf3 datagram
    agents = {"172.29.77.1": "s1", "172.29.77.2": "s2", "172.29.77.3": "s3"}
    samples = [_iperf3_sample("172.29.77.1", n) for n in (1, 2, 3)]  # s1 samples its own
    samples += [_iperf3_sample("172.29.77.2", n) for n in (3, 4, 5)]  # 3 also mirrored to s2
    samples += [_iperf3_sample("172.29.77.3", n) for n in (5, 6)]  # 5 mirrored to s3 too
    counts = count_samples(samples, {"10.77.1.1": "s1", "10.77.2.1": "s2"}, agents)
    assert counts.collected("s1") == 8 and counts.distinct("s1") == 6
    assert counts.local_and_mirrored == {"s1": 1} and counts.mirrored_twice == {"s1": 1}
