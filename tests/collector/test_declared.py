"""What a sender may declare (collector/declared.py, pure) and how the estimator applies it:
the plan's 1-in-N and P, carried over a plan change until the agent declares the new one, the
agents' safe 1-in-N without a plan, frames an interface carries, counts that fit the exports.
The same rules against a real daemon: test_declared_attacks.py."""

from __future__ import annotations

import json

import pytest
from collector_plans import plan_document
from hypothesis import given, settings
from hypothesis import strategies as st
from ipfix_messages import record_message, sample_plan, template_message

from cosample.collector import _sflow, snapshotbin
from cosample.collector.attribution import ServerPlan, build, planless
from cosample.collector.combine import MAX_COUNT
from cosample.collector.declared import (
    ANY_SAMPLING,
    MAX_FRAME_BYTES,
    Declared,
    probability_spans,
    record_packets_bound,
    sflow_spans,
    within,
)
from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory
from cosample.collector.merge import merge_snapshots
from cosample.lab.sflowstream import frame, vm_address
from cosample.plan.document import parse_plan
from cosample.plan.guard import GuardSpec, declared_sampling

AGENT = "172.29.0.1"  # plan_document's tunnel address of s1, its agent


def plan(sampling: int | None, version: int = 7, guard: dict | None = None, **others):
    hosts = {"s1": (sampling, {}), **others}
    document = plan_document(hosts, version=version)
    if guard is not None:
        document["hosts"]["s1"]["guard"] = guard
    return parse_plan(json.dumps(document).encode())


def sample_datagram(number: int, rate: int, length: int = 500) -> bytes:
    header, _ = frame(vm_address(0), vm_address(1, 2), 500)
    spec = SampleSpec(number, rate, rate * number, header, length)
    return datagram(AGENT, number, 1000 * number, [flow_sample(spec)])


def test_the_spans_a_plan_entry_allows():
    assert sflow_spans(ServerPlan("s1", AGENT, 64, {}), 4096) == ((64, 64),)
    assert sflow_spans(ServerPlan("s1", AGENT, None, {}), 4096) == ((4096, 4096),)  # safe
    assert sflow_spans(ServerPlan("s1", AGENT, None, {}), None) == ANY_SAMPLING  # replay
    assert sflow_spans(ServerPlan("s1", AGENT, None, {"s2": 0.5}), 4096) == ()  # local off
    sampled = ServerPlan("s1", AGENT, None, {}, 26214, 7)
    assert sflow_spans(sampled, 4096) == () and probability_spans(sampled) == ((26214, 26214),)
    assert within(((64, 64), (100, 200)), 150) and not within(((64, 64),), 65)


def test_the_compiled_scan_knows_the_same_frame_bound():
    assert _sflow.MAX_FRAME_BYTES == MAX_FRAME_BYTES == 65_535 + 22


def test_a_plan_change_carries_what_the_agent_declared_until_it_declares_the_new():
    est = Estimator(build(plan(16)), window_s=None)
    est.ingest(sample_datagram(1, 16), 1.0)
    est.set_attribution(build(plan(64, version=8)), 2.0)
    est.ingest(sample_datagram(2, 16), 2.5)  # the agent has not applied the plan yet
    est.ingest(sample_datagram(3, 32), 2.6)  # neither plan's
    est.ingest(sample_datagram(4, 64), 3.0)  # applied
    est.ingest(sample_datagram(5, 16), 3.5)  # 16 is no longer the agent's
    assert est.dropped == {"unplanned_sampling_rate": 2}
    assert est.snapshot_data()["servers"]["samples"] == [3]


def test_a_two_phase_transition_carries_the_rate_through_both_phases():
    """OLD 1-in-16, phase 1 (the larger N) 1-in-64, phase 2 (NEW) 1-in-32: an agent that lags
    through phase 1 is still weighed by what it declares until it declares a planned one."""
    est = Estimator(build(plan(16)), window_s=None)
    est.ingest(sample_datagram(1, 16), 1.0)
    est.set_attribution(build(plan(64, version=8)), 2.0)
    est.set_attribution(build(plan(32, version=9)), 3.0)
    est.ingest(sample_datagram(2, 16), 3.5)
    est.ingest(sample_datagram(3, 64), 3.6)  # phase 1's, after phase 2 began: not planned now
    est.ingest(sample_datagram(4, 32), 4.0)
    est.ingest(sample_datagram(5, 16), 4.5)
    assert est.dropped == {"unplanned_sampling_rate": 2}
    assert est.rate_of[AGENT] == 32


def test_without_a_plan_only_the_agents_safe_rate_weighs():
    inventory = Inventory.model_validate({"servers": {"s1": {"agent_ip": AGENT}}})
    strict = Estimator(planless(inventory), window_s=None, safe_sampling=4096)
    loose = Estimator(planless(inventory), window_s=None)  # None: as declared (replay)
    for est in (strict, loose):
        est.ingest(sample_datagram(1, 4096), 1.0)
        est.ingest(sample_datagram(2, 2**32 - 1), 1.1)
    assert strict.dropped == {"unplanned_sampling_rate": 1} and not loose.dropped


@settings(max_examples=100, deadline=None)
@given(planned=st.integers(1, 2**32 - 1), declared=st.integers(0, 2**32 - 1))
def test_a_sample_weighs_only_at_the_planned_rate(planned, declared):
    est = Estimator(build(plan(planned)), window_s=None)
    est.ingest(sample_datagram(1, declared), 1.0)
    counted = est.snapshot_data()["servers"]["samples"] == [1]
    assert counted == (declared == planned)
    if not counted:
        reason = "bad_sampling_rate" if declared == 0 else "unplanned_sampling_rate"
        assert est.dropped == {reason: 1}


def test_a_guarded_entry_allows_its_ladder_and_nothing_between():
    guarded = ServerPlan("s1", AGENT, 64, {}, guard=GuardSpec(floor_sampling=1000))
    assert sflow_spans(guarded, 4096) == (
        (64, 64),
        (128, 128),
        (256, 256),
        (512, 512),
        (1000, 1000),
    )
    low = ServerPlan("s1", AGENT, 64, {}, guard=GuardSpec(floor_sampling=8))  # no room
    assert sflow_spans(low, 4096) == ((64, 64),)
    mirroring = ServerPlan("s1", AGENT, None, {"s2": 0.5}, guard=GuardSpec(floor_sampling=64))
    assert sflow_spans(mirroring, 4096) == ()  # local sFlow off: a guard adds none


@settings(max_examples=150, deadline=None)
@given(
    planned=st.integers(1, 2**20),
    floor=st.integers(1, 2**24),
    pick=st.integers(0, 40),
    nudge=st.sampled_from([0, 0, -1, 1]),
    declared=st.integers(0, 2**32 - 1),
)
def test_a_guarded_host_weighs_exactly_its_guards_rates(planned, floor, pick, nudge, declared):
    """What the agents' guard may declare (``declared_sampling``) is counted, weighed by what it
    declares; any other 1-in-N, next to a rung or anywhere, is dropped by name."""
    guard = {"floor_sampling": floor}
    rungs = sorted(declared_sampling(planned, GuardSpec(**guard)))
    if pick < 2 * len(rungs):  # a rung, or a value next to one; else any value
        declared = max(0, rungs[pick % len(rungs)] + nudge)
    est = Estimator(build(plan(planned, guard=guard)), window_s=None)
    est.ingest(sample_datagram(1, declared), 1.0)
    counted = est.snapshot_data()["servers"]["samples"] == [1]
    assert counted == (declared in rungs)
    if counted:
        assert est.rate_of[AGENT] == declared
    else:
        reason = "bad_sampling_rate" if declared == 0 else "unplanned_sampling_rate"
        assert est.dropped == {reason: 1}


def test_a_guard_steps_down_and_back_each_sample_weighed_by_its_rung():
    """1-in-64 with a floor of 1024: the guard's steps 128, 512, 1024 and back to 64 are each
    counted at their own weight; 96, 2048 and 2^32-1 between them are not; a new plan without
    a guard takes the ladder away (the rung in force carried until the plan's N arrives)."""
    est = Estimator(build(plan(64, guard={"floor_sampling": 1024})), window_s=None)
    for number, rate in enumerate([64, 128, 96, 512, 2048, 1024, 2**32 - 1, 64], start=1):
        est.ingest(sample_datagram(number, rate), float(number))
    assert est.dropped == {"unplanned_sampling_rate": 3}
    data = est.snapshot_data()
    assert data["servers"]["samples"] == [5]
    weighed = data["servers"]["packets_per_s"][0] * data["window_s"]
    assert weighed == pytest.approx(64 + 128 + 512 + 1024 + 64)
    est.ingest(sample_datagram(9, 1024), 9.0)  # the rung in force when the new plan comes
    est.set_attribution(build(plan(64, version=8)), 9.5)
    est.ingest(sample_datagram(10, 1024), 10.0)  # carried: the agent has not applied it yet
    est.ingest(sample_datagram(11, 64), 11.0)
    est.ingest(sample_datagram(12, 128), 12.0)  # the old plan's rung: no longer
    assert est.dropped == {"unplanned_sampling_rate": 4}
    assert est.snapshot_data()["servers"]["samples"] == [8]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_frame_longer_than_an_interface_carries_is_dropped(compiled, monkeypatch):
    if not compiled:
        from cosample.collector import decode

        monkeypatch.setattr(decode, "_scan", None)
    est = Estimator(build(plan(16)), window_s=None)
    est.ingest(sample_datagram(1, 16, MAX_FRAME_BYTES), 1.0)
    est.ingest(sample_datagram(2, 16, MAX_FRAME_BYTES + 1), 1.1)
    est.ingest(sample_datagram(3, 16, 2**32 - 1), 1.2)
    data = est.snapshot_data()
    assert est.dropped == {"oversized_frame": 2}
    assert data["servers"]["samples"] == [1]
    assert data["servers"]["bytes_per_s"][0] * data["window_s"] == 16 * MAX_FRAME_BYTES


def test_ipfix_records_at_the_planned_probability_carried_over_a_change():
    exporter = "127.29.0.1"
    est = Estimator(build(sample_plan(26214, 7)), window_s=None)
    est.ingest_ipfix(template_message(7), exporter, 0.0)
    est.ingest_ipfix(record_message(7, 0, 2, 26214), exporter, 0.5)
    est.set_attribution(build(sample_plan(13107, 7)), 1.0)
    est.ingest_ipfix(record_message(7, 1, 2, 26214), exporter, 1.5)  # not applied yet
    est.ingest_ipfix(record_message(7, 2, 2, 13107), exporter, 2.0)  # applied
    est.ingest_ipfix(record_message(7, 3, 2, 26214), exporter, 2.5)
    assert est.dropped == {"ipfix_unplanned_probability": 1} and est.ipfix_records == 3


def test_an_ipfix_record_holds_at_most_what_an_interface_carries_in_its_span():
    """1 s (the agents' default cache timeout) of a 400 Gb/s interface's smallest frames,
    plus a second for rounding: 1.19e9 packets at P = 65535, sampled at P/65535."""
    assert record_packets_bound(65535, 1.0) == pytest.approx(2 * 400e9 / 672)
    est = Estimator(build(sample_plan(65535, 7)), window_s=None)
    est.ingest_ipfix(template_message(7), "127.29.0.1", 0.0)
    bound = int(record_packets_bound(65535, 1.0))
    est.ingest_ipfix(record_message(7, 0, bound, 65535), "127.29.0.1", 0.5)
    est.ingest_ipfix(record_message(7, 1, bound + 1, 65535), "127.29.0.1", 0.6)
    assert est.dropped == {"ipfix_implausible_count": 1} and est.ipfix_records == 1


def test_counts_saturate_so_every_export_encodes():
    """Issue 41: counts summing past 2^63 made snapshotbin.encode raise OverflowError."""
    est = Estimator(build(plan(16, s2=(16, {}))), window_s=None)
    est.ingest(sample_datagram(1, 16), 1.0)
    for _, sums, _ in est._buckets:  # what 2^63 counted samples would leave
        for acc in sums.values():
            acc[0] = 2**64
    snapshot = est.snapshot()
    assert snapshot.servers["s1"].samples == MAX_COUNT
    decoded = snapshotbin.decode(snapshotbin.encode(snapshot))
    assert decoded.servers["s1"].samples == MAX_COUNT
    other = snapshot.model_copy(update={"collector": "c2", "agents": []})
    merged = merge_snapshots([snapshot.model_copy(update={"agents": []}), other])
    assert merged.servers["s1"].local_samples == MAX_COUNT
    assert snapshotbin.decode(snapshotbin.encode(merged)).servers["s1"].samples == MAX_COUNT


def test_declared_is_one_decision_with_a_carried_value():
    declared = Declared(safe_sampling=4096)
    declared.plan(build(plan(64)), {AGENT: 16, "10.9.9.9": 8})
    assert declared.carried == {AGENT: 16}  # an agent the plan does not name carries nothing
    assert declared.allows(AGENT, 16) and declared.allows(AGENT, 64)
    assert not declared.allows(AGENT, 16)  # 64 declared: 16 is over
