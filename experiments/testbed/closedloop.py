"""``testbed run --scenario shift|steady``: the closed loop on the emulated data centre.

Everything real: each server's agent runs as a daemon (``cosample agent run``) in the server's
namespace against its private OVS, reading the signed plans the controller publishes into a
folder (``--publish DIR``; TCP from a server namespace through its userspace-datapath uplink is
not dependable here, and any web server would serve the folder the same way); the
plan-aware collector (``cosample collector run``) receives every bridge's sFlow and re-exports
normalised samples to the lab's counting collector (which counts distinct packets per source
server, by iperf3 packet number); the controller (``cosample.controller``) runs in this process,
reading the collector's ``/snapshot``; iperf3 drives the traffic. No traffic matrix is given to
anyone and no plan exists at the start: the agents sample in their safe state (local
1-in-``measure_sampling`` to the collector named in their config), the collector attributes
those samples by the agent addresses of its address inventory (plan-less snapshots), and the
controller's first publication is a real plan (its measurement plan only if no snapshot knew a
server for two collector windows).

- ``shift``: the topology's flows for one phase, then the busiest and the quietest server swap
  their traffic (flows remapped between the two servers' VMs) for a second phase;
- ``steady``: the same flows for two phases, every flow's rate redrawn within +/- ``noise`` every
  ``chunk_s`` seconds.

The timeline (controller cycles, agents' running versions every half second, traffic phases) is
kept raw; ``closedloop_report`` turns it into the per-phase table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cosample.collector.inventory import INVENTORY_FORMAT as ADDRESSES_FORMAT
from cosample.collector.polling import plan_lead_s
from cosample.controller.inventory import FORMAT as INVENTORY_FORMAT
from cosample.experiments.testbed import apply, measure, traffic
from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.topology import Flow, Topology, Vm

SCENARIOS = ("shift", "steady")
SFLOW_PORT, SNAPSHOT_PORT = 6343, 8432
#: The collector re-reads the plan every second, each read bounded by 1 s (a local file): the
#: controller's lead (every plan's ``not_before`` after its publication) covers that.
PLAN_POLL_S, PLAN_READ_S = 1.0, 1.0
LEAD_S = plan_lead_s(PLAN_POLL_S, PLAN_READ_S)


@dataclass(frozen=True)
class LoopSettings:
    """Durations and rates of a closed-loop run (short, so a run takes a few minutes)."""

    scenario: str
    alpha: float
    beta: float
    startup_s: float = 40.0  # traffic before the first phase: safe-state sampling, first plan
    phase_s: float = 60.0  # each of the two phases
    measure_s: float = 15.0  # distinct packets counted over the end of each phase
    chunk_s: float = 15.0  # steady: rates redrawn this often
    noise: float = 0.10
    seed: int = 0
    interval_s: float = 5.0  # controller
    agent_interval_s: float = 2.0
    window_s: float = 15.0  # collector estimation window (iperf3 restarts leave 1-2 s gaps)
    hold_s: float = 60.0  # falls smaller than a step believed after this: twice the
    # noise's time scale seen through the window (chunk + window)
    settle_s: float = 6.0  # two-phase transitions: > agent interval + jitter + apply
    measure_sampling: int = 128  # agents' safe state, measurement plan and floor: 1.2 % of a
    # server's traffic
    polling_s: int = 2  # sFlow counter polling: exact VM-port counters

    @property
    def measure_after_s(self) -> float:
        """The measurement plan only if no snapshot knew a server for two collector windows."""
        return 2 * self.window_s


@dataclass
class Timeline:
    """What happened, in seconds since the start."""

    phases: list[dict[str, Any]] = field(default_factory=list)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    agents: list[dict[str, Any]] = field(default_factory=list)
    flows: list[dict[str, Any]] = field(default_factory=list)


def shifted(topology: Topology) -> tuple[Flow, ...]:
    """The flows with the busiest and the quietest server's traffic swapped."""
    offered = {server.index: 0.0 for server in topology.servers}
    for flow in topology.flows:
        offered[flow.src.server] += flow.pps
    busiest = max(offered, key=lambda k: (offered[k], -k))
    quietest = min(offered, key=lambda k: (offered[k], k))
    swap = {busiest: quietest, quietest: busiest}

    def moved(vm: Vm) -> Vm:
        return Vm(swap.get(vm.server, vm.server), vm.index, vm.prefix)

    return tuple(Flow(moved(f.src), moved(f.dst), f.pps) for f in topology.flows)


def noisy(flows: tuple[Flow, ...], rng: np.random.Generator, noise: float) -> tuple[Flow, ...]:
    return tuple(Flow(f.src, f.dst, f.pps * (1 + rng.uniform(-noise, noise))) for f in flows)


def inventory(topology: Topology, settings: LoopSettings, capacity_pps: float | None) -> dict:
    """The controller's inventory of the testbed: no traffic numbers."""
    return {
        "format": INVENTORY_FORMAT,
        "format_version": 1,
        "name": f"testbed-{topology.prefix}",
        "cost": {"alpha": settings.alpha, "beta": settings.beta},
        "servers": [
            {
                "name": s.name,
                "capacity_pps": capacity_pps or s.capacity_pps,
                "bridge": s.bridge,
                "tunnel_ip": s.tunnel_ip,
                "vm_ports": [vm.port for vm in s.vms],
            }
            for s in topology.servers
        ],
        "sflow": {
            "collector": f"{topology.collector_ip}:{SFLOW_PORT}",
            "header_bytes": 128,
            "polling_s": settings.polling_s,
        },
    }


def addresses(topology: Topology) -> dict:
    """The collector's address inventory: which VM addresses live on which server, and each
    server's sFlow agent address (OVS reports the uplink's, the tunnel address), which is what
    attributes samples before any plan exists."""
    return {
        "format": ADDRESSES_FORMAT,
        "format_version": 1,
        "servers": {
            s.name: {
                "agent_ip": s.tunnel_ip,
                "vm_addresses": [vm.ip for vm in s.vms],
                "vm_macs": [vm.mac for vm in s.vms],
            }
            for s in topology.servers
        },
    }


def run_closed_loop(
    testbed, settings: LoopSettings, out_dir: Path, capacity_pps: float | None, log=print
) -> dict[str, Any]:
    """Run one scenario on an up testbed; returns the raw timeline and what the plans said."""
    from cosample.controller.decide import Policy
    from cosample.controller.inventory import load_inventory
    from cosample.controller.loop import Controller
    from cosample.controller.publish import DirectoryTarget
    from cosample.controller.settings import Settings
    from cosample.lab.sflow import SflowCollector
    from cosample.plan.signing import generate_keypair

    if settings.scenario not in SCENARIOS:
        raise TestbedError(f"--scenario: expected one of {SCENARIOS}, got {settings.scenario!r}")
    reason = apply.agents_available()
    if reason:
        raise TestbedError(f"cannot run agents: {reason}")
    topology = testbed.topology
    work = out_dir / f"closedloop-{settings.scenario}"
    for name in ("controller", "collector", "published"):
        (work / name).mkdir(parents=True, exist_ok=True)
    for stale in ("plan.json", "plan.json.sig"):  # a previous run's plan must not be taken
        (work / "published" / stale).unlink(missing_ok=True)
    for stale in ("state.json", "current-plan.json"):
        (work / "controller" / stale).unlink(missing_ok=True)
    (work / "inventory.json").write_text(
        json.dumps(inventory(topology, settings, capacity_pps), indent=2)
    )
    (work / "addresses.json").write_text(json.dumps(addresses(topology), indent=2))
    key, public = work / "plan.pem", work / "plan.pub"
    for path in (key, public):
        path.unlink(missing_ok=True)
    generate_keypair(key, public)
    apply.remove_all(testbed)
    timeline = Timeline()
    started = time.monotonic()
    clock = lambda: round(time.monotonic() - started, 2)  # noqa: E731
    processes: list[subprocess.Popen] = []
    stop = threading.Event()
    target = DirectoryTarget(work / "published")
    plan_url = str(target.path)
    try:
        with SflowCollector("127.0.0.1", 0, receive_buffer=32 << 20) as lab:
            processes.append(_collector(work, topology, plan_url, lab.target, settings, public))
            controller = Controller(
                load_inventory(work / "inventory.json"),
                Settings(
                    (f"http://127.0.0.1:{SNAPSHOT_PORT}/snapshot",),
                    interval_s=settings.interval_s,
                    tau_s=3 * settings.interval_s,
                    hold_s=settings.hold_s,
                    valid_for_s=600.0,
                    settle_s=settings.settle_s,
                    lead_s=LEAD_S,
                    key=str(key),
                    timeout_s=3.0,
                    measure_sampling=settings.measure_sampling,
                    measure_after_s=settings.measure_after_s,
                    policy=Policy(),
                ),
                target,
                work / "controller",
            )
            threads = [
                threading.Thread(
                    target=_control, args=(controller, settings, stop, timeline, clock), daemon=True
                ),
                threading.Thread(
                    target=_watch_agents, args=(testbed, stop, timeline, clock), daemon=True
                ),
            ]
            for thread in threads:
                thread.start()
            collector = f"{topology.collector_ip}:{SFLOW_PORT}"
            for server in topology.servers:
                processes.append(_agent(testbed, server, plan_url, public, settings, collector))
            log(
                f"closed loop ({settings.scenario}): controller {plan_url}, collector "
                f"127.0.0.1:{SNAPSHOT_PORT}, {len(topology.servers)} agents"
            )
            _drive(topology, settings, lab, timeline, clock, log)
            stop.set()
            for thread in threads:
                thread.join(timeout=settings.interval_s + 10)
    finally:
        stop.set()
        for process in reversed(processes):
            _stop(process)
        apply.remove_all(testbed)
    return {
        "settings": settings.__dict__,
        "timeline": timeline.__dict__,
        "servers": [s.name for s in topology.servers],
    }


def _drive(topology: Topology, settings: LoopSettings, lab, timeline: Timeline, clock, log) -> None:
    """Traffic: start-up, then two phases, each ending with a distinct-packet count."""
    rng = np.random.default_rng(settings.seed)
    base = topology.flows
    second = shifted(topology) if settings.scenario == "shift" else base
    log(
        f"start-up: {settings.startup_s:g} s of traffic (agents in their safe state, then the "
        "first plan)"
    )
    _traffic(topology, base, settings.startup_s, settings, rng, timeline, clock, "startup")
    for phase, flows in (("phase1", base), ("phase2", second)):
        timeline.phases.append({"phase": phase, "start": clock()})
        log(
            f"{phase}: {settings.phase_s:g} s"
            + (" (traffic shifted)" if phase == "phase2" and settings.scenario == "shift" else "")
        )
        _traffic(
            topology,
            flows,
            settings.phase_s - settings.measure_s,
            settings,
            rng,
            timeline,
            clock,
            phase,
        )
        lab.clear()
        began = time.monotonic()
        timeline.phases[-1]["measure_start"] = clock()
        _traffic(topology, flows, settings.measure_s, settings, rng, timeline, clock, phase)
        time.sleep(2.0)  # the last re-exported datagrams
        seconds = time.monotonic() - began
        counts = measure.count_samples(
            lab.snapshot(), topology.server_of_ip(), {s.tunnel_ip: s.name for s in topology.servers}
        )
        timeline.phases[-1].update(
            end=clock(),
            measure_s=round(seconds, 2),
            samples=_per_source(counts.by_pair),
            duplicates=dict(counts.duplicates),
        )


def _traffic(
    topology: Topology,
    flows: tuple[Flow, ...],
    seconds: float,
    settings: LoopSettings,
    rng,
    timeline: Timeline,
    clock,
    phase: str,
) -> None:
    """``flows`` for ``seconds``, in chunks with fresh noise for the steady scenario."""
    chunk = settings.chunk_s if settings.scenario == "steady" else seconds
    left = seconds
    while left > 0.5:
        part = min(chunk, left)
        drawn = noisy(flows, rng, settings.noise) if settings.scenario == "steady" else flows
        start = clock()
        results = traffic.run_flows(topology, part, drawn)
        for result in results:
            timeline.flows.append(
                {
                    "phase": phase,
                    "start": start,
                    "src": f"s{result.flow.src.server}",
                    "dst": f"s{result.flow.dst.server}",
                    "seconds": result.seconds,
                    "sent": result.sent_packets,
                    "lost": result.lost_packets,
                }
            )
        left -= part


def _control(
    controller, settings: LoopSettings, stop: threading.Event, timeline: Timeline, clock
) -> None:
    while not stop.is_set():
        began = time.monotonic()
        try:
            status = controller.cycle()
            entry = status.as_dict()
        except Exception as exc:  # noqa: BLE001 - recorded; the run reports it
            entry = {"result": "internal", "problems": [repr(exc)]}
        entry["t"] = clock()
        current = controller.current or {}
        entry["distinct_planned_pps"] = (current.get("summary") or {}).get("collected_pps")
        entry.update(_estimates(controller))
        timeline.cycles.append(entry)
        stop.wait(max(0.0, settings.interval_s - (time.monotonic() - began)))


def _estimates(controller) -> dict[str, Any]:
    """Per server: the measured and the planned-for (held) traffic, and the coverage
    ``l + c - l c`` of the plan in force (what share of its packets it collects; ``c``: the
    mirrored shares at their receivers' sampling rates)."""
    names = list(controller.inventory.names)
    out: dict[str, Any] = {}
    if controller.measurement is not None and controller.smoothed is not None:
        out["measured_pps"] = dict(zip(names, np.round(controller.measurement.own_pps, 1).tolist()))
        out["held_pps"] = dict(zip(names, np.round(controller.smoothed.held(), 1).tolist()))
    shares = controller.current_shares
    if shares is not None:
        sampled = shares.mirror_rate * shares.local_rate[shares.mirror_dst]
        mirrored = np.bincount(shares.mirror_src, weights=sampled, minlength=len(names))
        coverage = shares.local_rate + mirrored - shares.local_rate * mirrored
        out["coverage"] = dict(zip(names, np.round(coverage, 6).tolist()))
    return out


def _watch_agents(testbed, stop: threading.Event, timeline: Timeline, clock) -> None:
    while not stop.is_set():
        versions = {}
        for server in testbed.topology.servers:
            try:
                status = json.loads(
                    (apply.agent_state_dir(testbed, server) / "status.json").read_text()
                )
                versions[server.name] = (status.get("plan_version"), status.get("mode"))
            except (OSError, ValueError):
                versions[server.name] = (None, None)
        timeline.agents.append({"t": clock(), "versions": versions})
        stop.wait(0.5)


def _collector(
    work: Path,
    topology: Topology,
    plan_url: str,
    reexport: str,
    settings: LoopSettings,
    public: Path,
) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "cosample",
        "collector",
        "run",
        "--plan",
        plan_url,
        "--listen",
        f"{topology.collector_ip}:{SFLOW_PORT}",
        "--metrics-port",
        str(SNAPSHOT_PORT),
        "--http-host",
        "127.0.0.1",
        "--window",
        f"{settings.window_s:g}",
        "--export-interval",
        "1",
        "--plan-interval",
        f"{PLAN_POLL_S:g}",
        "--plan-timeout",
        f"{PLAN_READ_S:g}",
        "--inventory",
        str(work / "addresses.json"),
        "--reexport",
        reexport,
        "--name",
        "testbed",
        "--public-key",
        str(public),
        "--state-dir",
        str(work / "collector"),
    ]
    log = (work / "collector.log").open("w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def agent_config(settings: LoopSettings, collector: str) -> dict:
    """What an agent needs before any plan exists: where to send its safe-state samples, at
    the testbed's rate (its small rates would give the default 1-in-4096 a few samples a
    window), with the counter polling the plans ask for."""
    return {
        "collector": collector,
        "safe_sampling": settings.measure_sampling,
        "polling_s": settings.polling_s,
        "header_bytes": 128,
    }


def _agent(
    testbed, server, plan_url: str, public: Path, settings: LoopSettings, collector: str
) -> subprocess.Popen:
    state = apply.agent_state_dir(testbed, server)
    state.mkdir(parents=True, exist_ok=True)
    for stale in ("status.json", "last-good-plan.json"):
        (state / stale).unlink(missing_ok=True)
    config = state / "agent.yaml"  # JSON is YAML
    config.write_text(json.dumps(agent_config(settings, collector), indent=2))
    argv = apply.agent_argv(
        testbed,
        server,
        "run",
        "--config",
        str(config),
        "--plan",
        plan_url,
        "--interval",
        f"{settings.agent_interval_s:g}s",
        "--jitter",
        "0.5s",
        "--public-key",
        str(public),
    )
    log = (state / "agent.log").open("w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    """Stop one process we started, by its PID."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def _per_source(pairs: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for (source, _sampler), count in pairs.items():
        out[source] = out.get(source, 0) + count
    return out
