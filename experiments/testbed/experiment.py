"""``testbed run``: baseline, plan, then apply and measure the non-collaborative and collaborative plans.

Phases, all with the same traffic (the topology's flows, ``duration_s`` each):

1. ``baseline`` — no sampling at all. Measures the traffic matrix the planner is given, and the
   throughput every later phase is compared with.
2. the data-centre description (measured traffic, emulated capacities, given or calibrated
   coefficients) is planned twice, non-collaboratively and collaboratively;
3. ``noncollab`` and ``collab`` — each plan applied by the real agents on every server, then
   traffic, sFlow samples and counters measured; the agents remove their state afterwards. The
   plan-aware collector's estimator (``cosample.collector``) turns each phase's datagrams into
   per-server traffic estimates with 95 % intervals, checked against the VMs' port counters.

Results stay raw here (``PhaseMeasurement``); ``report.py`` turns them into rows and prose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosample.experiments.testbed import apply, measure, plans, traffic
from cosample.experiments.testbed.errors import TestbedError
from cosample.lab.sflow import SflowCollector
from cosample.planner.choices import DEFAULT_SOLVER

PHASES = ("baseline", "noncollab", "collab")
RECEIVE_BUFFER_BYTES = 32 << 20


@dataclass(frozen=True)
class RunSettings:
    coefficients: plans.Coefficients
    duration_s: float = 10.0
    solver: str = DEFAULT_SOLVER
    settle_s: float = 1.5  # after applying a plan: OVS re-creates its sFlow agent
    flush_s: float = 2.0  # after traffic: the last sFlow datagrams are on their way


@dataclass
class PhaseMeasurement:
    """Everything measured during one phase."""

    phase: str
    plan: dict[str, Any] | None
    flows: list[traffic.FlowResult]
    datapath: measure.Counters
    kernel: measure.Counters
    samples: measure.SampleCounts
    cpu_seconds: dict[str, float]
    window_s: float
    agent_output: dict[str, str] = field(default_factory=dict)
    #: the collector's estimates from this phase's datagrams (None without a plan)
    estimates: Any = None


@dataclass
class ExperimentResult:
    phases: dict[str, PhaseMeasurement]
    description: dict[str, Any]
    plan_paths: dict[str, Path]
    settings: RunSettings


def measured_traffic(flows: list[traffic.FlowResult]) -> dict[str, dict[str, float]]:
    """Server-to-server pps as iperf3 sent it (the planner's ``traffic_pps``)."""
    matrix: dict[str, dict[str, float]] = {}
    for result in flows:
        row = matrix.setdefault(f"s{result.flow.src.server}", {})
        dst = f"s{result.flow.dst.server}"
        pps = result.sent_packets / result.seconds if result.seconds > 0 else 0.0
        row[dst] = row.get(dst, 0.0) + pps
    return matrix


def run_experiment(
    testbed, settings: RunSettings, out_dir: Path, log: Callable[[str], None] = print
) -> ExperimentResult:
    """Run the three phases on an up testbed; writes the description and plans to ``out_dir``."""
    reason = apply.agents_available()
    if reason:
        raise TestbedError(f"cannot apply plans: {reason}")
    topology = testbed.topology
    server_of_agent = {server.tunnel_ip: server.name for server in topology.servers}
    with _collector(topology.collector_ip) as collector:
        apply.remove_all(testbed)  # start from switches without any agent state
        log(f"baseline: {len(topology.flows)} flows for {settings.duration_s:g} s, no sampling")
        phases = {
            "baseline": _measure(testbed, collector, "baseline", None, settings, server_of_agent)
        }
        document = plans.description(
            topology,
            measured_traffic(phases["baseline"].flows),
            settings.coefficients,
            collector.target,
        )
        from cosample.experiments.files import write_json

        write_json(document, out_dir / "datacentre.json")
        plan_paths = plans.make_plans(
            document, out_dir, version=int(time.time()), solver=settings.solver
        )
        for phase in ("noncollab", "collab"):
            plan = plans.load_plan(plan_paths[phase])
            log(f"{phase}: applying {plan_paths[phase].name} with the agents, then traffic")
            output = apply.apply_plan(testbed, plan_paths[phase], plan)
            time.sleep(settings.settle_s)
            try:
                phases[phase] = _measure(testbed, collector, phase, plan, settings, server_of_agent)
            finally:
                apply.remove_all(testbed)
            phases[phase].agent_output = output
    return ExperimentResult(phases, document, plan_paths, settings)


def _collector(host: str) -> SflowCollector:
    """The lab's collector with a 32 MiB receive buffer.

    With the default ~208 KiB buffer a collector thread that waits for the CPU on this shared
    machine loses datagrams at a few thousand samples per second (seen as gaps in OVS's sample
    sequence numbers); the larger buffer rides out the bursts.
    """
    return SflowCollector(host, 0, receive_buffer=RECEIVE_BUFFER_BYTES, keep_raw=True)


def estimate(plan: dict[str, Any] | None, datagrams: list[tuple[float, bytes]]):
    """The collector's snapshot of one phase: its datagrams through the production estimator,
    with their arrival times (what ``cosample collector replay`` does with a capture)."""
    if plan is None:
        return None
    from cosample.collector.attribution import build
    from cosample.collector.estimate import Estimator
    from cosample.plan.document import plan_from_dict

    estimator = Estimator(build(plan_from_dict(plan)), window_s=None, name="testbed")
    for when, data in datagrams:
        estimator.ingest(data, when)
    return estimator.snapshot()


def _measure(
    testbed,
    collector: SflowCollector,
    phase: str,
    plan: dict[str, Any] | None,
    settings: RunSettings,
    server_of_agent: dict[str, str],
) -> PhaseMeasurement:
    collector.clear()
    before = measure.read_counters(testbed)
    cpu_before = measure.vswitchd_cpu_seconds(testbed)
    start = time.monotonic()
    flows = traffic.run_flows(testbed.topology, settings.duration_s)
    time.sleep(settings.flush_s)
    window = time.monotonic() - start
    after = measure.read_counters(testbed)
    cpu_after = measure.vswitchd_cpu_seconds(testbed)
    samples = measure.count_samples(
        collector.snapshot(), testbed.topology.server_of_ip(), server_of_agent
    )
    return PhaseMeasurement(
        phase,
        plan,
        flows,
        measure.delta(after[0], before[0]),
        measure.delta(after[1], before[1]),
        samples,
        {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
        window,
        estimates=estimate(plan, collector.raw_datagrams()),
    )
