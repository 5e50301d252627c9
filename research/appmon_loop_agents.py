"""The application loop's agents (``research/appmon_loop.py``): one ``cosample agent run``
per host, in the host's namespace, applying the controller's signed publication.

- ``web``, in the rig's switch namespace: its OVSDB is the rig's switch, its bridge the one
  between client and server. It applies the whole plan to that bridge: sFlow (toward a
  collector address nobody listens on: the controller's sFlow input comes from counters, see
  the scenario's docstring), the application mirror (its own VXLAN device toward the analysis
  host, routed over the rig's underlay through the br-phy bridge, and the selective flows), and
  its supervisor runs the on-site sniffer on the server's port when the plan says ``sniffer``.
- ``analysis``, in the rig's analysis namespace: a dummy OVS only for its OVSDB (it has no
  switch of its own); it creates the receive VXLAN device of the mirror and its supervisor runs
  the analyser on it while the plan mirrors to it.

Their analysers sign their snapshots; the controller reads them from the state directories,
whose names the agents' ``analyser_name`` gives. Each agent is stopped by its PID (SIGTERM: it
stops its analysers; SIGKILL after a timeout).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cosample.agents.analysers import ANALYSERS_DIR, analyser_name
from cosample.agents.appmon_state import RECEIVE_PREFIX
from cosample.agents.report import read_status
from cosample.agents.state import short_hash
from cosample.experiments.errors import ExperimentError

WEB, ANALYSIS = "web", "analysis"
#: Nobody listens there: the agents configure sFlow as the plan says, the scenario reads counters.
COLLECTOR = "127.0.0.1:6343"
#: Every agent's cycle: a plan is applied within this long of its publication.
AGENT_INTERVAL_S = 2.0
#: The agents' safe state (before the first plan) samples as the plans do (the planner's
#: alpha makes sampling every packet cheap, so it asks 1-in-1): the calibration, made before
#: the first plan, then measures the web host with the sFlow load the plans keep on it.
SAFE_SAMPLING = 1


class LoopAgents:
    def __init__(
        self, rig, scratch: Path, plan: Path, public_key: Path, analyser_key: Path, window_s: float
    ) -> None:
        self.rig, self.scratch, self.plan = rig, scratch, plan
        self.public_key, self.analyser_key, self.window_s = public_key, analyser_key, window_s
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Any] = {}
        self.analysis_ovs = None

    def state_dir(self, host: str) -> Path:
        return self.scratch / f"agent-{host}"

    def analyser_dir(self, host: str, service: str) -> Path:
        """Where ``host``'s analyser of ``service`` writes (on-site sniffer or mirror's)."""
        if host == WEB:
            name = analyser_name("sniffer", WEB, service, self.rig.server_port)
        else:
            name = analyser_name("mirror", WEB, service, f"{RECEIVE_PREFIX}-{short_hash(WEB)}")
        return self.state_dir(host) / ANALYSERS_DIR / name

    def start(self) -> None:
        from cosample.lab.ovs import OvsInstance

        self.analysis_ovs = OvsInstance(
            self.scratch / "ovs-analysis", dummy=True, namespace=self.rig.analysis
        ).start()
        bridge = f"{self.rig.prefix}ab"
        self.analysis_ovs.vsctl("add-br", bridge)
        hosts = {
            WEB: (
                self.rig.switch,
                self.rig.ovs,
                self.rig.bridge,
                (self.rig.client_port, self.rig.server_port),
            ),
            ANALYSIS: (self.rig.analysis, self.analysis_ovs, bridge, ()),
        }
        for host, (namespace, ovs, bridge_name, ports) in hosts.items():
            config = self.scratch / f"agent-{host}.toml"
            config.write_text(
                "\n".join(
                    [
                        f'host = "{host}"',
                        f'plan = "{self.plan}"',
                        f'ovsdb = "{ovs.remote}"',
                        f'ovs_rundir = "{ovs.directory}"',
                        f'bridge = "{bridge_name}"',
                        "vm_ports = [" + ", ".join(f'"{p}"' for p in ports) + "]",
                        f'collector = "{COLLECTOR}"',
                        f'state_dir = "{self.state_dir(host)}"',
                        f'public_key = "{self.public_key}"',
                        f"interval_s = {AGENT_INTERVAL_S}",
                        "jitter_s = 0.0",
                        f"safe_sampling = {SAFE_SAMPLING}",
                        f'analyser_key = "{self.analyser_key}"',
                        f"analyser_window_s = {self.window_s:g}",
                        "run_analysers = true",
                    ]
                )
                + "\n"
            )
            log = open(self.scratch / f"agent-{host}.log", "ab")
            self.logs[host] = log
            self.processes[host] = subprocess.Popen(
                self.rig.lab.exec_argv(
                    namespace,
                    [sys.executable, "-m", "cosample", "agent", "run", "--config", str(config)],
                ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def status(self, host: str) -> dict[str, Any]:
        process = self.processes.get(host)
        if process is not None and process.poll() is not None:
            raise ExperimentError(
                f"agent {host} exited ({process.returncode}); see "
                f"{self.scratch / f'agent-{host}.log'}"
            )
        return read_status(self.state_dir(host)) or {}

    def mechanism(self) -> str:
        """What the web agent has applied: ``sniffer``, ``kernel_mirror``, ``selective_mirror``
        or ``none``."""
        appmon = (self.status(WEB).get("desired") or {}).get("appmon") or {}
        if appmon.get("kernel_mirrors"):
            return "kernel_mirror"
        if appmon.get("selective_flows"):
            return "selective_mirror"
        if any(item.get("mechanism") == "sniffer" for item in appmon.get("analyser", ())):
            return "sniffer"
        return "none"

    def actions(self) -> list[dict[str, str]]:
        """Every command the agents applied and every analyser they started or stopped, from
        their logs (``apply: ...``, ``analysers: ...``), in order per host."""
        out = []
        for host in (WEB, ANALYSIS):
            path = self.scratch / f"agent-{host}.log"
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)
                if len(parts) == 4 and parts[3].startswith(("apply: ", "analysers: ")):
                    out.append({"host": host, "time": parts[1], "action": parts[3]})
        return out

    def stop(self, timeout_s: float = 15.0) -> None:
        for host, process in self.processes.items():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        for log in self.logs.values():
            log.close()
        self.processes.clear()
        if self.analysis_ovs is not None:
            self.analysis_ovs.stop()
            self.analysis_ovs = None
