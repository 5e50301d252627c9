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
    assert argv[:4] == ["ip", "netns", "exec", flow.src.namespace]
    assert argv[argv.index("--bitrate") + 1] == str(round(flow.pps * 100 * 8))
    assert "--udp" in argv and argv[argv.index("--time") + 1] == "4"
    assert server_argv(flow, 5300)[3] == flow.dst.namespace


def test_parse_client_json(flow):
    text = json.dumps({"end": {"sum": {"seconds": 2.0, "packets": 1000, "lost_packets": 10}}})
    result = parse_client_json(flow, text)
    assert result.received_packets == 990 and result.received_pps == 495
    assert result.loss_fraction == pytest.approx(0.01)
    with pytest.raises(TestbedError, match="unable to connect"):
        parse_client_json(flow, json.dumps({"error": "unable to connect"}))
    with pytest.raises(TestbedError, match="no UDP summary"):
        parse_client_json(flow, json.dumps({"end": {}}))
    with pytest.raises(TestbedError, match="not JSON"):
        parse_client_json(flow, "iperf3: error")
