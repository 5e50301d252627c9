"""iperf3 argument lists and JSON parsing, and the same against a real iperf3 on loopback."""

from __future__ import annotations

import json
import math
import shutil
import socket

import pytest

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.iperf import IperfServer, client_argv, parse_client_json, run_client

UDP_JSON = json.dumps(
    {
        "start": {},
        "intervals": [],
        "end": {
            "sum": {
                "seconds": 2.0,
                "bytes": 128000,
                "bits_per_second": 512000.0,
                "lost_packets": 500,
                "packets": 2000,
                "lost_percent": 25.0,
                "sender": True,
            },
            "cpu_utilization_percent": {"host_total": 40.0, "remote_total": 12.5},
        },
    }
)
TCP_JSON = json.dumps(
    {
        "start": {},
        "intervals": [],
        "end": {
            "sum_sent": {"seconds": 3.0, "bytes": 3_000_000, "bits_per_second": 8e6},
            "sum_received": {"seconds": 3.0, "bytes": 2_999_000, "bits_per_second": 7.99e6},
            "cpu_utilization_percent": {"host_total": 3.0, "remote_total": 9.0},
        },
    }
)


def test_parses_udp_and_tcp_summaries():
    udp = parse_client_json(UDP_JSON, "udp")
    assert udp.received_pps == pytest.approx(750.0) and udp.lost_percent == pytest.approx(25.0)
    assert (udp.cpu_sender_pct, udp.cpu_receiver_pct) == (40.0, 12.5)
    tcp = parse_client_json(TCP_JSON, "tcp")
    assert tcp.bits_per_second == pytest.approx(7.99e6) and math.isnan(tcp.received_pps)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"start": {}, "end": {}, "error": "unable to connect to server: Connection refused"}',
            "iperf3: unable to connect",
        ),
        ("iperf3: error - the server is busy running a test", "no JSON result: iperf3: error"),
        ('{"end": {"sum_sent": {}}}', "lacks the tcp summary"),
    ],
)
def test_iperf_failures_become_clear_errors(text, message):
    with pytest.raises(HarnessError, match=message):
        parse_client_json(text, "tcp")


def test_client_argv():
    argv = client_argv("10.0.0.2", port=5999, duration_s=2, protocol="udp", packet_bytes=64)
    assert argv[:3] == ["iperf3", "-c", "10.0.0.2"] and "-J" in argv
    assert argv[argv.index("-l") + 1] == "64" and argv[argv.index("-b") + 1] == "0"
    assert "-u" not in client_argv("10.0.0.2", protocol="tcp")
    for kwargs, message in (
        ({"protocol": "sctp"}, "protocol"),
        ({"duration_s": 0.5}, "duration"),
        ({"packet_bytes": 8}, "UDP payload"),
    ):
        with pytest.raises(HarnessError, match=message):
            client_argv("10.0.0.2", **kwargs)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
@pytest.mark.parametrize("protocol", ["udp", "tcp"])
def test_real_iperf3_on_loopback(protocol):
    port = _free_port()
    with IperfServer((), port=port):
        argv = client_argv("127.0.0.1", port=port, duration_s=1, protocol=protocol, bandwidth="2M")
        result = run_client((), argv, protocol, 1.0)
    assert result.seconds == pytest.approx(1.0, abs=0.3) and result.bits_per_second > 0
    if protocol == "udp":  # 2 Mbit/s of 64-byte datagrams is ~3900 pps
        assert 1000 < result.received_pps < 8000


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_real_client_without_server_fails_clearly():
    argv = client_argv("127.0.0.1", port=_free_port(), duration_s=1, protocol="tcp")
    with pytest.raises(HarnessError, match="unable to connect"):
        run_client((), argv, "tcp", 1.0)
