"""The controller against the real collector daemon over loopback (no root needed).

The collector's snapshot is what the unit tests fake; here the real ``cosample.collector``
service receives sFlow datagrams laid out as OVS sends them (for the agents' safe state before
any plan, or for the plan the controller published), renormalises them, and serves
``/snapshot`` over HTTP, which the controller reads. Each datagram comes from the agent address
it names (192.0.2.k, the servers' tunnel addresses), as the collector's source check requires:
that needs ``IP_TRANSPARENT`` (root), else the tests are skipped.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from collector_beside import agent_addresses, deliver, following, loop_settings, safe_plan
from controller_helpers import inventory_doc

from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.lab.agentsource import transparent
from cosample.lab.sflowstream import simulate
from cosample.plan.document import parse_plan

#: Packets each server's VMs send during the stream: s1 far beyond what it can sample alone.
TRUTH = {"s1": 24_000, "s2": 3_000, "s3": 1_500}
DURATION_S = 3.0
pytestmark = pytest.mark.skipif(transparent() is not None, reason=str(transparent()))


def test_planless_start_publishes_the_first_plan_only(tmp_path, collector_thread):
    """No plan anywhere: the agents sample 1-in-8 in their safe state, the collector knows their
    addresses from its inventory, and the first publication is the real plan."""
    publish = tmp_path / "pub"
    inventory = inventory_from_dict(inventory_doc([1e6] * 3))
    service = collector_thread(
        publish, agent_addresses(inventory.names, lambda k: f"192.0.2.{k}"), safe_sampling=8
    )  # 8: the agents' safe state here
    settings = loop_settings(service)
    safe = safe_plan(inventory, 8)  # what safe-state agents do, as a plan

    def controller(capacity_pps: float) -> Controller:
        return Controller(
            inventory_from_dict(inventory_doc([capacity_pps] * 3)),
            settings,
            DirectoryTarget(publish),
            tmp_path / "state",
        )

    waiting = controller(1e6).cycle()  # plan-less, but no agent heard yet: nothing to plan from
    assert waiting.result == "stale" and "know no server" in waiting.problems[0]
    stream = simulate(safe, TRUTH, duration_s=DURATION_S, seed=4)
    deliver(service, stream)
    assert service.snapshot.plan is None  # says it is plan-less
    # capacities 1.5 times what the collector says s1 sends: s1 must mirror (a restart)
    restarted = controller(1.5 * service.snapshot.servers["s1"].packets_per_s)
    first = restarted.cycle()
    assert first.result == "published" and first.reasons == ("no current plan",), first
    data = json.loads((publish / "plan.json").read_text())
    assert "bootstrap" not in data and data["hosts"]["s1"]["mirrors"]
    assert restarted.smoothed.history == ()  # sparse plan-less samples: not held
    assert restarted.store.last_version() == first.plan_version  # the one publication


def test_measurement_plan_fallback_through_the_real_collector(tmp_path, collector_thread):
    """A collector that cannot attribute without a plan (no agent addresses): the measurement
    plan after ``measure_after_s`` (0 here), then the real plan."""
    publish = tmp_path / "pub"
    lines: list[str] = []
    service = collector_thread(publish, log=lines.append)
    settings = loop_settings(service, measure_after_s=0.0)

    def controller(capacity_pps: float) -> Controller:
        return Controller(
            inventory_from_dict(inventory_doc([capacity_pps] * 3)),
            settings,
            DirectoryTarget(publish),
            tmp_path / "state",
        )

    first = controller(1e6).cycle()  # the collector has no plan yet: nothing to measure
    assert first.result == "published" and first.reasons[0].startswith("bootstrap")
    measurement = parse_plan((publish / "plan.json").read_bytes())
    following(service, measurement)
    # read ahead of its not_before (the lead covers the polling), switched at that moment
    assert datetime.now(timezone.utc) >= measurement.not_before
    assert any(
        f"version {measurement.version} " in line
        and f"from its not_before {measurement.not_before:%H:%M:%S}.000000" in line
        for line in lines
    ), lines
    stream = simulate(measurement, TRUTH, duration_s=DURATION_S, seed=3)
    deliver(service, stream)
    # the collector's rates are per second of its own window; capacities 1.5 times what it
    # says s1 sends make s1 a sender that must mirror, and leave s2 and s3 room to receive
    rate = service.snapshot.servers["s1"].packets_per_s
    restarted = controller(1.5 * rate)  # a restart, with the measurement plan in force
    second = restarted.cycle()
    assert second.result == "published" and second.reasons == ("no current plan",), second
    measured, names = restarted.smoothed, restarted.inventory.names
    own = {name: 0.0 for name in names}
    for key, pps in zip(measured.keys.tolist(), measured.pps.tolist()):
        own[names[key // len(names)]] += pps
    # 1-in-8 samples of thousands of packets: each server's share of the traffic within 15 %
    total, truth_total = sum(own.values()), sum(TRUTH.values())
    for name, packets in TRUTH.items():
        share, truth = own[name] / total, packets / truth_total
        assert abs(share - truth) < 0.15 * truth, (name, share, truth)
    plan = parse_plan((publish / "plan.json").read_bytes())
    assert plan.version > measurement.version
    assert plan.hosts["s1"].mirrors and plan.hosts["s1"].role == "sender"
    assert json.loads((tmp_path / "state" / "status.json").read_text())["collectors_up"] == 1
