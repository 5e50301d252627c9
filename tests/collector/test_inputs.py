"""Issue 23's inputs: the plan's ``agent_ip``, cut-off captures, discarded-packet samples and the
traffic matrix for every sampled-header layout, and replay without a plan."""

from __future__ import annotations

import json

import pytest
from sflow_corpus import CORPUS

from cosample.cli import main
from cosample.collector.decode import parse_datagram
from cosample.collector.encode import SampleSpec, datagram, discard_sample, flow_sample
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory
from cosample.collector.pcap import write_pcap
from cosample.lab.sflowstream import frame


def _plan_with_agent(write_plan, tmp_path, agent_ip):
    document = json.loads(write_plan().read_text())
    document["hosts"]["s4"]["agent_ip"] = agent_ip
    path = tmp_path / "agent-plan.json"
    path.write_text(json.dumps(document))
    return path


def test_agent_ip_is_normalised_like_the_inventory(write_plan, tmp_path, capsys):
    from cosample.collector.attribution import build
    from cosample.plan.document import parse_plan

    path = _plan_with_agent(write_plan, tmp_path, "0030::1:1:1")
    plan = parse_plan(path.read_bytes())
    assert plan.hosts["s4"].agent_ip == "30::1:1:1"
    assert build(plan).server_of_agent["30::1:1:1"] == "s4"
    inventory = Inventory.model_validate({"servers": {"s4": {"agent_ip": "0030::1:1:1"}}})
    assert inventory.servers["s4"].agent_ip == plan.hosts["s4"].agent_ip


def test_a_bad_agent_ip_is_refused_with_its_field_path(write_plan, tmp_path, capsys):
    path = _plan_with_agent(write_plan, tmp_path, "not-an-address")
    capture = write_pcap(tmp_path / "c.pcap", [(1.7e9, b"\0" * 8)])
    assert main(["collector", "replay", "--plan", str(path), str(capture)]) == 2
    err = capsys.readouterr().err
    assert "hosts.s4.agent_ip" in err and "not-an-address" in err and err.count("\n") == 1


def test_a_cut_off_capture_replays_its_complete_records(tmp_path, capsys):
    whole = (CORPUS / "data-1140.pcap").read_bytes()
    records = whole[24:]
    cut = whole + records[:16] + records[16:100]  # a second record, cut 100 bytes in
    path = tmp_path / "cut.pcap"
    path.write_bytes(cut)
    assert main(["collector", "replay", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    snapshot = json.loads(out)
    assert snapshot["servers"]["samples"] == [5] and snapshot["agents"] == ["172.16.0.3"]
    assert "cut off in record 2" in err and "last 100 bytes" in err
    path.write_bytes(whole + records[:9])  # cut inside a record header
    assert main(["collector", "replay", str(path), "--json"]) == 0
    assert "last 9 bytes" in capsys.readouterr().err


def test_discarded_packets_are_counted_by_reason_not_as_traffic():
    header, length = frame("10.0.0.1", "10.0.0.2", 500)
    inventory = Inventory.model_validate({"servers": {"s1": {"agent_ip": "192.0.2.1"}}})
    from cosample.collector.attribution import planless

    estimator = Estimator(planless(inventory), window_s=None)
    samples = [
        flow_sample(SampleSpec(1, 100, 100, header, length)),
        discard_sample(1, 258, header, length),
        discard_sample(2, 258, header, length),
        discard_sample(3, 1, header, length),
    ]
    data = datagram("192.0.2.1", 1, 1000, samples)
    decoded = parse_datagram(data)
    assert [(d.reason, d.sequence, d.header) for d in decoded.discards] == [
        (258, 1, header),
        (258, 2, header),
        (1, 3, header),
    ]
    assert decoded.discards[0].frame_length == length
    estimator.ingest(data, 1.7e9)
    snapshot = estimator.snapshot(1.7e9 + 1)
    assert snapshot.ignored == {"discarded_packet": 3}
    assert snapshot.discards == {"s1": {"1": 1, "258": 2}}
    assert snapshot.servers["s1"].samples == 1  # the flow sample alone is traffic


def _corpus_sample(name):
    from cosample.collector.pcap import udp_payloads

    return next(udp_payloads(CORPUS / name))[1]


@pytest.mark.parametrize(
    "name, destination",
    [
        ("data-qinq.pcap", "49.49.49.109"),  # two 802.1Q tags
        ("data-sflow-raw-ipv4.pcap", "92.222.186.1"),  # raw IPv4 header, no Ethernet
        ("data-icmpv6.pcap", "2001:db8::"),  # Ethernet + IPv6
        ("data-sflow-expanded-sample.pcap", "53.53.53.53"),  # one 802.1Q tag
        ("data-icmpv4.pcap", "203.0.113.5"),  # untagged Ethernet + IPv4
    ],
)
def test_traffic_matrix_for_every_header_layout(name, destination):
    """Destinations named in the inventory are found behind any tag stack or none."""
    data = _corpus_sample(name)
    agent = parse_datagram(data).agent
    inventory = Inventory.model_validate(
        {"servers": {"src": {"agent_ip": agent}, "dst": {"vm_addresses": [destination]}}}
    )
    from cosample.collector.attribution import planless

    estimator = Estimator(planless(inventory), window_s=None)
    estimator.ingest(data, 1.7e9)
    traffic = estimator.snapshot(1.7e9 + 1).traffic_pps.as_dict()
    assert traffic["src"]["dst"] > 0


def test_replay_without_a_plan_lists_the_agents_heard(tmp_path, capsys):
    from cosample.collector.pcap import udp_payloads

    datagrams = []
    for k, name in enumerate(("data-1140.pcap", "data-qinq.pcap", "data-icmpv6.pcap")):
        datagrams += [(1.7e9 + k, payload) for _, payload in udp_payloads(CORPUS / name)]
    path = write_pcap(tmp_path / "mixed.pcap", datagrams)
    assert main(["collector", "replay", str(path)]) == 0
    out = capsys.readouterr().out
    listed = out[out.index("agents heard") :].splitlines()[2:]
    rows = {line.split()[0]: line.split()[1:] for line in listed}
    assert rows["172.16.0.3"][:4] == ["1", "5", "0", "0"] and rows["172.16.0.3"][4] == "1024"
    assert rows["172.17.128.58"][:2] == ["1", "1"] and rows["172.17.128.58"][4] == "4096"
    assert rows["127.0.0.1"][4] == "1"
    assert "plan none" in out
    assert main(["collector", "replay", str(path), "--json"]) == 0
    snapshot = json.loads(capsys.readouterr().out)
    assert snapshot["plan"] is None and set(snapshot["servers"]["name"]) == set(rows)
    k = snapshot["servers"]["name"].index("172.16.0.3")
    assert snapshot["servers"]["packets_per_s"][k] * snapshot["window_s"] == 5 * 1024
