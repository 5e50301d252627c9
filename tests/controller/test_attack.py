"""Issue 30's forged-datagram attack, replayed against the real collector daemon on loopback.

Three datagrams carrying s1's agent address and an absurd sampling rate (1-in-2^31) took the
collector's estimate for s1 far above what s1 can forward, and a controller without checks
published a plan cutting s1's sampling. The forged datagrams come from s1's own agent address,
as the real stream does: what a spoofed source on a shared L2 achieves, past the collector's
check of the UDP source. Since issue 41 the collector weighs only the 1-in-N the plan gave s1
(``collector/declared.py``): the three samples are dropped by name, s1's estimate does not
move and the controller keeps its plan without even a refusal. The controller's own checks
(capacity, cumulative jumps) against samples the collector must count are
``test_attack_steps.py``.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from collector_beside import agent_addresses, deliver, following, loop_settings, safe_plan, send
from controller_helpers import inventory_doc
from waiting import wait_for

from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.lab.agentsource import transparent
from cosample.lab.sflowstream import frame, simulate, vm_address
from cosample.plan.document import parse_plan

CAPACITY_PPS = 1e6  # every server: s1's 24k pps need no mirrors
TRUTH = {"s1": 24_000, "s2": 3_000, "s3": 1_500}
#: The agents' addresses (192.0.2.k) are not local: sending from them needs IP_TRANSPARENT (root).
pytestmark = pytest.mark.skipif(transparent() is not None, reason=str(transparent()))
DURATION_S = 3.0


def forged(agent: str, sampling_rate: int, count: int = 3) -> list[tuple[float, bytes]]:
    """``count`` datagrams of one local sample each, as s1's agent would send them."""
    header, length = frame(vm_address(0), vm_address(0, 2), 1000)
    now = time.time()
    return [
        (
            now + 0.05 * k,
            datagram(
                agent,
                10_000 + k,
                3_600_000 + 50 * k,
                [
                    flow_sample(
                        SampleSpec(
                            50_000 + k,
                            sampling_rate,
                            sampling_rate * (k + 1),
                            header,
                            length,
                            input_port=1,
                        )
                    )
                ],
            ),
        )
        for k in range(count)
    ]


def test_forged_datagrams_change_no_plan(tmp_path, collector_thread):
    publish, state = tmp_path / "pub", tmp_path / "state"
    inventory = inventory_from_dict(inventory_doc([CAPACITY_PPS] * 3))
    service = collector_thread(
        publish, agent_addresses(inventory.names, lambda k: f"192.0.2.{k}"), safe_sampling=8
    )  # 8: the agents' safe state here (measure_sampling)
    settings = loop_settings(service)
    safe = safe_plan(inventory, 8)
    stream = simulate(safe, TRUTH, duration_s=DURATION_S, seed=5)
    deliver(service, stream)
    controller = Controller(inventory, settings, DirectoryTarget(publish), state)
    first = controller.cycle()
    assert first.result == "published", first
    plan = parse_plan((publish / "plan.json").read_bytes())
    assert plan.hosts["s1"].sflow_sampling is not None  # s1 samples locally: forge that
    following(service, plan)
    wait_for(lambda: datetime.now(timezone.utc) >= plan.not_before, timeout_s=20.0)
    published = (publish / "plan.json").read_bytes()
    before = service.snapshot.servers["s1"]

    send(forged("192.0.2.1", 2**31), service.listen_address)
    wait_for(lambda: service.snapshot.dropped.get("unplanned_sampling_rate") == 3, timeout_s=20.0)
    after = service.snapshot.servers["s1"]
    attacked = []
    for _ in range(3):  # each on a new snapshot: the controller uses each one once
        exports = service.exports
        wait_for(lambda: service.exports >= exports + 2, timeout_s=20.0)
        attacked.append(controller.cycle())
    assert after.samples == before.samples
    assert after.packets_per_s <= before.packets_per_s  # the same samples, a longer window
    for status in attacked:
        assert status.result == "kept" and not status.refused, status
    assert (publish / "plan.json").read_bytes() == published
    assert controller.store.last_version() == first.plan_version
