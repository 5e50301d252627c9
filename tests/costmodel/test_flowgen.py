"""costmodel.flowgen: the flow schedule, the datagrams and the pacing (pure), the settings and
command line that choose it, then the real sender on loopback (root: a raw socket)."""

from __future__ import annotations

import json
import socket
import struct
from collections import Counter

import pytest

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.flowgen import (
    FIRST_PORT,
    MAX_BATCH,
    PORTS,
    FlowProfile,
    due,
    parse_sender_output,
    sender_argv,
    sink_argv,
    udp_datagram,
)
from cosample.costmodel.trials import CalibrationSettings


def test_concurrent_flows_take_turns_and_last_the_run():
    profile = FlowProfile(flows=1024)
    first_round = [profile.flow_of(p) for p in range(1024)]
    assert sorted(first_round) == list(range(1024))
    assert all(profile.flow_of(p + 1024 * 37) == profile.flow_of(p) for p in (0, 5, 1023))
    assert profile.tuples == 1024 and profile.new_flows_per_s(20_000) == 0.0


def test_short_flows_have_their_packets_then_give_way_to_new_5_tuples():
    profile = FlowProfile(flows=64, flow_packets=4)
    packets = Counter(profile.flow_of(p) for p in range(64 * 4 * 10))
    assert len(packets) == 640 and set(packets.values()) == {4}  # 640 flows of 4 packets each
    ports = [profile.source_port(p) for p in range(64 * 4 * 10)]
    assert len(set(ports)) == 640 and min(ports) == FIRST_PORT
    assert profile.new_flows_per_s(20_000) == 5_000
    # the port space wraps after PORTS flows: a 5-tuple recurs only then
    wrap = 64 * 4 * (PORTS // 64)
    assert profile.source_port(wrap) != profile.source_port(0) or PORTS % 64 == 0
    assert profile.source_port(PORTS * 4) == FIRST_PORT + (PORTS * 4 // 64 // 4 * 64) % PORTS


@pytest.mark.parametrize(
    "profile", [FlowProfile(3), FlowProfile(5, 2), FlowProfile(64, 4), FlowProfile(PORTS, 1)]
)
def test_the_bulk_schedule_is_the_per_packet_one(profile):
    first = 123_457
    indices = profile.tuple_indices(first, 700)
    assert [FIRST_PORT + i for i in indices] == [
        profile.source_port(p) for p in range(first, first + 700)
    ]
    assert max(indices) < profile.tuples


@pytest.mark.parametrize(
    "flows, flow_packets, message",
    [
        (0, 0, "flows must be 1.."),
        (PORTS + 1, 0, "flows must be 1.."),
        (2.5, 0, "flows must be"),
        (4, -1, "flow packets must be"),
    ],
)
def test_impossible_profiles_are_refused(flows, flow_packets, message):
    with pytest.raises(HarnessError, match=message):
        FlowProfile(flows, flow_packets)


def test_the_datagram_is_ipv4_udp_to_the_port_with_the_kernel_filling_the_rest():
    payload = bytes(range(64))
    datagram = udp_datagram("10.99.0.1", "10.99.0.2", 4242, 5272, payload)
    (version_ihl, _, total, ident, fragment, ttl, protocol, checksum, source, destination) = (
        struct.unpack_from("!BBHHHBBH4s4s", datagram)
    )
    assert (version_ihl, total, ttl, protocol) == (0x45, 20 + 8 + 64, 64, 17)
    assert (ident, checksum) == (0, 0) and fragment == 0x4000  # don't fragment
    assert socket.inet_ntoa(source) == "10.99.0.1" and socket.inet_ntoa(destination) == "10.99.0.2"
    assert struct.unpack_from("!HHHH", datagram, 20) == (4242, 5272, 72, 0)
    assert datagram[28:] == payload


def test_pacing_keeps_the_average_rate_and_bounds_catching_up():
    assert due(0.0, 20_000, 0) == 0
    assert due(0.001, 20_000, 0) == 20
    assert due(0.001, 20_000, 20) == 0 and due(0.001, 20_000, 25) == 0  # ahead: wait
    assert due(10.0, 20_000, 0) == MAX_BATCH  # a stall does not become one huge burst
    sent, clock = 0, 0.0
    while clock < 1.0:  # a sender woken every 0.7 ms sends 20,000 in the second
        clock += 0.0007
        sent += due(clock, 20_000, sent)
    assert abs(sent - 20_000 * clock) <= 1


def test_argv_and_the_result_line():
    argv = sender_argv("10.99.0.2", 5272, 20_000, 25.5, FlowProfile(64, 4))
    assert argv[1:5] == ["-m", "cosample.costmodel.flowgen", "send", "10.99.0.2"]
    assert argv[argv.index("--flows") + 1] == "64" and argv[argv.index("--flow-packets") + 1] == "4"
    assert argv[argv.index("--seconds") + 1] == "25.5"
    assert sink_argv(5272, 60)[-3:] == ["5272", "--seconds", "60"]
    with pytest.raises(HarnessError, match="payload"):
        sender_argv("10.99.0.2", 5272, 20_000, 1, FlowProfile(1), payload_bytes=8)
    result = parse_sender_output(
        'noise\n{"packets": 40000, "seconds": 2.0, "bits_per_second": 1e6}\n'
    )
    assert (result.packets, result.seconds, result.lost_packets) == (40000, 2.0, None)
    with pytest.raises(HarnessError, match="no result"):
        parse_sender_output("Traceback (most recent call last): ...")


def test_settings_choose_the_generator_only_for_a_fixed_udp_rate():
    settings = CalibrationSettings(method="cpu", flows=16384, port=5271)
    argv = settings.client_argv("10.99.0.2", 25.5)
    assert "cosample.costmodel.flowgen" in argv and "5272" in argv  # beside iperf3's port
    assert settings.flow_profile == FlowProfile(16384, 0)
    assert "iperf3" in CalibrationSettings(method="cpu").client_argv("10.99.0.2")
    for bad, message in (
        ({"streams": 4}, "no --streams"),
        ({"protocol": "tcp"}, "UDP"),
        ({"method": "throughput"}, "--method cpu"),
    ):
        with pytest.raises(HarnessError, match=message):
            CalibrationSettings(**{"method": "cpu", "flows": 8, **bad})
    with pytest.raises(HarnessError, match="number of concurrent flows"):
        CalibrationSettings(method="cpu", flow_packets=4)
    with pytest.raises(HarnessError, match="IPFIX cache flows"):
        CalibrationSettings(method="cpu", ipfix_cache_flows=0)
    with pytest.raises(HarnessError, match="IPFIX active timeout"):
        CalibrationSettings(method="cpu", ipfix_active_timeout_s=0)


def test_the_command_line_passes_the_flow_profile_and_cache_to_the_settings(tmp_path, monkeypatch):
    import cosample.costmodel.calibrate_cli as cli
    from cosample.cli import main

    seen = []

    def measure(args, settings, target):
        seen.append(settings)
        raise KeyboardInterrupt  # stop before anything is built or written

    monkeypatch.setattr(cli, "_measure", measure)
    base = [
        "calibrate",
        "--testbed",
        "--mechanisms",
        "sflow,sample_action_cached",
        "-d",
        str(tmp_path / "m.csv"),
        "-o",
        str(tmp_path / "c.json"),
    ]
    assert (
        main(
            base
            + [
                "--flows",
                "64",
                "--flow-packets",
                "4",
                "--ipfix-cache-flows",
                "32768",
                "--ipfix-active-timeout",
                "5",
            ]
        )
        != 0
    )
    assert main(base) != 0
    told, default = seen
    assert (told.flows, told.flow_packets) == (64, 4)
    assert (told.ipfix_cache_flows, told.ipfix_active_timeout_s) == (32768, 5)
    assert (default.flows, default.ipfix_cache_flows, default.ipfix_active_timeout_s) == (
        0,
        1024,
        1,
    )
    assert not (tmp_path / "c.json").exists()


@pytest.mark.root
def test_the_sender_sends_the_schedule_at_the_rate_and_stops_by_itself():
    """The real sender on loopback (a raw socket needs root): what arrives at a bound UDP
    socket carries the schedule's source ports, at the rate asked, for the time asked."""
    import subprocess

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        receiver.bind(("127.0.0.1", 0))
        port = receiver.getsockname()[1]
        profile = FlowProfile(8, 3)
        process = subprocess.run(
            sender_argv("127.0.0.1", port, 2000, 0.5, profile),
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert process.returncode == 0, process.stderr
        result = json.loads(process.stdout)
        receiver.settimeout(0.5)
        ports = []
        try:
            while True:
                _, (_, source_port) = receiver.recvfrom(2048)
                ports.append(source_port)
        except socket.timeout:
            pass
    assert result["packets"] == len(ports) and result["send_errors"] == 0
    assert 900 <= len(ports) <= 1001  # 2,000 a second for half a second
    assert ports == [profile.source_port(p) for p in range(len(ports))]
    per_flow = Counter(ports)  # 3 packets a flow; only the 8 flows cut off by the end have fewer
    assert max(per_flow.values()) == 3 and sum(n < 3 for n in per_flow.values()) <= 8
