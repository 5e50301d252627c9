"""Issue 30, item 1: a datagram's UDP source must be the agent it claims, and a planned one.

The attack: two sFlow datagrams sent from 127.0.0.1 carrying s1's agent address took s1's
estimate from 5.2k to 3.1e9 pps. Against a real daemon on loopback they now change nothing.
The victim here is s4 (it only samples locally, as s1 did in the report: one stream, so the
forged weight is the estimate); the same two datagrams sent from s4's own address (the
control) are counted, so the test fails when the check is gone. They declare s4's planned
1-in-16: the report's 1-in-2^30 is refused from any address since issue 41 (``declared``), as
the control's last step shows.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from collector_daemon import Daemon, counter
from collector_plans import FOUR, plan_document
from waiting import wait_for

from cosample.collector.admission import Admission, packed
from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import frame, simulate, vm_address
from cosample.plan.document import parse_plan

LOOPBACK = "127.29.0"
TRUTH = {"s1": 5_000, "s2": 1_000, "s3": 2_000, "s4": 8_000}


def forged(agent: str, sequence: int, rate: int = 16) -> bytes:
    """One flow sample at ``rate`` (s4's planned 1-in-16; 1-in-2^30 is ~10^9 packets)."""
    header, length = frame(vm_address(0), vm_address(1, 2), 1000)
    return datagram(agent, sequence, 0, [flow_sample(SampleSpec(1, rate, rate, header, length))])


def test_packed_normalises_addresses():
    assert packed("::ffff:127.29.0.1") == packed("127.29.0.1") == bytes([127, 29, 0, 1])
    assert packed("2001:db8::0:1") == packed("2001:db8::1") and len(packed("2001:db8::1")) == 16
    assert packed("fe80::1%eth0") == packed("fe80::1") and packed("not an address") is None


def test_admission_rule():
    dropped: Counter = Counter()
    gate = Admission(dropped)
    claim = forged("127.29.0.1", 1)
    assert not gate.admit(claim, "127.29.0.1") and dropped == {"unplanned_agent": 1}  # no plan
    gate.plan(["127.29.0.1", "2001:db8::1"])
    assert gate.admit(claim, "127.29.0.1") and gate.admit(claim, "::ffff:127.29.0.1")
    assert not gate.admit(claim, "127.0.0.1") and dropped["source_mismatch"] == 1
    assert not gate.admit(forged("127.29.0.9", 1), "127.29.0.9")
    assert dropped["unplanned_agent"] == 2
    assert gate.admit(b"\0\0\0\5\0\0\0\1ga", "127.0.0.1")  # truncated: the decoder's reason
    assert gate.admit(b"\0\0\0\4" + claim[4:], "127.0.0.1")  # bad_version: the decoder's
    assert sum(dropped.values()) == 3


@pytest.fixture
def daemon(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_document(FOUR, agents=LOOPBACK)))
    running = Daemon(path, "--insecure-unsigned")
    yield running, parse_plan(path.read_bytes())
    running.stop()


def test_forged_datagrams_change_no_estimate(daemon):
    running, plan = daemon
    stream = simulate(plan, TRUTH, duration_s=3.0, seed=30)
    with AgentSender() as sender:
        for _, data in stream.datagrams:
            sender.send(data, running.listen)
        before = wait_for(
            lambda: (
                (s := running.snapshot())
                and sum(e.samples for e in s.servers.values()) == stream.samples
                and s
            )
        )
        for sequence in (10_001, 10_002):  # the attack: s4's agent address, from 127.0.0.1
            sender.send(forged(f"{LOOPBACK}.4", sequence), running.listen, source="127.0.0.1")
        sender.send(forged(f"{LOOPBACK}.99", 1), running.listen)  # an agent no plan names
        after = wait_for(
            lambda: (
                (s := running.snapshot())
                and s.dropped.get("source_mismatch") == 2
                and s.dropped.get("unplanned_agent") == 1
                and s
            )
        )
        metrics = running.metrics()
        assert counter(metrics, "cosample_collector_dropped_total", reason="source_mismatch") == 2
        for server in TRUTH:
            assert after.servers[server].samples == before.servers[server].samples, server
            assert after.servers[server].packets_per_s <= before.servers[server].packets_per_s
        # the control: the same datagrams from s4's own address are evidence
        for sequence in (10_001, 10_002):
            sender.send(forged(f"{LOOPBACK}.4", sequence), running.listen)
        control = wait_for(
            lambda: (
                (s := running.snapshot())
                and s.servers["s4"].samples == before.servers["s4"].samples + 2
                and s
            )
        )
        # ... at the rate the plan gave s4; the report's 1-in-2^30 weighs nothing (issue 41)
        for sequence in (10_003, 10_004):
            sender.send(forged(f"{LOOPBACK}.4", sequence, 1 << 30), running.listen)
        refused = wait_for(
            lambda: (
                (s := running.snapshot()) and s.dropped.get("unplanned_sampling_rate") == 2 and s
            )
        )
    assert control.servers["s4"].packets_per_s > before.servers["s4"].packets_per_s
    assert refused.servers["s4"].packets_per_s <= control.servers["s4"].packets_per_s
