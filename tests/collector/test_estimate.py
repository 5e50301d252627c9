"""Attribution and renormalisation against streams drawn from a known plan (the truth is known)."""

from __future__ import annotations

import json

import pytest
from collector_plans import FOUR, plan_document

from cosample.collector.attribution import LOCAL, MIRRORED, Source, build
from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory
from cosample.dataplane.tunnels import pair_vni
from cosample.lab.sflowstream import OVERLAY_VNI, frame, simulate, vm_address
from cosample.plan.document import parse_plan

TRUTH = {"s1": 60_000, "s2": 2_000, "s3": 3_000, "s4": 30_000}


def within(value: float, low: float, high: float) -> bool:
    return low * (1 - 1e-9) <= value <= high * (1 + 1e-9)


def run(plan, stream, **kwargs) -> object:
    estimator = Estimator(build(plan, kwargs.pop("inventory", None)), window_s=None, **kwargs)
    for when, data in stream.datagrams:
        estimator.ingest(data, when)
    return estimator, estimator.snapshot()


def test_attribution_verdicts(four_plan):
    table = build(four_plan)
    assert table.source("172.29.0.1", None, None) == Source("s1", LOCAL)
    assert table.source("172.29.0.2", pair_vni("s1", "s2"), "172.29.0.1") == Source(
        "s1", MIRRORED, 0.3
    )
    assert table.source("172.29.0.2", pair_vni("s1", "s2"), "172.29.0.9") == "unknown_tunnel"
    assert table.source("172.29.0.3", pair_vni("s1", "s2"), "172.29.0.1") == "stale_mirror"
    assert table.source("172.29.0.2", OVERLAY_VNI, "172.29.0.4") == "overlay_ingress"
    assert table.source("172.29.0.2", OVERLAY_VNI, "192.0.2.1") == "unknown_tunnel"
    assert table.source("192.0.2.7", None, None) == "unknown_agent"
    l, q = table.rates("s1")
    assert l == pytest.approx(1 / 64) and q == pytest.approx(0.3 + 0.2 / 2)
    assert table.coverage("s1") == pytest.approx(l + q - l * q)


def test_every_server_is_estimated_within_its_interval(four_plan):
    stream = simulate(four_plan, TRUTH, duration_s=10.0, seed=3)
    _, snapshot = run(four_plan, stream)
    assert snapshot.dropped == {}
    for server, packets in TRUTH.items():
        e = snapshot.servers[server]
        low, high = (bound * snapshot.window_s for bound in e.packets_per_s_ci95)
        assert within(packets, low, high), (server, packets, low, high)
        assert e.bytes_per_s * snapshot.window_s == pytest.approx(packets * 1004, rel=0.05)
    s1 = snapshot.servers["s1"]
    assert s1.mirrored_samples > 10 * s1.local_samples > 0
    assert snapshot.servers["s2"].packets_per_s_ci95[0] == snapshot.servers["s2"].packets_per_s
    assert snapshot.servers["s2"].mirrored_samples == 0  # copies of s1's go to s1


def test_intervals_cover_the_truth_about_95_percent_of_the_time(four_plan):
    hits = trials = 0
    for seed in range(40):
        stream = simulate(four_plan, {"s1": 8_000, "s4": 4_000}, duration_s=5.0, seed=seed)
        _, snapshot = run(four_plan, stream)
        for server, packets in (("s1", 8_000), ("s4", 4_000)):
            low, high = (b * snapshot.window_s for b in snapshot.servers[server].packets_per_s_ci95)
            hits += within(packets, low, high)
            trials += 1
    assert 0.85 <= hits / trials <= 1.0


def test_a_standard_collector_would_overcount_and_misattribute(four_plan):
    """What the issue is about: summing rate x samples per agent counts s1's copies at s2, s3."""
    stream = simulate(four_plan, TRUTH, duration_s=10.0, seed=5)
    estimator, snapshot = run(four_plan, stream)
    from cosample.collector.decode import parse_datagram

    naive: dict[str, float] = {}
    for _, data in stream.datagrams:
        for s in parse_datagram(data).flow_samples:
            naive[s.agent] = naive.get(s.agent, 0) + s.sampling_rate
    assert naive["172.29.0.2"] > 5 * TRUTH["s2"]  # s1's copies counted as s2's traffic
    assert snapshot.servers["s2"].packets_per_s * snapshot.window_s == pytest.approx(TRUTH["s2"])


def test_overlay_traffic_is_ignored_not_counted(four_plan):
    stream = simulate(four_plan, TRUTH, duration_s=10.0, seed=3, overlay_samples=500)
    _, snapshot = run(four_plan, stream)
    assert snapshot.ignored == {"overlay_ingress": 500}
    assert snapshot.servers["s2"].packets_per_s * snapshot.window_s == pytest.approx(TRUTH["s2"])


def test_lost_datagrams_are_made_up_for_by_sequence_gaps(four_plan):
    stream = simulate(four_plan, {"s4": 200_000}, duration_s=10.0, seed=1)
    kept = [item for k, item in enumerate(stream.datagrams) if k % 4 != 0]
    estimator = Estimator(build(four_plan), window_s=None)
    for when, data in kept:
        estimator.ingest(data, when)
    e = estimator.snapshot().servers["s4"]
    assert e.local_samples < 0.8 * 200_000 / 16
    low, high = (b * estimator.snapshot().window_s for b in e.packets_per_s_ci95)
    assert low <= 200_000 <= high


def test_missing_mirrors_do_not_bias_the_estimate(four_plan):
    """Agents in their safe state send no mirrored copies: the local stream carries the estimate."""
    stream = simulate(four_plan, {"s1": 60_000}, duration_s=10.0, seed=2)
    local_only = [
        (when, data) for when, data in stream.datagrams if data[8:12] == bytes([172, 29, 0, 1])
    ]
    estimator = Estimator(build(four_plan), window_s=None)
    for when, data in local_only:
        estimator.ingest(data, when)
    e = estimator.snapshot().servers["s1"]
    low, high = (b * estimator.snapshot().window_s for b in e.packets_per_s_ci95)
    assert e.mirrored_samples == 0 and low <= 60_000 <= high


def test_traffic_matrix_from_an_inventory(four_plan):
    names = sorted(FOUR)
    inventory = Inventory(
        servers={
            name: {"vm_addresses": [vm_address(k, 1), vm_address(k, 2)]}
            for k, name in enumerate(names)
        }
    )
    stream = simulate(
        four_plan,
        TRUTH,
        duration_s=10.0,
        seed=4,
        destinations={"s1": "s4", "s4": "s1", "s2": "s2", "s3": "s1"},
    )
    _, snapshot = run(four_plan, stream, inventory=inventory)
    matrix = snapshot.traffic_pps.as_dict()
    assert set(matrix["s1"]) == {"s4"} and set(matrix["s2"]) == {"s2"}
    assert matrix["s1"]["s4"] == pytest.approx(snapshot.servers["s1"].packets_per_s)
    assert matrix["s4"]["s1"] * snapshot.window_s == pytest.approx(TRUTH["s4"], rel=0.05)


def test_interface_counters_become_packet_rates(four_plan):
    stream = simulate(four_plan, {"s4": 10_000}, duration_s=10.0, seed=4, counters=True)
    _, snapshot = run(four_plan, stream)
    rates = snapshot.estimates()["s4"].interfaces["7"]
    assert rates.in_pps == pytest.approx(1000 * 11 / stream.duration_s, rel=0.1)


def test_unknown_agents_and_bad_rates_are_counted(four_plan):
    header, length = frame("10.0.0.1", "10.0.0.2", 100)
    estimator = Estimator(build(four_plan))
    estimator.ingest(
        datagram("192.0.2.1", 1, 0, [flow_sample(SampleSpec(1, 8, 8, header, length))]), 1.0
    )
    estimator.ingest(
        datagram("172.29.0.4", 1, 0, [flow_sample(SampleSpec(1, 0, 0, header, length))]), 1.0
    )
    estimator.ingest(b"\0\0\0\4\0\0\0\1", 1.0)
    assert estimator.snapshot(2.0).dropped == {
        "bad_sampling_rate": 1,
        "bad_version": 1,
        "unknown_agent": 1,
    }


def test_window_forgets_old_samples(four_plan):
    header, length = frame("10.0.0.1", "10.0.0.2", 100)
    estimator = Estimator(build(four_plan), window_s=5.0)
    for k in range(20):
        estimator.ingest(
            datagram(
                "172.29.0.4",
                k + 1,
                0,
                [flow_sample(SampleSpec(k + 1, 16, 16 * (k + 1), header, length))],
            ),
            100.5 + k,
        )
    snapshot = estimator.snapshot(120.0)  # buckets of 1 s: 116..119 remain, 4 s covered
    e = snapshot.servers["s4"]
    assert e.samples == 4 and snapshot.window_s == 4.0
    assert e.packets_per_s == pytest.approx(16.0)  # one sample of 1-in-16 per second


def test_plan_change_keeps_taken_sums_and_uses_new_shares():
    first = parse_plan(json.dumps(plan_document(FOUR, version=1)).encode())
    second = parse_plan(
        json.dumps(
            plan_document(
                {"s1": (64, {"s2": 0.5}), "s2": (1, {}), "s3": (2, {}), "s4": (16, {})}, version=2
            )
        ).encode()
    )
    estimator = Estimator(build(first), window_s=None)
    early = simulate(first, {"s1": 100_000}, duration_s=5, seed=1)
    first_start = early.datagrams[0][0] // 1 - 1
    for when, data in early.datagrams:
        estimator.ingest(data, when)
    estimator.set_attribution(build(second))
    for when, data in simulate(
        second, {"s1": 100_000}, duration_s=5, start=first_start + 5, seed=2
    ).datagrams:
        estimator.ingest(data, when)
    snapshot = estimator.snapshot()
    assert snapshot.plan.version == 2
    low, high = (b * snapshot.window_s for b in snapshot.servers["s1"].packets_per_s_ci95)
    assert low <= 200_000 <= high
    assert snapshot.dropped.get("stale_mirror", 0) == 0


def test_hosts_that_mirror_to_each_other_are_both_estimated():
    # issue 44: s1 (1-in-2) mirrors 30 % of its traffic to s2 and takes 25 % of s2's, which it
    # samples at its own 1-in-2; s2 (1-in-3) the other way round; s3 (1-in-1) takes from both
    plan = parse_plan(
        json.dumps(
            plan_document(
                {"s1": (2, {"s2": 0.3, "s3": 0.1}), "s2": (3, {"s1": 0.25}), "s3": (1, {})}
            )
        ).encode()
    )
    table = build(plan)
    assert table.source("172.29.0.1", pair_vni("s2", "s1"), "172.29.0.2") == Source(
        "s2", MIRRORED, 0.25
    )
    assert table.source("172.29.0.2", pair_vni("s1", "s2"), "172.29.0.1") == Source(
        "s1", MIRRORED, 0.3
    )
    assert table.source("172.29.0.1", None, None) == Source("s1", LOCAL)
    assert table.rates("s1") == pytest.approx((1 / 2, 0.3 / 3 + 0.1 / 1))
    assert table.rates("s2") == pytest.approx((1 / 3, 0.25 / 2))
    truth = {"s1": 20_000, "s2": 30_000, "s3": 5_000}
    stream = simulate(plan, truth, duration_s=10.0, seed=11)
    _, snapshot = run(plan, stream)
    assert snapshot.dropped == {}
    for server, packets in truth.items():
        e = snapshot.servers[server]
        low, high = (bound * snapshot.window_s for bound in e.packets_per_s_ci95)
        assert within(packets, low, high), (server, packets, low, high)
    # each copy is credited to its sender: s1's mirrored samples are the copies s2 and s3 took
    assert snapshot.servers["s1"].mirrored_samples > 0 < snapshot.servers["s2"].mirrored_samples
    assert snapshot.servers["s3"].mirrored_samples == 0
