"""Local samplers at any probability (``costmodel.localsample``): pure decisions, the IPFIX
counter's parsing, then the ``sample`` action's flow and collector set on a real OVSDB."""

from __future__ import annotations

import json
import os
import socket
import struct
import time

import pandas as pd
import pytest

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.localsample import (
    COLLECTOR_SET_ID,
    COOKIE,
    SAMPLE_SCALE,
    IpfixCounter,
    OvsSampleAction,
    collector_set_args,
    ipfix_data_sets,
    sample_flow,
    sample_flow_match,
    sample_probability,
)
from cosample.dataplane.run import run


def ipfix_message(*sets: tuple[int, bytes]) -> bytes:
    body = b"".join(
        struct.pack("!HH", set_id, 4 + len(payload)) + payload for set_id, payload in sets
    )
    return struct.pack("!HHIII", 10, 16 + len(body), 0, 1, 1) + body


def test_probability_is_out_of_65535_and_any_share_is_possible():
    assert sample_probability(0.0) == 0 and sample_probability(1.0) == SAMPLE_SCALE
    assert sample_probability(0.4) == 26214  # between 1-in-2 and 1-in-3: no sFlow N gives it
    with pytest.raises(HarnessError, match="sampling rate"):
        sample_probability(1.5)


def test_the_flow_samples_then_forwards_and_each_variant_has_its_own_slot():
    flow = sample_flow("vm1", 26214)
    assert flow.startswith(f"cookie={COOKIE:#x},priority=40000,in_port=vm1,")
    assert flow.endswith(
        f"sample(probability=26214,collector_set_id={COLLECTOR_SET_ID},"
        "obs_domain_id=1,obs_point_id=1),NORMAL"
    )
    cached = sample_flow("vm1", 1, slot=1)
    assert "priority=40001" in cached and f"collector_set_id={COLLECTOR_SET_ID + 1}" in cached
    assert sample_flow_match("vm1", 1) == f"cookie={COOKIE:#x}/-1,priority=40001,in_port=vm1"
    with pytest.raises(HarnessError, match="1..65535"):
        sample_flow("vm1", 0)


def test_collector_set_arguments_tag_both_rows_and_set_the_cache_only_when_asked():
    plain = collector_set_args("br", "127.0.0.1:4739", cached=False)
    cached = collector_set_args("br", "127.0.0.1:4739", cached=True)
    assert plain.count("external_ids:cosample=costmodel") == 2
    assert not any(arg.startswith("cache_") for arg in plain)
    assert "cache_max_flows=1024" in cached and f"id={COLLECTOR_SET_ID + 1}" in cached
    larger = collector_set_args(
        "br", "127.0.0.1:4739", cached=True, cache_flows=32768, active_timeout_s=5
    )
    assert "cache_max_flows=32768" in larger and "cache_active_timeout=5" in larger


def test_data_sets_are_counted_and_templates_are_not():
    assert ipfix_data_sets(ipfix_message((2, b"\x01\x00\x00\x01\x00\x08\x00\x04"))) == 0
    assert ipfix_data_sets(ipfix_message((2, b"\x00" * 8), (256, b"\x00" * 12))) == 1
    assert ipfix_data_sets(ipfix_message((256, b"\x00" * 4), (257, b"\x00" * 4))) == 2
    with pytest.raises(ValueError, match="not an IPFIX"):
        ipfix_data_sets(struct.pack("!HHIII", 9, 16, 0, 0, 0))  # NetFlow v9
    with pytest.raises(ValueError, match="set of length"):
        ipfix_data_sets(struct.pack("!HHIIIHH", 10, 20, 0, 0, 0, 256, 0))


@pytest.mark.root
def test_the_counter_counts_data_messages_and_names_malformed_ones():
    with IpfixCounter() as counter:
        host, port = counter.target.split(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for message in (
                ipfix_message((2, b"\x00" * 8)),
                ipfix_message((256, b"\x00" * 4)),
                ipfix_message((256, b"\x00" * 4), (257, b"\x00" * 4)),
                b"garbage",
            ):
                sender.sendto(message, (host, int(port)))
        deadline = time.monotonic() + 5
        while counter.data_messages + counter.malformed < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert (counter.data_messages, counter.data_sets, counter.malformed) == (2, 3, 1)


@pytest.mark.ovs
def test_the_sample_action_installs_changes_and_removes_only_its_own(ovs_sandbox):
    ovs = ovs_sandbox
    ovs.vsctl(
        "add-br",
        "ccl0",
        "--",
        "set",
        "bridge",
        "ccl0",
        "datapath_type=dummy",
        "--",
        "add-port",
        "ccl0",
        "p1",
        "--",
        "set",
        "interface",
        "p1",
        "type=dummy",
    )
    ovs.ofctl("add-flow", "ccl0", "priority=5,in_port=p1,actions=NORMAL")  # someone else's
    calls = []
    action = OvsSampleAction(
        ovs.vsctl, lambda *a: calls.append(a) or ovs.ofctl(*a), "ccl0", "p1", "127.0.0.1:4739"
    )
    assert action.set_rate(0.0) == 0.0 and not calls  # nothing installed, nothing to do
    assert action.set_rate(0.4) == pytest.approx(26214 / 65535)
    flows = ovs.ofctl("dump-flows", "ccl0")
    assert "sample(probability=26214" in flows and f"cookie={COOKIE:#x}" in flows
    collector_set = ovs.vsctl(
        "--bare", "--columns=external_ids", "list", "Flow_Sample_Collector_Set"
    )
    assert "cosample=costmodel" in collector_set
    calls.clear()
    action.set_rate(0.4)
    assert not calls  # unchanged: no call
    action.set_rate(1.0)
    assert "probability=65535" in ovs.ofctl("dump-flows", "ccl0")
    action.set_rate(0.0)
    assert "sample(" not in ovs.ofctl("dump-flows", "ccl0")
    action.clear()
    assert ovs.vsctl("list", "Flow_Sample_Collector_Set").strip() == ""
    assert ovs.vsctl("list", "IPFIX").strip() == ""  # garbage-collected with the set
    assert "priority=5,in_port=" in ovs.ofctl("dump-flows", "ccl0")  # theirs stays


@pytest.mark.ovs
def test_a_collector_set_with_our_id_is_refused(ovs_sandbox):
    ovs = ovs_sandbox
    ovs.vsctl("add-br", "ccl1", "--", "set", "bridge", "ccl1", "datapath_type=dummy")
    ovs.vsctl(
        "--",
        "--id=@br",
        "get",
        "Bridge",
        "ccl1",
        "--",
        "create",
        "Flow_Sample_Collector_Set",
        f"id={COLLECTOR_SET_ID}",
        "bridge=@br",
    )
    action = OvsSampleAction(ovs.vsctl, ovs.ofctl, "ccl1", "ccl1", "127.0.0.1:4739")
    with pytest.raises(HarnessError, match="exists"):
        action.set_rate(0.5)
    action.clear()
    assert ovs.vsctl("--bare", "--columns=id", "list", "Flow_Sample_Collector_Set").strip() == str(
        COLLECTOR_SET_ID
    )


@pytest.mark.root
@pytest.mark.slow
def test_a_real_calibration_of_the_local_samplers(tmp_path):
    """The three samplers through the one-host rig, as `cosample calibrate` runs them: each
    sampled what it was set to (the cached exporter aside: it reports per flow and second),
    the load was forwarded, and nothing is left behind, the capture process included."""
    from costmodel_leftovers import leftovers

    from cosample.cli import main
    from cosample.costmodel.onehost import one_host_testbed_unavailable

    reason = one_host_testbed_unavailable()
    if reason:
        pytest.skip(f"real calibration: {reason}")
    prefix = "ccQ"
    data, output = tmp_path / "m.csv", tmp_path / "c.json"
    code = main(
        [
            "calibrate",
            "--testbed",
            "--prefix",
            prefix,
            "--mechanisms",
            "sample_action,sample_action_cached,tc_sample",
            "--rates",
            "0,0.4",
            "--repetitions",
            "1",
            "--duration",
            "3",
            "--phases",
            "6",
            "--offered-pps",
            "5000",
            "--streams",
            "4",
            "--warmup",
            "1",
            "--bootstrap",
            "100",
            "--no-progress",
            "-d",
            str(data),
            "-o",
            str(output),
        ]
    )
    assert code == 0
    assert leftovers(prefix) == []
    assert not [
        line
        for line in run(["ps", "-eo", "args"]).stdout.splitlines()
        if line.startswith("tcpdump") and f"{prefix}vc" in line
    ]
    frame = pd.read_csv(data)
    assert set(frame["mechanism"]) == {"sample_action", "sample_action_cached", "tc_sample"}
    assert frame["forwarded_pps"].median() == pytest.approx(5000, rel=0.2)
    on = frame[frame["rate"] > 0]
    assert on["rate"].to_numpy() == pytest.approx(0.4, abs=1e-4)  # 26214/65535; tc: T/2^32
    for mechanism in ("sample_action", "tc_sample"):
        rows = on[on["mechanism"] == mechanism]
        share = rows["copies_pps"].sum() / rows["forwarded_pps"].sum()
        assert share == pytest.approx(0.4, abs=0.08), mechanism
        off = frame[(frame["mechanism"] == mechanism) & (frame["rate"] == 0)]
        assert off["copies_pps"].sum() < 0.05 * rows["copies_pps"].sum()  # off means off
    assert json.loads(output.read_text())["metadata"]["streams"] == 4


@pytest.mark.root
@pytest.mark.slow
def test_short_flows_cost_the_cached_exporter_one_record_each(tmp_path):
    """The flow generator's short flows through the one-host rig (`--flows 16 --flow-packets
    5`): the load is forwarded at the rate offered, and the cached exporter, sampling every
    packet, sends one record per flow (a fifth of a record per sample) instead of one per flow
    and second; nothing is left behind, the generator and its sink included."""
    from costmodel_leftovers import leftovers

    from cosample.cli import main
    from cosample.costmodel.onehost import one_host_testbed_unavailable
    from research.localsample_costs import per_run

    reason = one_host_testbed_unavailable()
    if reason:
        pytest.skip(f"real calibration: {reason}")
    prefix, port = f"ccF{os.getpid() % 10_000}", 5391  # the sink holds port + 1
    data, output = tmp_path / "m.csv", tmp_path / "c.json"
    code = main(
        [
            "calibrate",
            "--testbed",
            "--prefix",
            prefix,
            "--port",
            str(port),
            "--mechanisms",
            "sample_action_cached",
            "--rates",
            "0,1",
            "--repetitions",
            "1",
            "--duration",
            "8",
            "--phases",
            "4",
            "--guard",
            "1.2",
            "--offered-pps",
            "4000",
            "--flows",
            "16",
            "--flow-packets",
            "5",
            "--warmup",
            "1",
            "--bootstrap",
            "100",
            "--no-progress",
            "-d",
            str(data),
            "-o",
            str(output),
        ]
    )
    assert code == 0
    assert leftovers(prefix) == []
    assert not [
        line
        for line in run(["ps", "-eo", "args"]).stdout.splitlines()
        if "cosample.costmodel.flowgen" in line and f" {port + 1} " in line
    ]
    frame = pd.read_csv(data)
    assert frame["forwarded_pps"].median() == pytest.approx(4000, rel=0.2)
    runs = per_run(frame)
    # 800 flows a second, each exported once its second in the cache is up: flows start all
    # the time, so their records leave all the time, and a phase counted from 1.2 s after the
    # switch sees its own records only
    assert runs["exported_per_sample"].iloc[0] == pytest.approx(1 / 5, rel=0.3)
    metadata = json.loads(output.read_text())["metadata"]
    assert (metadata["flows"], metadata["flow_packets"]) == (16, 5)
    assert metadata["ipfix_cache"] == {"max_flows": 1024, "active_timeout_s": 1}
