"""``testbed run --scenario guard``: a CPU hog on hosts with and without the agents' guard, side
by side in one run (docs/testbed.md, "The guard"; results in docs/results.md).

Two emulated servers forward the same VM-to-VM UDP flow, planned (by the planner, from a
description with the operator's floors: ``servers[].guard``) to sample it 1-in-1, each applied
by its own agent daemon and counted by the real collector. Each server's ovs-vswitchd gets a CPU
budget (a cgroup with a CPU quota: the emulated host's capacity, which on this shared machine
is otherwise whatever the other work leaves). Part-way through, a CPU hog starts in each
server's cgroup (a busy loop: ovs-vswitchd keeps half of its budget) while it runs; one
agent runs its guard (``on``), the other does not (``off``). Then the two swap roles, and again
(``rounds``), so each server is measured both ways several times (the machine is shared: its
load changes from one minute to the next).

Each second the run reads, per server: packets its VM sent into the host (the kernel's count on
the VM's port), packets its datapath read from that port and delivered to the other VM
(``dpctl/show -s``), the agent's guard state (``status.json``) and the collector's estimate and
interval (``/snapshot``). ``guard_report`` turns those rows into the forwarding lost, the time to
relief, and how often the estimates' intervals held the packets the datapath read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.dataplane.run import CommandError, run
from cosample.experiments.testbed import apply
from cosample.experiments.testbed.closedloop import _stop  # one process we started, by PID
from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.measure import parse_dpctl_show, parse_ip_link_stats
from cosample.experiments.testbed.topology import Flow
from cosample.experiments.testbed.traffic import run_flows

SFLOW_PORT = 6343
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 10_000  # short periods: a throttled host stalls 10 ms at most, not 100 ms
HOG = [sys.executable, "-c", "while True: pass"]


@dataclass(frozen=True)
class GuardSettings:
    """The scenario's knobs (``testbed run --scenario guard``)."""

    pps: float = 4_000.0  # each server's VM-to-VM flow
    sampling: int = 1  # the plan's 1-in-N (the declared capacity makes the planner choose it)
    budget_cpus: float = 0.3  # each server's ovs-vswitchd CPU quota
    before_s: float = 15.0
    hog_s: float = 40.0
    after_s: float = 50.0  # long enough to climb back to the plan (5 calm s a rung)
    floor_sampling: int = 256
    limit: float = 0.9
    window_s: float = 10.0  # the collector's window
    hogs: int = 1  # busy loops beside ovs-vswitchd in its budget: it keeps half
    rounds: int = 4  # the guard on s1, then on s2, and again

    @property
    def duration_s(self) -> float:
        return self.before_s + self.hog_s + self.after_s


class CpuBudget:
    """A cgroup (v1 ``cpu``) of ours with a CPU quota; the processes put in it, and on close
    back to the root group, and the directory removed."""

    def __init__(self, name: str, cpus: float) -> None:
        self.path = CGROUP_CPU / name
        try:
            self.path.mkdir()
        except FileExistsError:
            raise TestbedError(
                f"cgroup {self.path} exists: another run, or a killed one (rmdir it)"
            )
        except OSError as exc:
            raise TestbedError(f"cannot create cgroup {self.path}: {exc.strerror}") from None
        (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (self.path / "cpu.cfs_quota_us").write_text(str(max(1000, round(cpus * PERIOD_US))))

    def add(self, pid: int) -> None:
        """``pid`` with every thread it has (ovs-vswitchd's threads are tasks of their own)."""
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                (self.path / "tasks").write_text(task)
            except OSError:
                continue  # exited meanwhile

    def close(self) -> None:
        for _ in range(5):
            try:
                for task in (self.path / "tasks").read_text().split():
                    try:
                        (CGROUP_CPU / "tasks").write_text(task)
                    except OSError:
                        continue
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.2)


def requirements() -> str | None:
    if not (CGROUP_CPU / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu controller at {CGROUP_CPU} (CPU budgets need it)"
    return None


def description(topology, settings: GuardSettings) -> dict[str, Any]:
    """Both servers sample their flow 1-in-``sampling`` (the capacity their planned load needs,
    with the planner's 10 % margin), with the operator's floor."""
    servers = topology.servers[:2]
    alpha = PAPER_ALPHA
    capacity = (settings.pps + alpha * settings.pps / settings.sampling) / 0.9 * 1.0001
    return {
        "name": "guard",
        "cost": {"alpha": alpha, "beta": PAPER_BETA},
        "servers": [
            {
                "name": server.name,
                "capacity_pps": capacity,
                "tunnel_ip": server.tunnel_ip,
                "bridge": server.bridge,
                "vm_ports": [vm.port for vm in server.vms],
                "guard": {"floor_sampling": settings.floor_sampling, "limit": settings.limit},
            }
            for server in servers
        ],
        "traffic_pps": {server.name: {server.name: settings.pps} for server in servers},
        "sflow": {"collector": f"{topology.collector_ip}:{SFLOW_PORT}", "header_bytes": 128},
    }


def run_guard(testbed, settings: GuardSettings, out_dir: Path, log=print) -> dict[str, Any]:
    """Both rounds on an up testbed; the raw rows and what was planned."""
    from cosample.plan.signing import generate_keypair, sign_file
    from cosample.planner import solve
    from cosample.planner.datacentre import DataCentre
    from cosample.planner.planfile import build_plan

    topology = testbed.topology
    if len(topology.servers) < 2 or any(len(s.vms) < 2 for s in topology.servers[:2]):
        raise TestbedError("--scenario guard: needs two servers with two VMs each (testbed up)")
    for reason in (requirements(), apply.agents_available()):
        if reason:
            raise TestbedError(f"--scenario guard: {reason}")
    work = out_dir / "guard"
    (work / "published").mkdir(parents=True, exist_ok=True)
    dc = DataCentre.from_dict(description(topology, settings), source="guard description")
    plan = build_plan(dc, solve(dc), valid_for=_hours(2))
    plan_path = work / "published" / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    key, public = work / "plan.pem", work / "plan.pub"
    for path in (key, public):
        path.unlink(missing_ok=True)
    generate_keypair(key, public)
    sign_file(plan_path, key)
    servers = topology.servers[:2]
    rounds = []
    order = [servers[k % 2].name for k in range(settings.rounds)]
    for number, guarded in enumerate(order, start=1):
        log(f"guard: round {number}: guard on {guarded}, off on the other")
        rounds.append(_round(testbed, settings, work, plan_path, public, guarded, number, log))
    return {
        "settings": asdict(settings),
        "plan": {name: plan["hosts"][name] for name in (s.name for s in servers)},
        "rounds": rounds,
    }


def _round(
    testbed, settings, work: Path, plan_path: Path, public: Path, guarded: str, number: int, log
) -> dict:
    topology = testbed.topology
    servers = topology.servers[:2]
    apply.remove_all(testbed)
    processes: list[subprocess.Popen] = []
    budgets: list[CpuBudget] = []
    hogs: list[subprocess.Popen] = []
    rows: list[dict] = []
    status = None
    prefix = f"cosample-{topology.prefix}-{os.getpid()}"
    try:
        collector, http = _collector(work, topology, plan_path, public, settings, number)
        processes.append(collector)
        for server in servers:
            mode = "on" if server.name == guarded else "off"
            processes.append(_agent(testbed, server, plan_path, public, mode, topology))
        _wait_applied(testbed, servers, int(json.loads(plan_path.read_text())["version"]))
        for server in servers:
            budget = CpuBudget(f"{prefix}-{server.name}", settings.budget_cpus)
            budgets.append(budget)
            budget.add(_vswitchd_pid(testbed, server))
        flows = [Flow(s.vms[0], s.vms[1], settings.pps) for s in servers]
        measured: dict[str, Any] = {}

        def drive() -> None:
            try:
                measured["flows"] = _results(run_flows(topology, settings.duration_s + 2, flows))
            except TestbedError as exc:
                measured["error"] = str(exc)

        traffic = threading.Thread(target=drive, daemon=True)
        traffic.start()
        time.sleep(1.0)
        started = time.monotonic()
        previous = _read(testbed, servers, http)
        while (elapsed := time.monotonic() - started) < settings.duration_s:
            hogging = settings.before_s <= elapsed < settings.before_s + settings.hog_s
            if hogging and not hogs:
                log(f"guard: round {number}: hogs start at {elapsed:.1f} s")
                for budget in budgets:
                    for _ in range(settings.hogs):
                        hog = subprocess.Popen(HOG)
                        hogs.append(hog)
                        budget.add(hog.pid)
            if not hogging and hogs:
                log(f"guard: round {number}: hogs stop at {elapsed:.1f} s")
                _stop_all(hogs)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started - elapsed)))
            now = _read(testbed, servers, http)
            rows.append(_row(now, previous, elapsed + 1.0, hogging, servers))
            previous = now
        traffic.join(timeout=settings.duration_s + 30)
        status = _get_json(f"http://{http}/status")
    finally:
        _stop_all(hogs)
        for budget in budgets:
            budget.close()
        for process in reversed(processes):
            _stop(process)
        apply.remove_all(testbed)
    if "error" in measured:
        raise TestbedError(f"guard: round {number}: {measured['error']}")
    return {
        "round": number,
        "guarded": guarded,
        "rows": rows,
        "flows": measured.get("flows"),
        "collector": status,
    }


def _read(testbed, servers, http: str) -> dict[str, Any]:
    """Counters, guard states and the snapshot, now."""
    out: dict[str, Any] = {"at": time.monotonic(), "wall": time.time(), "servers": {}}
    for server in servers:
        try:
            datapath = parse_dpctl_show(testbed.ovs(server).appctl("dpctl/show", "-s"))
            kernel = parse_ip_link_stats(
                run(["ip", "-n", server.namespace, "-s", "-j", "link", "show"], timeout=5).stdout
            )
        except CommandError as exc:
            raise TestbedError(f"{server.name}: cannot read counters: {exc}") from exc
        src, dst = server.vms[0].port, server.vms[1].port
        status = _status(testbed, server)
        out["servers"][server.name] = {
            "sent": kernel[src].rx_packets,
            "taken": datapath[src].rx_packets,
            "delivered": datapath[dst].tx_packets,
            "guard": (status or {}).get("guard"),
            "sampling": ((status or {}).get("desired") or {}).get("sflow_sampling"),
        }
    out["snapshot"] = _get_json(f"http://{http}/snapshot")
    return out


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def _unix(text: str) -> float:
    from cosample.times import parse_time

    return parse_time(text).timestamp()


def _row(now, before, t: float, hogging: bool, servers) -> dict[str, Any]:
    row: dict[str, Any] = {
        "t": round(t, 2),
        "hog": hogging,
        "seconds": now["at"] - before["at"],
        "wall": now["wall"],
    }
    snapshot = now["snapshot"]
    if snapshot is not None:
        row["collector"] = {key: snapshot.get(key) for key in ("dropped", "ignored", "sequence")}
        row["snapshot_time"] = _unix(snapshot["time"])
    for server in servers:
        a, b = now["servers"][server.name], before["servers"][server.name]
        entry = {key: a[key] - b[key] for key in ("sent", "taken", "delivered")}
        entry["taken_total"] = a["taken"]  # the estimate's truth, interpolated in time
        guard = a["guard"] or {}
        entry.update(
            rung=guard.get("rung"),
            busy=guard.get("busy"),
            mode=guard.get("mode"),
            sampling=a["sampling"],
        )
        if snapshot is not None and server.name in snapshot["servers"]["name"]:
            k = snapshot["servers"]["name"].index(server.name)
            table = snapshot["servers"]
            entry["estimate"] = [
                table["packets_per_s"][k],
                table["packets_per_s_ci95_low"][k],
                table["packets_per_s_ci95_high"][k],
            ]
            entry["samples"] = table["samples"][k]
            entry["reported_rung"] = (snapshot.get("guard") or {}).get(server.name, {}).get("rung")
            entry["window_s"] = snapshot["window_s"]
        row[server.name] = entry
    return row


def _results(results) -> list[dict[str, Any]]:
    return [
        {
            "src": r.flow.src.name,
            "dst": r.flow.dst.name,
            "sent": r.sent_packets,
            "lost": r.lost_packets,
            "seconds": r.seconds,
        }
        for r in results
    ]


def _collector(work, topology, plan_path, public, settings, number) -> tuple[subprocess.Popen, str]:
    log_path = work / f"collector-{number}.log"
    argv = [
        sys.executable,
        "-m",
        "cosample",
        "collector",
        "run",
        "--plan",
        str(plan_path),
        "--listen",
        f"{topology.collector_ip}:{SFLOW_PORT}",
        "--metrics-port",
        "0",
        "--http-host",
        "127.0.0.1",
        "--window",
        f"{settings.window_s:g}",
        "--export-interval",
        "1",
        "--plan-interval",
        "1",
        "--name",
        "guard",
        "--public-key",
        str(public),
    ]
    process = subprocess.Popen(argv, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            if "HTTP on " in line:
                return process, line.split("HTTP on ", 1)[1].split(",")[0].strip()
        if process.poll() is not None:
            break
        time.sleep(0.2)
    _stop(process)
    raise TestbedError(f"collector did not start: {log_path.read_text()[-400:]}")


def _agent(testbed, server, plan_path, public, mode: str, topology) -> subprocess.Popen:
    state = apply.agent_state_dir(testbed, server)
    state.mkdir(parents=True, exist_ok=True)
    for stale in ("status.json", "last-good-plan.json"):
        (state / stale).unlink(missing_ok=True)
    config = state / "agent-guard.yaml"  # JSON is YAML
    config.write_text(
        json.dumps(
            {
                "collector": f"{topology.collector_ip}:{SFLOW_PORT}",
                "guard": mode,
                "guard_interval_s": 1.0,
                "polling_s": 5,
            }
        )
    )
    argv = apply.agent_argv(
        testbed,
        server,
        "run",
        "--config",
        str(config),
        "--plan",
        str(plan_path),
        "--interval",
        "30s",
        "--jitter",
        "0s",
        "--public-key",
        str(public),
    )
    return subprocess.Popen(argv, stdout=(state / "agent.log").open("w"), stderr=subprocess.STDOUT)


def _wait_applied(testbed, servers, version: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = [_status(testbed, server) for server in servers]
        if all(
            s and s.get("plan_version") == version and s.get("mode") == "plan" for s in statuses
        ):
            return
        time.sleep(0.5)
    raise TestbedError(f"the agents did not apply plan version {version} within {timeout_s:g} s")


def _status(testbed, server) -> dict[str, Any] | None:
    try:
        return json.loads((apply.agent_state_dir(testbed, server) / "status.json").read_text())
    except (OSError, ValueError):
        return None


def _vswitchd_pid(testbed, server) -> int:
    text = (testbed.ovs(server).directory / "ovs-vswitchd.pid").read_text().strip()
    if not text.isdigit():
        raise TestbedError(f"{server.name}: no ovs-vswitchd pid ({text[:20]!r})")
    return int(text)


def _hours(hours: float):
    from datetime import timedelta

    return timedelta(hours=hours)


def _stop_all(processes: list[subprocess.Popen]) -> None:
    while processes:
        _stop(processes.pop())
