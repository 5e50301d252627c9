"""Issue 41's forged steps, replayed against the real collector and controller on loopback.

The report: samples from s1's own agent address whose declared sampling rate rose step by
step, each step under the controller's 4x jump rule, got a signed plan that cut s1 from 1-in-1
to 1-in-4096 in 8.1 s. Two attacks, each a sequence of steps of less than 4x:

- **declared rates** (the report's): the collector weighs only the 1-in-N the plan gave s1
  (``collector/declared.py``): every forged sample is dropped as ``unplanned_sampling_rate``,
  s1's estimate does not move, the plan is kept;
- **sample counts at the planned rate** (what a sender holding s1's address can still do): the
  collector counts them, s1's estimate climbs 3.3x per step, and the controller holds it once
  it is 4x its *cumulative* baseline (``controller/plausibility.py``): the plan is kept. The
  control, a controller restarted from the same state without the jump and capacity checks,
  publishes a plan cutting s1's sampling: what the steps would have done. A last push beyond
  what s1 can forward is refused as ``above_capacity`` whatever the baseline.
"""

from __future__ import annotations

import math
import shutil
import time
from datetime import datetime, timezone

from collector_beside import agent_addresses, deliver, following, loop_settings, safe_plan
from controller_helpers import inventory_doc
from waiting import wait_for

from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.collector.polling import plan_lead_s
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import frame, simulate, vm_address
from cosample.plan.document import parse_plan

CAPACITY_PPS = 10_000.0
TRUTH = {"s1": 3_000, "s2": 2_000, "s3": 1_000}
MEASURE_SAMPLING = 8  # the agents' safe state before the first plan
STEP = 3.0  # each step: less than the 4x a per-step rule would catch
SAMPLES_PER_DATAGRAM = 200


def agent(k: int) -> str:
    return f"127.41.0.{k}"  # loopback: any 127/8 source is local (no root needed)


class Forger:
    """Flow samples from s1's own agent address, numbered by a sampler of their own (so the
    collector's loss tracker books nothing for them). ``received`` reads how many datagrams the
    collector has taken in: at most ``IN_FLIGHT`` are sent ahead of it, so a push of many
    megabytes never overflows the collector's socket buffer while a loaded machine starves its
    receiving thread (seen in CI: a step's samples lost, its estimate never reached)."""

    IN_FLIGHT = 32  # datagrams of 200 samples: about 1.5 MB, well inside the 8 MB buffer

    def __init__(self, target, received) -> None:
        self.target, self.received, self.sequence, self.number = target, received, 0, 0
        self.header, self.length = frame(vm_address(0), vm_address(0, 2), 1000)

    def send(self, samples: int, rate: int) -> None:
        start, sent = self.received(), 0
        deadline = time.monotonic() + 120.0
        with AgentSender() as sender:
            while samples > 0:
                while self.received() - start < sent - self.IN_FLIGHT:
                    assert time.monotonic() < deadline, "the collector stopped taking datagrams"
                    time.sleep(0.002)
                batch = min(samples, SAMPLES_PER_DATAGRAM)
                specs = []
                for _ in range(batch):
                    self.sequence += 1
                    specs.append(
                        flow_sample(
                            SampleSpec(
                                self.sequence,
                                rate,
                                rate * self.sequence,
                                self.header,
                                self.length,
                                input_port=1,
                                source_index=77,
                            )
                        )
                    )
                self.number += 1
                sender.send(
                    datagram(agent(1), self.number, 4_000_000 + self.number, specs, sub_agent=9),
                    self.target,
                )
                samples, sent = samples - batch, sent + 1


def judged(controller: Controller, tries: int = 20):
    """A cycle that judged a snapshot the collector exported since the last one. The test waits
    on the collector's snapshot in memory, which its HTTP server may serve a moment later; the
    controller then refuses the serial it already used (a replay) and keeps the plan ("stale",
    seen on a loaded machine): that cycle judged nothing, so it is run again."""
    for _ in range(tries):
        status = controller.cycle()
        if status.result != "stale":
            return status
        time.sleep(0.3)
    return status


def test_forged_steps_leave_the_plan_unchanged(tmp_path, collector_thread):
    publish, state = tmp_path / "pub", tmp_path / "state"
    inventory = inventory_from_dict(inventory_doc([CAPACITY_PPS] * 3))
    service = collector_thread(
        publish, agent_addresses(inventory.names, agent), safe_sampling=MEASURE_SAMPLING
    )
    settings = loop_settings(service, tau_s=0.1, measure_sampling=MEASURE_SAMPLING)
    # the agents send from loopback (the collector's inventory says so)
    safe = safe_plan(inventory, MEASURE_SAMPLING, agent)

    def s1(wanted=lambda e: True):
        return wait_for(
            lambda: (e := service.snapshot.servers["s1"]) and wanted(e) and e, timeout_s=30.0
        )

    stream = simulate(safe, TRUTH, duration_s=4.0, seed=41)
    deliver(service, stream, timeout_s=30.0)
    controller = Controller(inventory, settings, DirectoryTarget(publish), state)
    first = controller.cycle()
    assert first.result == "published", first
    plan = parse_plan((publish / "plan.json").read_bytes())
    planned = plan.hosts["s1"].sflow_sampling
    assert planned is not None  # s1 samples locally: forge that
    following(service, plan, timeout_s=30.0)
    wait_for(lambda: datetime.now(timezone.utc) >= plan.not_before, timeout_s=30.0)
    shutil.copytree(state, tmp_path / "control-state")
    published = (publish / "plan.json").read_bytes()
    forger = Forger(service.listen_address, lambda: service.estimator.datagrams)

    # 1. the report's attack: the declared rate rises 3.3x per step
    before = s1()
    rates = [round(planned * 2 * STEP**k) for k in range(1, 9)]
    declared = []
    for k, rate in enumerate(rates, start=1):
        forger.send(20, rate)
        wait_for(
            lambda k=k: service.snapshot.dropped.get("unplanned_sampling_rate") == 20 * k,
            timeout_s=30.0,
        )
        declared.append(judged(controller))
    after_rates = s1()
    assert after_rates.samples == before.samples  # nothing forged was counted

    # 2. what holding s1's address still allows: samples at the planned 1-in-N, about 3x
    # more traffic per step (judged from the estimates the collector published), up to just
    # above s1's capacity (within the slack for sampling noise)
    def push(target: float, low: float):
        """Forged samples at s1's 1-in-N that take its estimate to ``target`` pps, topped
        up until the collector publishes at least ``low`` (its window grows meanwhile)."""
        for _ in range(5):
            now = service.snapshot
            packets = now.servers["s1"].packets_per_s * now.window_s
            forger.send(math.ceil((target * (now.window_s + 1.0) - packets) / planned), planned)
            try:
                return wait_for(
                    lambda: (e := service.snapshot.servers["s1"]).packets_per_s >= low and e,
                    timeout_s=10.0,
                )
            except AssertionError:
                continue
        raise AssertionError(f"s1's estimate never reached {low:,.0f} pps")

    measured, counted = [after_rates.packets_per_s], []
    while measured[-1] < CAPACITY_PPS:
        target = min(measured[-1] * STEP, 1.1 * CAPACITY_PPS)
        measured.append(push(target, 0.9 * target).packets_per_s)
        counted.append(judged(controller))
    control = Controller(
        inventory,
        Settings(
            settings.collectors,
            interval_s=1.0,
            tau_s=0.1,
            max_age_s=600.0,
            measure_sampling=MEASURE_SAMPLING,
            lead_s=plan_lead_s(0.2, 0.5),
            implausible_slack=math.inf,
            jump_factor=None,
        ),
        DirectoryTarget(tmp_path / "control-pub"),
        tmp_path / "control-state",
    ).cycle()
    # beyond what s1 can forward: refused whatever the baseline
    push(2 * CAPACITY_PPS, 1.5 * CAPACITY_PPS)
    beyond = judged(controller)
    for status in declared:
        assert status.result == "kept" and not status.refused, status
    assert all(b / a < 4.0 for a, b in zip(measured, measured[1:])), measured  # per-step: passes
    assert measured[-1] < CAPACITY_PPS * 1.25  # and under the capacity bound
    assert len(counted) >= 3
    refused = [[(r["server"], r["reason"]) for r in status.refused] for status in counted]
    assert all(status.result == "kept" for status in counted), counted
    assert refused[-1] == [("s1", "unconfirmed_jump")]  # held against the baseline
    assert refused[0] == []  # the first step is no jump: believed
    assert beyond.result == "kept", beyond
    assert [(r["server"], r["reason"]) for r in beyond.refused] == [("s1", "above_capacity")]
    assert (publish / "plan.json").read_bytes() == published
    assert controller.store.last_version() == first.plan_version
    # the control: the same measurements without the checks cut s1's sampling
    assert control.result == "published" and control.reasons[0].startswith("overload"), control
    cut = parse_plan((tmp_path / "control-pub" / "plan.json").read_bytes())
    assert cut.hosts["s1"].sflow_sampling > planned
