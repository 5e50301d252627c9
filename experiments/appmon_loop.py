"""The application part of the loop on the testbed (issue 27 item 3): a web server gets busy,
the controller moves its analysis off-host, the load drops, the analysis comes back; per window
the analysers' service times against nginx's access log.

The rig is the comparison's (``cosample.lab.appmirror``): wrk -> userspace OVS -> nginx and its
backend, an analysis namespace behind OVS's VXLAN port. The inventory has two servers: ``web``
(the switch, nginx and the client: the host whose CPU the analysis shares) and ``analysis``. One
service, nginx on port 80. Two real analysers (``cosample appmon run``, signing their snapshots)
report to a real ``Controller`` (in this process, 2-s cycles): the on-site sniffer on the
server's switch port, running only while the plan says ``sniffer``, and the analyser on the
analysis host's ``vx1`` (or ``vx0``, below), which sees what the selective mirror copies. The
plan's application entry is applied with the rig's own mechanisms (``MirrorRig.set_mechanism``,
share 1) and by starting or stopping the sniffer; the agents' own reconciler
(``agents/appmon_*``) is not in this loop. The plan's ``selective_mirror`` (PSH segments of
the service) is made by ``--mirror``: ``tc`` (default), the kernel's copies at the server's
switch port to a kernel VXLAN device (the analyser reads ``vx1``), or ``ovs``, the OpenFlow
flows to OVS's VXLAN port (``vx0``), whose response copies wait in ovs-vswitchd's receive queue
first: on a busy host their service times read high (docs/results.md, "Where the off-site
excess comes from").

**Not under test here: the sFlow part.** The controller's collector input is written every
cycle from the OVS ports' exact packet counters (what the web host's VMs sent), not by a
collector; sFlow is not configured.

**Capacities are scaled** (docs/results.md says how): the machine's two shared cores cannot make
one web server "busy" for a planner whose capacities are OVS's forwarding limits. A calibration
phase measures requests/s at ``--quiet-connections`` and ``--busy-connections`` and packets per
request; the web host's capacity is then set so that, with the on-site sniffer's planned cost
(the calibrated costs, ``appmon_cost.calibration``), the busy rate uses 95 % of it:
``capacity = busy rate x (packets per request x (1 + alpha) + onsite cost per request) / 0.95``; the
overload trigger is at 85 % (``margin`` 0.15) and plans are made for 75 % (``plan_margin``):
10 % below the busy use, so a busy rate that falls short of the calibration's still triggers.
sFlow's alpha and beta are 0.02 and 0.01 (every packet sampled costs little), so that sampling
cannot be what overloads the host. The analysis host's capacity is ten times the web host's.

    python -m cosample.experiments.appmon_loop [--quiet-s 30] [--busy-s 60] [--after-s 60]
        [--quiet-connections 1] [--busy-connections 8] [--mirror tc|ovs] [--capture]
        [--json timeline.json]
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

from cosample.experiments.appmon_loop_report import (SERVICE_PORT, WINDOW_S, accuracy,
                                                    phases_summary)
from cosample.experiments.errors import ExperimentError

CALIBRATION = Path(__file__).resolve().parents[1] / "docs/data/appmon-costs/calibration-appmon.json"
ALPHA, BETA = 0.02, 0.01
#: The sniffer's planned use of the web host at the calibrated busy rate: above the overload
#: trigger (``1 - MARGIN``), below the capacity, so that the plan in force is relieved before
#: the host is over its capacity (a rate measured 5 % above the calibration's still fits).
BUSY_USE, MARGIN, PLAN_MARGIN = 0.95, 0.15, 0.25


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
    #: also capture the copies and the server's interface with tcpdump and replay them: tells
    #: the copies' timing from the live analyser's and from the server's (a diagnostic; costs CPU)
    capture: bool = False
    #: what makes the plan's selective mirror: ``tc`` (kernel, on-site timing) or ``ovs`` (flows)
    mirror: str = "tc"


def counters(rig, ports: tuple[str, ...]) -> int:
    """Packets the bridge received from ``ports`` (what the VMs behind them sent)."""
    from cosample.dataplane.run import run
    total = 0
    for port in ports:
        stats = json.loads(run(["ip", "-n", rig.switch, "-s", "-j", "link", "show",
                                port]).stdout)[0]["stats64"]
        total += stats["rx"]["packets"]
    return total


def collector_snapshot(path: Path, now: datetime, web_pps: float, window_s: float) -> None:
    """The controller's sFlow-side input, from exact counters (see the module's docstring)."""
    from cosample.collector.snapshot import ServerEstimate, Snapshot
    rows = {}
    for name, pps in (("web", web_pps), ("analysis", 1.0)):
        rows[name] = ServerEstimate.model_validate({
            "packets_per_s": pps, "packets_per_s_ci95": [pps, pps], "bytes_per_s": pps * 200,
            "bytes_per_s_ci95": [pps * 200, pps * 200], "samples": 1000,
            "samples_per_s": 1000 / window_s, "local_samples": 1000, "mirrored_samples": 0,
            "coverage": 1.0})
    snap = Snapshot.from_servers(rows, collector="counters", time=now, window_s=window_s,
                                 plan={"version": 1, "plan_id": "counters"},
                                 traffic_pps={"web": {"web": web_pps},
                                              "analysis": {"analysis": 1.0}})
    from cosample.files import write_atomic
    text = snap.to_json()
    write_atomic(path, lambda stream: stream.write(text))


class Analyser:
    """One ``appmon run`` process in a namespace, signing its windows into ``state``."""

    def __init__(self, rig, namespace: str, interface: str, state: Path, key: Path, name: str):
        self.rig, self.namespace, self.interface = rig, namespace, interface
        self.state, self.key, self.name = state, key, name
        self.process = None
        self.cpu_s = 0.0

    def start(self) -> None:
        if self.process is not None:
            return
        self.process = self.rig._spawn(self.namespace, [
            sys.executable, "-m", "cosample", "appmon", "run", "--interface", self.interface,
            "--port", str(SERVICE_PORT), "--window", f"{WINDOW_S:g}s", "--name", self.name,
            "--state-dir", str(self.state), "--snapshot-key", str(self.key)])
        deadline = time.monotonic() + 30
        while True:
            line = self.process.stderr.readline().decode(errors="replace")
            if "capturing on" in line:
                return
            if (not line and self.process.poll() is not None) or time.monotonic() > deadline:
                raise ExperimentError(f"analyser {self.name} did not start: {line!r}")

    def stop(self) -> None:
        if self.process is None:
            return
        from cosample.experiments.appmon_monitors import cpu_seconds
        self.cpu_s += cpu_seconds(self.process.pid)
        self.rig.stop(self.process)
        self.rig._processes.remove(self.process)
        self.process = None

    def windows(self) -> list[dict[str, Any]]:
        path = self.state / "windows.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def inventory(capacity_web: float, packets: float, rig) -> dict[str, Any]:
    from cosample.controller.inventory import FORMAT
    from cosample.lab.web import SERVER_ADDRESS
    return {"format": FORMAT, "format_version": 1, "name": "appmon-loop",
            "cost": {"alpha": ALPHA, "beta": BETA},
            "servers": [{"name": "web", "capacity_pps": capacity_web},
                        {"name": "analysis", "capacity_pps": 10 * capacity_web}],
            "services": [{"server": "web", "address": SERVER_ADDRESS, "port": SERVICE_PORT,
                          "interface": rig.server_port, "packets_per_request": packets}],
            "appmon_cost": {"calibration": str(CALIBRATION)}}


def calibrate(rig, settings: Settings) -> dict[str, float]:
    """Requests/s at both loads and packets per request, measured on the rig, unmonitored."""
    from cosample.experiments.appmon_monitors import parse_wrk
    out = {}
    for label, connections in (("quiet", settings.quiet_connections),
                               ("busy", settings.busy_connections)):
        before_log, before = len(rig.access_log()), counters(rig, (rig.client_port,
                                                                   rig.server_port))
        report = parse_wrk(rig.load(rig.url(mean_ms=settings.mean_ms, size=settings.size),
                                    duration_s=settings.calibrate_s, connections=connections,
                                    latency=True))
        time.sleep(0.3)
        requests = len(rig.access_log()) - before_log
        packets = counters(rig, (rig.client_port, rig.server_port)) - before
        out[f"{label}_requests_per_s"] = report.requests_per_s
        out[f"{label}_packets_per_request"] = packets / max(requests, 1)
    out["packets_per_request"] = (out["quiet_packets_per_request"]
                                  + out["busy_packets_per_request"]) / 2
    return out


def run_scenario(settings: Settings, scratch: Path) -> dict[str, Any]:
    """Build the rig, run the three phases under the controller, return the timeline."""
    from cosample.controller.inventory import inventory_from_dict
    from cosample.controller.loop import Controller, Settings as LoopSettings
    from cosample.controller.publish import DirectoryTarget
    from cosample.controller.decide import Policy
    from cosample.experiments.appmon_monitors import parse_wrk
    from cosample.lab.appmirror import MirrorRig, rig_unavailable
    from cosample.plan.document import parse_document
    from cosample.plan.signing import generate_keypair
    from cosample.planner.appmon import DEFAULT_COSTS

    reason = rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_loop cannot run here: {reason}")
    generate_keypair(scratch / "analyser.pem", scratch / "analyser.pub")
    with MirrorRig(scratch / "rig", seed=settings.seed) as rig:
        measured = calibrate(rig, settings)
        packets = measured["packets_per_request"]
        inv_doc = inventory(1.0, packets, rig)
        costs = {**DEFAULT_COSTS, **inventory_from_dict(inv_doc).appmon_cost}
        # per request on the web host: forwarding and sampling every packet (alpha), and the
        # sniffer as the planner charges it (rate x cost per request, planner.appmon._load_rows)
        per_request = packets * (1 + ALPHA) + costs["onsite"]
        capacity = measured["busy_requests_per_s"] * per_request / BUSY_USE
        inv_doc = inventory(capacity, packets, rig)
        inv = inventory_from_dict(inv_doc)
        onsite = Analyser(rig, rig.switch, rig.server_port, scratch / "onsite",
                          scratch / "analyser.pem", "onsite")
        copies = "vx1" if settings.mirror == "tc" else "vx0"  # where the mirror's copies arrive
        offsite = Analyser(rig, rig.analysis, copies, scratch / "offsite",
                           scratch / "analyser.pem", "offsite")
        offsite.start()
        # the copies as they arrive, and the server's own interface (its timing, which the
        # copies should keep), both replayed at the end beside the live analyser
        captures = {name: rig._spawn(namespace, [
            "tcpdump", "-i", device, "-U", "-n", "-s", "200", "-w", str(scratch / f"{name}.pcap"),
            f"tcp port {SERVICE_PORT}"])
            for name, namespace, device in (("offsite_replay", rig.analysis, copies),
                                            ("server_replay", rig.server, "eth0"))} \
            if settings.capture else {}
        collector = scratch / "collector.json"
        loop = LoopSettings((str(collector),), interval_s=WINDOW_S, tau_s=2 * WINDOW_S,
                            hold_s=2 * WINDOW_S, settle_s=WINDOW_S, lead_s=0.0,
                            valid_for_s=3600.0, measure_sampling=None,
                            plan_margin=PLAN_MARGIN,
                            policy=Policy(margin=MARGIN, confirm_cycles=3),
                            analysers=(str(onsite.state / "snapshot.json"),
                                       str(offsite.state / "snapshot.json")),
                            analyser_keys=(str(scratch / "analyser.pub"),))
        controller = Controller(inv, loop, DirectoryTarget(scratch / "plans"),
                                scratch / "controller")
        applied: dict[str, Any] = {"version": None, "mechanism": "none"}

        def apply() -> None:
            """The plan's application entry onto the rig (see the module's docstring)."""
            path = scratch / "plans" / "plan.json"
            if not path.exists():
                return
            plan = parse_document(path.read_bytes())[-1]
            if plan.version == applied["version"]:
                return
            entries = [e for host in plan.hosts.values() for e in (host.appmon or ())]
            mechanism = entries[0].mechanism if entries else "none"
            share = entries[0].share if entries else 0.0
            if mechanism == "selective_mirror":
                if share < 1:
                    raise ExperimentError(f"plan {plan.version}: share {share} < 1 (the rig "
                                          "applies whole powers of two only; not met here)")
                if settings.mirror == "tc":  # no truncation in tc: whole PSH segments
                    rig.set_mechanism("tc", service_port=SERVICE_PORT)
                else:
                    rig.set_mechanism("selective", entries[0].truncate_bytes,
                                      service_port=SERVICE_PORT)
                onsite.stop()
            elif mechanism == "sniffer":
                rig.set_mechanism("none")
                onsite.start()
            else:
                rig.set_mechanism("none")
                onsite.stop()
            applied.update(version=plan.version, mechanism=mechanism, share=share)

        phases = (("quiet", settings.quiet_s, settings.quiet_connections),
                  ("busy", settings.busy_s, settings.busy_connections),
                  ("after", settings.after_s, settings.quiet_connections))
        timeline: list[dict[str, Any]] = []
        clients: list[dict[str, Any]] = []
        started = time.time()
        ports = (rig.client_port, rig.server_port)
        last_packets, last_time = counters(rig, ports), time.time()
        for phase, seconds, connections in phases:
            reports: list[str] = []
            load = threading.Thread(target=lambda: reports.append(rig.load(
                rig.url(mean_ms=settings.mean_ms, size=settings.size), duration_s=seconds,
                connections=connections, latency=True)), daemon=True)
            load.start()
            end = time.time() + seconds
            while time.time() < end - 0.1:
                time.sleep(max(0.0, WINDOW_S - (time.time() - started) % WINDOW_S))
                now = time.time()
                packets_now = counters(rig, ports)
                web_pps = (packets_now - last_packets) / max(now - last_time, 1e-6)
                last_packets, last_time = packets_now, now
                collector_snapshot(collector, datetime.fromtimestamp(now, timezone.utc),
                                   web_pps, WINDOW_S)
                status = controller.cycle()
                apply()
                apps = status.applications or {}
                timeline.append({
                    "t": round(now - started, 2), "phase": phase, "result": status.result,
                    "reasons": list(status.reasons), "plan_version": status.plan_version,
                    "mechanism": applied["mechanism"], "web_pps": round(web_pps, 1),
                    "rate_present": (apps.get("rates_present") or [None])[0],
                    "rate_planned": (apps.get("rates_planned") or [None])[0],
                    "predicted_max_use": status.predicted_max_use,
                    "analysers_up": apps.get("analysers_up"), "problems": list(status.problems)})
            load.join(timeout=seconds + 60)
            if reports:  # what the client saw: the latency includes the switch's delays
                wrk = parse_wrk(reports[0])
                clients.append({"phase": phase, "requests_per_s": wrk.requests_per_s,
                                "latency_mean_ms": wrk.latency_mean_ms,
                                "latency_p99_ms": wrk.latency_p99_ms})
        time.sleep(WINDOW_S + 0.6)  # the last windows close
        onsite.stop()
        offsite.stop()
        log = rig.access_log()
        windows = {"onsite": onsite.windows(), "offsite": offsite.windows()}
        for name, capture in captures.items():
            from cosample.appmon.replay import replay
            rig.stop(capture)
            windows[name] = [
                json.loads(snap.to_json()) for snap in replay(
                    scratch / f"{name}.pcap", window_s=WINDOW_S, ports=frozenset({SERVICE_PORT}))]
        copied = rig.analysis_counters("eth1" if settings.mirror == "tc" else "eth0")
        return {"settings": settings.__dict__, "calibration": measured,
                "underlay_rx": {"packets": copied.packets, "bytes": copied.bytes},
                "capacity_web_pps": capacity, "costs": costs, "timeline": timeline,
                "clients": clients,
                "accuracy": accuracy(windows, log),
                "analyser_cpu_s": {"onsite": onsite.cpu_s, "offsite": offsite.cpu_s}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet-s", type=float, default=30.0)
    parser.add_argument("--busy-s", type=float, default=60.0)
    parser.add_argument("--after-s", type=float, default=60.0)
    parser.add_argument("--quiet-connections", type=int, default=1)
    parser.add_argument("--busy-connections", type=int, default=8)
    parser.add_argument("--mirror", choices=("tc", "ovs"), default="tc",
                        help="the plan's selective mirror by the kernel at the server's port "
                        "(tc, default) or by OpenFlow flows to OVS's tunnel (ovs)")
    parser.add_argument("--capture", action="store_true", help="also tcpdump the copies and the "
                        "server's interface and compare their replays (the copies' own timing, "
                        "the server's) with the live analyser")
    parser.add_argument("--json", type=Path, help="write the whole result here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in ("quiet_s", "busy_s", "after_s"):
        if not 0 < getattr(args, name) <= 600:
            raise SystemExit(f"--{name.replace('_', '-')}: expected 0 < seconds <= 600")
    settings = Settings(quiet_s=args.quiet_s, busy_s=args.busy_s, after_s=args.after_s,
                        quiet_connections=args.quiet_connections,
                        busy_connections=args.busy_connections, capture=args.capture,
                        mirror=args.mirror)
    with tempfile.TemporaryDirectory(prefix="cosample-appmon-loop-") as scratch:
        try:
            result = run_scenario(settings, Path(scratch))
        except ExperimentError as exc:
            print(f"appmon_loop: {exc}", file=sys.stderr)
            return 1
    cal = result["calibration"]
    print(f"calibration: {cal['quiet_requests_per_s']:.0f} req/s quiet, "
          f"{cal['busy_requests_per_s']:.0f} busy, {cal['packets_per_request']:.2f} packets per "
          f"request; web capacity scaled to {result['capacity_web_pps']:.0f} pps")
    for row in result["timeline"]:
        print(f"{row['t']:7.1f} {row['phase']:<6} v{row['plan_version']} {row['mechanism']:<17}"
              f" {row['result']:<9} rate {row['rate_present'] or 0:7.1f}/s"
              f" use {row['predicted_max_use'] or 0:5.2f}  {'; '.join(row['reasons'])[:90]}")
    for phase in phases_summary(result):
        print(json.dumps(phase))
    compared = [r for r in result["accuracy"] if r["compared"]]
    bad = [r for r in compared if not (r["mean_ok"] and r["p95_ok"])]
    for source in sorted({r["source"] for r in result["accuracy"]}):
        mine = [r for r in compared if r["source"] == source]
        print(f"{source}: windows compared with the access log {len(mine)}, mean within "
              f"tolerance {sum(r['mean_ok'] for r in mine)}, p95 within {sum(r['p95_ok'] for r in mine)}")
    for row in bad:
        print(f"  outside: {row['source']} {row['window_start']} n={row['matched']} mean "
              f"{1e3 * row['mean_s']:.2f} ms (log {1e3 * row['log_mean_s']:.2f}) p95 "
              f"{1e3 * row['p95_s']:.2f} ms (log {1e3 * row['log_p95_low_s']:.0f}-"
              f"{1e3 * row['log_p95_high_s']:.0f})")
    for client in result["clients"]:
        print(f"wrk {client['phase']}: {client['requests_per_s']:.0f} req/s, latency mean "
              f"{client['latency_mean_ms']:.2f} ms, p99 {client['latency_p99_ms']:.2f} ms")
    print(f"analyser CPU seconds: {result['analyser_cpu_s']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
