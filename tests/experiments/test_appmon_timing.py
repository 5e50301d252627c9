"""The timing rig (``research/appmon_timing.py``): its pcap reading on a made capture, and on
real traffic the kernel (tc) mirror copying every request and response the server sent and
received, as the OpenFlow copies do, each request matched to its access-log line."""

from __future__ import annotations

import argparse

import pytest

from cosample.appmon.pcap import tcp_frame, write_pcap
from cosample.lab.appmirror import rig_unavailable
from research.appmon_timing import compare, messages, run


def test_messages_key_requests_by_client_port_and_number_and_skip_retransmissions(tmp_path):
    a, b = "10.77.0.1", "10.77.0.2"
    frames = [
        (1.0, tcp_frame(a, b, 40000, 80, 1, 0x18, b"GET / HTTP/1.1\r\n")),
        (1.1, tcp_frame(a, b, 40000, 80, 1, 0x18, b"GET / HTTP/1.1\r\n")),  # again
        (1.5, tcp_frame(b, a, 80, 40000, 7, 0x18, b"HTTP/1.1 200 OK\r\n")),
        (2.0, tcp_frame(a, b, 40000, 80, 17, 0x18, b"GET /x HTTP/1.1\r\n")),
        (2.25, tcp_frame(b, a, 80, 40000, 24, 0x18, b"HTTP/1.1 500 X\r\n")),
        (2.5, tcp_frame(b, a, 80, 40000, 39, 0x10, b"body")),
    ]
    write_pcap(tmp_path / "c.pcap", frames)
    seen = messages(tmp_path / "c.pcap")
    assert seen == {
        "request": {(40000, 1): 1.0, (40000, 2): 2.0},
        "response": {(40000, 1): 1.5, (40000, 2): 2.25},
    }
    rows = compare({"server": seen}, {(40000, 1): 0.4, (40000, 2): 0.25})
    assert rows["server"]["matched"] == 2
    assert rows["server"]["excess_mean_ms"] == pytest.approx(50.0)


@pytest.mark.root
@pytest.mark.slow
def test_kernel_mirror_copies_every_message_the_server_saw(tmp_path):
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    settings = argparse.Namespace(
        seconds=3.0, connections=[4], flood_pps=[0], mean_ms=2.0, size=100, seed=5, json=None
    )
    level = run(settings, tmp_path)["levels"][0]
    points = level["points"]
    assert level["log_requests"] > 50
    # every logged request seen at the server (less those wrk abandoned at its end, which
    # nginx logs as 499 without a response), and the same requests through both mirrors
    assert level["log_requests"] - 4 <= points["server"]["matched"] <= level["log_requests"]
    assert points["tc_copy"]["matched"] == points["server"]["matched"]
    assert points["ovs_copy"]["matched"] == points["server"]["matched"]
