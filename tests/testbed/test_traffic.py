"""iperf3 command lines and result parsing (pure; the integration test runs real iperf3)."""

from __future__ import annotations

import json

import pytest

from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.topology import from_config, skewed_config
from cosample.experiments.testbed.traffic import client_argv, parse_client_json, server_argv


@pytest.fixture
def flow():
    return from_config(skewed_config(servers=2)).flows[0]


def test_client_sends_udp_at_the_flow_rate_inside_the_source_vm(flow):
    argv = client_argv(flow, 5300, 4, 100)
    assert argv[:6] == ["ip", "netns", "exec", flow.src.namespace, "iperf3", "-c"]
    assert argv[argv.index("-b") + 1] == str(round(flow.pps * 100 * 8))
    assert (
        "-u" in argv and argv[argv.index("-t") + 1] == "4" and argv[argv.index("-l") + 1] == "100"
    )
    assert server_argv(flow, 5300) == [
        "ip",
        "netns",
        "exec",
        flow.dst.namespace,
        "iperf3",
        "-s",
        "-p",
        "5300",
        "-B",
        flow.dst.ip,
        "-1",
    ]


def test_parse_client_json(flow):
    text = json.dumps(
        {
            "end": {
                "sum": {"seconds": 2.0, "bits_per_second": 4e5, "packets": 1000, "lost_packets": 10}
            }
        }
    )
    result = parse_client_json(flow, text)
    assert result.received_packets == 990 and result.received_pps == 495
    assert result.loss_fraction == pytest.approx(0.01)
    with pytest.raises(TestbedError, match="^s1v1->s1v2: iperf3: unable to connect$"):
        parse_client_json(flow, json.dumps({"error": "unable to connect"}))
    with pytest.raises(TestbedError, match="^s1v1->s1v2: iperf3 JSON lacks the udp summary"):
        parse_client_json(flow, json.dumps({"end": {}}))
    with pytest.raises(
        TestbedError, match="^s1v1->s1v2: iperf3 gave no JSON result: iperf3: error$"
    ):
        parse_client_json(flow, "iperf3: error")
