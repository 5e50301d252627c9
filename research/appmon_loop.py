"""The application part of the loop on the testbed (issue 27 item 3): a web server gets busy,
the controller moves its analysis off-host, the load drops, the analysis comes back; per window
the analysers' service times against nginx's access log.

The rig is the comparison's (``cosample.lab.appmirror``): wrk -> userspace OVS -> nginx and its
backend, an analysis namespace behind OVS's VXLAN port. The inventory has two servers: ``web``
(the switch, nginx and the client: the host whose CPU the analysis shares) and ``analysis``. One
service, nginx on port 80. A real ``Controller`` (in this process, 2-s cycles) publishes
signed plans to a directory; two real agents (``cosample agent run``, one per host in its
namespace, ``appmon_loop_agents``) poll it every 2 s and apply it: the web host's agent
reconciles the plan's mirror (its VXLAN device toward the analysis host, and the kernel mirror's
tc filters on the server's port, ``--mirror kernel_mirror``, the default, or the selective
mirror's OpenFlow PSH flows, ``--mirror selective_mirror``) and
its supervisor runs the on-site sniffer on the server's switch port while the plan says
``sniffer``; the analysis host's agent creates the receive device and its supervisor runs the
analyser on it while the plan mirrors there. The analysers sign their snapshots; the
controller reads them. The timeline's mechanism is what the web agent reports applied; every
command the agents applied is in ``agent_actions``.

**Not under test here: the sFlow part.** The controller's collector input is written every
cycle from the OVS ports' exact packet counters (what the web host's VMs sent), not by a
collector; sFlow is not configured.

**Capacities are scaled** (docs/results/appmon.md says how): the machine's two shared cores cannot make
one web server "busy" for a planner whose capacities are OVS's forwarding limits. A calibration
phase measures requests/s at ``--quiet-connections`` and ``--busy-connections`` and packets per
request; the web host's capacity is then set so that, with the on-site sniffer's planned cost
(the calibrated costs, ``appmon_cost.calibration``), the busy rate uses 95 % of it:
``capacity = busy rate x (packets per request x (1 + alpha) + onsite cost per request) / 0.95``; the
overload trigger is at 70 % (``margin`` 0.30) and plans are made for 60 % (``plan_margin``):
25 % below the busy use, so a busy rate that falls short of the calibration's still triggers
(the loop's busy rate, with the sniffer and the controller beside nginx, fell 10-15 % short of
the 4-s calibration's under the whole test suite's load: with the trigger at 85 % the move
came late or never). The quiet rate (under half the busy one) stays well under 60 %.
sFlow's alpha and beta are 0.02 and 0.01 (every packet sampled costs little), so that sampling
cannot be what overloads the host. The analysis host's capacity is ten times the web host's.

    python -m research.appmon_loop [--quiet-s 30] [--busy-s 60] [--after-s 60]
        [--quiet-connections 1] [--busy-connections 8] [--capture] [--json timeline.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cosample.agents.appmon_state import RECEIVE_PREFIX
from cosample.agents.state import short_hash
from cosample.experiments.errors import ExperimentError
from research.appmon_loop_agents import ANALYSIS, WEB, LoopAgents
from research.appmon_loop_report import (
    SERVICE_PORT,
    WINDOW_S,
    accuracy,
    phases_summary,
    with_log_means,
)

CALIBRATION = Path(__file__).resolve().parents[1] / "docs/data/appmon-costs/calibration-appmon.json"
ALPHA, BETA = 0.02, 0.01
#: The sniffer's planned use of the web host at the calibrated busy rate: well above the
#: overload trigger (``1 - MARGIN``; a busy rate 25 % short of the calibration's still
#: triggers), below the capacity, so that the plan in force is relieved before the host is over
#: its capacity (a rate measured 5 % above the calibration's still fits).
BUSY_USE, MARGIN, PLAN_MARGIN = 0.95, 0.30, 0.40


@dataclass(frozen=True)
class Settings:
    quiet_s: float = 30.0
    busy_s: float = 60.0
    after_s: float = 60.0
    quiet_connections: int = 1
    busy_connections: int = 8
    mean_ms: float = 2.0
    size: int = 100
    calibrate_s: float = 4.0
    seed: int = 3
    #: also capture vx0 with tcpdump and replay it: tells the copies' timing from the live
    #: analyser's (a diagnostic; costs CPU on the analysis host)
    capture: bool = False
    #: how the plan copies the service off-host (the description's ``services[].mirror``):
    #: ``kernel_mirror`` (tc on the server's port: its timing) or ``selective_mirror`` (OpenFlow
    #: flows, whose response copies wait in ovs-vswitchd's queue first; docs/results/appmon.md)
    mirror: str = "kernel_mirror"


def counters(rig, ports: tuple[str, ...]) -> int:
    """Packets the bridge received from ``ports`` (what the VMs behind them sent)."""
    from cosample.dataplane.run import run

    total = 0
    for port in ports:
        stats = json.loads(run(["ip", "-n", rig.switch, "-s", "-j", "link", "show", port]).stdout)[
            0
        ]["stats64"]
        total += stats["rx"]["packets"]
    return total


def collector_snapshot(path: Path, now: datetime, web_pps: float, window_s: float) -> None:
    """The controller's sFlow-side input, from exact counters (see the module's docstring)."""
    from cosample.collector.snapshot import Snapshot
    from cosample.collector.snapshottables import ServerEstimate

    rows = {}
    for name, pps in (("web", web_pps), ("analysis", 1.0)):
        rows[name] = ServerEstimate.model_validate(
            {
                "packets_per_s": pps,
                "packets_per_s_ci95": [pps, pps],
                "bytes_per_s": pps * 200,
                "bytes_per_s_ci95": [pps * 200, pps * 200],
                "samples": 1000,
                "samples_per_s": 1000 / window_s,
                "local_samples": 1000,
                "mirrored_samples": 0,
                "coverage": 1.0,
            }
        )
    snap = Snapshot.from_servers(
        rows,
        collector="counters",
        time=now,
        window_s=window_s,
        plan={"version": 1, "plan_id": "counters"},
        traffic_pps={"web": {"web": web_pps}, "analysis": {"analysis": 1.0}},
    )
    from cosample.files import write_atomic

    text = snap.to_json()
    write_atomic(path, lambda stream: stream.write(text))


def inventory(
    capacity_web: float, packets: float, rig, mirror: str = "kernel_mirror"
) -> dict[str, Any]:
    from cosample.controller.inventory import FORMAT
    from cosample.lab.appmirror import UNDERLAY_ANALYSIS, UNDERLAY_SWITCH
    from cosample.lab.web import SERVER_ADDRESS

    return {
        "format": FORMAT,
        "format_version": 1,
        "name": "appmon-loop",
        "cost": {"alpha": ALPHA, "beta": BETA},
        "servers": [
            {"name": "web", "capacity_pps": capacity_web, "tunnel_ip": UNDERLAY_SWITCH},
            {"name": "analysis", "capacity_pps": 10 * capacity_web, "tunnel_ip": UNDERLAY_ANALYSIS},
        ],
        "services": [
            {
                "server": "web",
                "address": SERVER_ADDRESS,
                "port": SERVICE_PORT,
                "interface": rig.server_port,
                "packets_per_request": packets,
                "mirror": mirror,
            }
        ],
        "appmon_cost": {"calibration": str(CALIBRATION)},
    }


def calibrate(rig, settings: Settings) -> dict[str, float]:
    """Requests/s at both loads and packets per request, measured on the rig, unmonitored."""
    from cosample.experiments.appmon_monitors import parse_wrk

    out = {}
    for label, connections in (
        ("quiet", settings.quiet_connections),
        ("busy", settings.busy_connections),
    ):
        before_log, before = (
            len(rig.access_log()),
            counters(rig, (rig.client_port, rig.server_port)),
        )
        report = parse_wrk(
            rig.load(
                rig.url(mean_ms=settings.mean_ms, size=settings.size),
                duration_s=settings.calibrate_s,
                connections=connections,
                latency=True,
            )
        )
        time.sleep(0.3)
        requests = len(rig.access_log()) - before_log
        packets = counters(rig, (rig.client_port, rig.server_port)) - before
        out[f"{label}_requests_per_s"] = report.requests_per_s
        out[f"{label}_packets_per_request"] = packets / max(requests, 1)
    out["packets_per_request"] = (
        out["quiet_packets_per_request"] + out["busy_packets_per_request"]
    ) / 2
    return out


def run_scenario(settings: Settings, scratch: Path) -> dict[str, Any]:
    """Build the rig, run the three phases under the controller, return the timeline."""
    from cosample.lab.appmirror import MirrorRig, rig_unavailable
    from cosample.plan.signing import generate_keypair

    reason = rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_loop cannot run here: {reason}")
    generate_keypair(scratch / "analyser.pem", scratch / "analyser.pub")
    generate_keypair(scratch / "plan.pem", scratch / "plan.pub")
    with MirrorRig(scratch / "rig", seed=settings.seed) as rig:
        # the agents run from the start (in their safe state until the first plan), so the
        # calibration measures the web host with their polling beside it
        agents = LoopAgents(
            rig,
            scratch,
            scratch / "plans" / "plan.json",
            scratch / "plan.pub",
            scratch / "analyser.pem",
            WINDOW_S,
        )
        agents.start()
        try:
            return _calibrated(settings, scratch, rig, agents)
        finally:
            agents.stop()


def _calibrated(settings: Settings, scratch: Path, rig, agents) -> dict[str, Any]:
    """Calibrate, size the inventory, build the controller, run the phases."""
    from cosample.controller.decide import Policy
    from cosample.controller.inventory import inventory_from_dict
    from cosample.controller.loop import Controller
    from cosample.controller.publish import DirectoryTarget
    from cosample.controller.settings import Settings as LoopSettings
    from cosample.lab.web import SERVER_ADDRESS
    from cosample.planner.appmon import DEFAULT_COSTS

    measured = calibrate(rig, settings)
    packets = measured["packets_per_request"]
    inv_doc = inventory(1.0, packets, rig, settings.mirror)
    costs = {**DEFAULT_COSTS, **inventory_from_dict(inv_doc).appmon_cost}
    # per request on the web host: forwarding and sampling every packet (alpha), and the
    # sniffer as the planner charges it (rate x cost per request, planner.appmon._load_rows)
    per_request = packets * (1 + ALPHA) + costs["onsite"]
    capacity = measured["busy_requests_per_s"] * per_request / BUSY_USE
    inv_doc = inventory(capacity, packets, rig, settings.mirror)
    inv = inventory_from_dict(inv_doc)
    service = f"{SERVER_ADDRESS}:{SERVICE_PORT}"
    sources = {
        "onsite": agents.analyser_dir(WEB, service),
        "offsite": agents.analyser_dir(ANALYSIS, service),
    }
    collector = scratch / "collector.json"
    loop = LoopSettings(
        (str(collector),),
        interval_s=WINDOW_S,
        tau_s=2 * WINDOW_S,
        hold_s=2 * WINDOW_S,
        settle_s=WINDOW_S,
        lead_s=0.0,
        valid_for_s=3600.0,
        measure_sampling=None,
        plan_margin=PLAN_MARGIN,
        key=str(scratch / "plan.pem"),
        policy=Policy(margin=MARGIN, confirm_cycles=3),
        analysers=tuple(str(d / "snapshot.json") for d in sources.values()),
        analyser_keys=(str(scratch / "analyser.pub"),),
    )
    controller = Controller(inv, loop, DirectoryTarget(scratch / "plans"), scratch / "controller")
    return _phases(
        settings,
        scratch,
        rig,
        controller,
        agents,
        collector,
        sources,
        {"calibration": measured, "capacity_web_pps": capacity, "costs": costs},
    )


def _phases(
    settings: Settings,
    scratch: Path,
    rig,
    controller,
    agents,
    collector: Path,
    sources: dict[str, Path],
    result: dict[str, Any],
) -> dict[str, Any]:
    """The three phases: load, collector input, a controller cycle and what the agents applied
    every window; then each analyser's windows against the access log."""
    from cosample.experiments.appmon_monitors import parse_wrk

    capture = None
    phases = (
        ("quiet", settings.quiet_s, settings.quiet_connections),
        ("busy", settings.busy_s, settings.busy_connections),
        ("after", settings.after_s, settings.quiet_connections),
    )
    timeline: list[dict[str, Any]] = []
    clients: list[dict[str, Any]] = []
    started = time.time()
    ports = (rig.client_port, rig.server_port)
    last_packets, last_time = counters(rig, ports), time.time()
    for phase, seconds, connections in phases:
        reports: list[str] = []
        begun = time.time()
        load = threading.Thread(
            target=lambda: reports.append(
                rig.load(
                    rig.url(mean_ms=settings.mean_ms, size=settings.size),
                    duration_s=seconds,
                    connections=connections,
                    latency=True,
                )
            ),
            daemon=True,
        )
        load.start()
        end = time.time() + seconds
        while time.time() < end - 0.1:
            time.sleep(max(0.0, WINDOW_S - (time.time() - started) % WINDOW_S))
            now = time.time()
            packets_now = counters(rig, ports)
            web_pps = (packets_now - last_packets) / max(now - last_time, 1e-6)
            last_packets, last_time = packets_now, now
            collector_snapshot(
                collector, datetime.fromtimestamp(now, timezone.utc), web_pps, WINDOW_S
            )
            status = controller.cycle()
            mechanism = agents.mechanism()
            if settings.capture and capture is None and mechanism == settings.mirror:
                capture = rig._spawn(
                    rig.analysis,
                    [  # the analysis agent's receive device
                        "tcpdump",
                        "-i",
                        f"{RECEIVE_PREFIX}-{short_hash(WEB)}",
                        "-U",
                        "-n",
                        "-s",
                        "0",
                        "-w",
                        str(scratch / "copies.pcap"),
                        "tcp",
                    ],
                )
            apps = status.applications or {}
            timeline.append(
                {
                    "t": round(now - started, 2),
                    "phase": phase,
                    "result": status.result,
                    "reasons": list(status.reasons),
                    "plan_version": status.plan_version,
                    "mechanism": mechanism,
                    "web_pps": round(web_pps, 1),
                    "agents": {
                        host: [agents.status(host).get(k) for k in ("plan_version", "result")]
                        for host in (WEB, ANALYSIS)
                    },
                    "rates_measured": apps.get("rates_measured"),
                    "rate_present": (apps.get("rates_present") or [None])[0],
                    "rate_planned": (apps.get("rates_planned") or [None])[0],
                    "predicted_max_use": status.predicted_max_use,
                    "analysers_up": apps.get("analysers_up"),
                    "problems": list(status.problems),
                }
            )
        load.join(timeout=seconds + 60)
        if reports:  # what the client saw: the latency includes the switch's delays
            wrk = parse_wrk(reports[0])
            clients.append(
                {
                    "phase": phase,
                    "requests_per_s": wrk.requests_per_s,
                    "latency_mean_ms": wrk.latency_mean_ms,
                    "latency_p99_ms": wrk.latency_p99_ms,
                    "start": begun,
                }
            )
    time.sleep(WINDOW_S + 0.6)  # the last windows close
    agents.stop()  # the agents stop their analysers (SIGTERM: the last window is written)
    log = rig.access_log()
    windows = {source: _windows(directory) for source, directory in sources.items()}
    if capture is not None:
        from cosample.appmon.replay import replay

        rig.stop(capture)
        windows["offsite_replay"] = [
            json.loads(snap.to_json())
            for snap in replay(
                scratch / "copies.pcap", window_s=WINDOW_S, ports=frozenset({SERVICE_PORT})
            )
        ]
    return {
        "settings": settings.__dict__,
        **result,
        "timeline": timeline,
        "clients": with_log_means(clients, log),
        "accuracy": accuracy(windows, log),
        "agent_actions": agents.actions(),
    }


def _windows(directory: Path) -> list[dict[str, Any]]:
    path = directory / "windows.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet-s", type=float, default=30.0)
    parser.add_argument("--busy-s", type=float, default=60.0)
    parser.add_argument("--after-s", type=float, default=60.0)
    parser.add_argument("--quiet-connections", type=int, default=1)
    parser.add_argument("--busy-connections", type=int, default=8)
    parser.add_argument(
        "--capture",
        action="store_true",
        help="also tcpdump vx0 and compare "
        "its replay (the mirrored copies' own timing) with the live analyser",
    )
    parser.add_argument(
        "--mirror",
        choices=("kernel_mirror", "selective_mirror"),
        default="kernel_mirror",
        help="how the plan copies the service "
        "off-host (default: kernel_mirror, the server's timing)",
    )
    parser.add_argument("--json", type=Path, help="write the whole result here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in ("quiet_s", "busy_s", "after_s"):
        if not 0 < getattr(args, name) <= 600:
            raise SystemExit(f"--{name.replace('_', '-')}: expected 0 < seconds <= 600")
    settings = Settings(
        quiet_s=args.quiet_s,
        busy_s=args.busy_s,
        after_s=args.after_s,
        quiet_connections=args.quiet_connections,
        busy_connections=args.busy_connections,
        capture=args.capture,
        mirror=args.mirror,
    )
    with tempfile.TemporaryDirectory(prefix="cosample-appmon-loop-") as scratch:
        try:
            result = run_scenario(settings, Path(scratch))
        except ExperimentError as exc:
            print(f"appmon_loop: {exc}", file=sys.stderr)
            return 1
    cal = result["calibration"]
    print(
        f"calibration: {cal['quiet_requests_per_s']:.0f} req/s quiet, "
        f"{cal['busy_requests_per_s']:.0f} busy, {cal['packets_per_request']:.2f} packets per "
        f"request; web capacity scaled to {result['capacity_web_pps']:.0f} pps"
    )
    for row in result["timeline"]:
        print(
            f"{row['t']:7.1f} {row['phase']:<6} v{row['plan_version']} {row['mechanism']:<17}"
            f" {row['result']:<9} rate {row['rate_present'] or 0:7.1f}/s"
            f" use {row['predicted_max_use'] or 0:5.2f}  {'; '.join(row['reasons'])[:90]}"
        )
    for phase in phases_summary(result):
        print(json.dumps(phase))
    compared = [r for r in result["accuracy"] if r["compared"]]
    bad = [r for r in compared if not (r["mean_ok"] and r["p95_ok"])]
    for source in sorted({r["source"] for r in result["accuracy"]}):
        mine = [r for r in compared if r["source"] == source]
        print(
            f"{source}: windows compared with the access log {len(mine)}, mean within "
            f"tolerance {sum(r['mean_ok'] for r in mine)}, p95 within {sum(r['p95_ok'] for r in mine)}"
        )
    for row in bad:
        print(
            f"  outside: {row['source']} {row['window_start']} n={row['matched']} mean "
            f"{1e3 * row['mean_s']:.2f} ms (log {1e3 * row['log_mean_s']:.2f}) p95 "
            f"{1e3 * row['p95_s']:.2f} ms (log {1e3 * row['log_p95_low_s']:.0f}-"
            f"{1e3 * row['log_p95_high_s']:.0f})"
        )
    for client in result["clients"]:
        print(
            f"wrk {client['phase']}: {client['requests_per_s']:.0f} req/s, latency mean "
            f"{client['latency_mean_ms']:.2f} ms, p99 {client['latency_p99_ms']:.2f} ms"
        )
    for action in result["agent_actions"]:
        print(f"agent {action['host']} {action['time']}: {action['action']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
