"""sFlow v5 parsing against hand-built datagrams, and against real OVS on the userspace datapath."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest

from cosample.dataplane.run import run
from cosample.lab.netns import Lab
from cosample.lab.ovs import OvsInstance
from cosample.lab.sflow import SflowCollector, SflowError, parse_datagram


def _raw_header_record(frame: bytes) -> bytes:
    padded = frame + b"\0" * (-len(frame) % 4)
    body = struct.pack("!IIII", 1, len(frame) + 4, 4, len(frame)) + padded
    return struct.pack("!II", 1, len(body)) + body


def _flow_sample(rate: int, frame: bytes) -> bytes:
    record = _raw_header_record(frame)
    body = struct.pack("!IIIIIIII", 7, 3, rate, 1000, 0, 2, 5, 1) + record
    return struct.pack("!II", 1, len(body)) + body


def _datagram(samples: list[bytes]) -> bytes:
    head = struct.pack("!II4sIIII", 5, 1, bytes([10, 0, 0, 9]), 0, 42, 1000, len(samples))
    return head + b"".join(samples)


def _ipv4_frame(src: bytes, dst: bytes) -> bytes:
    ethernet = bytes.fromhex("020000000002020000000001") + struct.pack("!H", 0x0800)
    ip = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]) + src + dst
    return ethernet + ip + b"\0" * 8


def test_parses_flow_sample_addresses_and_rate():
    frame = _ipv4_frame(bytes([10, 1, 0, 1]), bytes([10, 1, 0, 2]))
    datagram = parse_datagram(_datagram([_flow_sample(64, frame)]))
    assert datagram.agent == "10.0.0.9" and datagram.sequence == 42
    (sample,) = datagram.flow_samples
    assert sample.sampling_rate == 64
    assert (sample.src_ip, sample.dst_ip, sample.ip_protocol) == ("10.1.0.1", "10.1.0.2", 17)
    assert sample.src_mac == "02:00:00:00:00:01" and sample.input_port == 2


def test_counting_collector_reads_only_headers():
    frame = _ipv4_frame(bytes([10, 1, 0, 1]), bytes([10, 1, 0, 2]))
    with (
        SflowCollector(decode=False, receive_buffer=1 << 20) as collector,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender,
    ):
        for datagram in (_datagram([_flow_sample(4, frame)] * 3), _datagram([]), b"junk"):
            sender.sendto(datagram, (collector.host, collector.port))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and collector.datagrams + collector.malformed < 3:
            time.sleep(0.05)
    assert (collector.sample_count, collector.datagrams, collector.malformed) == (3, 2, 1)
    assert collector.samples == []


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\0\0\0\4" + b"\0" * 24,
        _datagram([_flow_sample(1, _ipv4_frame(b"\1" * 4, b"\2" * 4))])[:-5],
    ],
)
def test_malformed_datagrams_raise(data):
    with pytest.raises(SflowError):
        parse_datagram(data)


@pytest.mark.root
def test_real_ovs_sflow_reaches_collector(tmp_path, dataplane):
    """Real OVS (netdev datapath) samples 1-in-1 UDP between two namespaces; we decode them."""
    with Lab.unique("csl") as lab:
        switch, a, b = lab.namespace("sw"), lab.namespace("a"), lab.namespace("b")
        lab.veth("cslva", a, address="10.251.0.1/24", host_namespace=switch)
        lab.veth("cslvb", b, address="10.251.0.2/24", host_namespace=switch)
        # the switch reaches our collector over a link of its own: 10.251.1.2 -> 10.251.1.1
        collector = lab.veth(f"{lab.prefix}c", switch, peer="cslc", address="10.251.1.2/24")
        run(["ip", "addr", "add", "10.251.1.1/24", "dev", collector])
        with OvsInstance(tmp_path / "ovs", dummy=False, namespace=switch) as ovs:
            counts, collector = _sample_real_traffic(lab, ovs, a, b)
    assert counts["10.251.0.1"] > 100
    assert collector.malformed == 0
    assert collector.sample_count == len(collector.samples)


def _sample_real_traffic(lab, ovs, a, b):
    """1 s of 64-byte UDP a -> b through an sFlow 1-in-1 bridge; samples counted by source IP."""
    with SflowCollector(host="10.251.1.1") as collector:
        ovs.vsctl("add-br", "cslbr", "--", "set", "bridge", "cslbr", "datapath_type=netdev")
        ovs.vsctl("add-port", "cslbr", "cslva", "--", "add-port", "cslbr", "cslvb")
        ovs.vsctl(
            "--",
            "--id=@s",
            "create",
            "sflow",
            "agent=10.251.1.2",
            f'targets="{collector.target}"',
            "sampling=1",
            "header=128",
            "polling=0",
            "--",
            "set",
            "bridge",
            "cslbr",
            "sflow=@s",
        )
        ovs.wait_for_ports("cslva", "cslvb")
        server = subprocess.Popen(
            lab.exec_argv(b, ["iperf3", "-s", "-1", "-p", "5351"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client = [
                "iperf3",
                "-c",
                "10.251.0.2",
                "-p",
                "5351",
                "-u",
                "-l",
                "64",
                "-b",
                "2M",
                "-t",
                "1",
            ]
            for attempt in range(5):  # the server and ARP through the new bridge take a moment
                time.sleep(0.5)
                if run(lab.exec_argv(a, client), timeout=20, check=False).returncode == 0:
                    break
        finally:
            server.kill()
            server.wait(timeout=5)
        deadline = time.monotonic() + 5
        while (
            time.monotonic() < deadline and not collector.count_by(lambda s: s.src_ip)["10.251.0.1"]
        ):
            time.sleep(0.2)
    return collector.count_by(lambda s: s.src_ip), collector
