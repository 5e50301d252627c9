"""The fleet and the Prometheus server of the operations tests, started once per session and
stopped by PID at the end (tests/ops/fleet.py)."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from ops.fleet import (
    Daemon,
    Sender,
    cosample,
    free_port,
    get,
    inventory_document,
    reachable,
    write_json,
)
from ops.promtool import DEPLOY, RULES, need
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from cosample.collector.polling import plan_lead_s
from cosample.lab.ovs import OvsInstance, ovs_available

PLAN_INTERVAL_S, PLAN_TIMEOUT_S = 0.2, 0.5


@dataclass
class Fleet:
    agent_url: str
    collector_url: str
    controller_url: str
    daemons: dict[str, Daemon]
    sender: Sender
    #: the agent's metrics through deploy/systemd/cosample-agent-metrics.*, as deployed
    #: (HOST:PORT), or None where systemd's socket tools are missing
    agent_proxy: str | None = None
    waiting_for: list[str] = field(default_factory=list)

    def agent_target(self) -> str:
        """Where Prometheus scrapes the agent: through the proxy when there is one."""
        return self.agent_proxy or self.agent_url.split("//", 1)[1]

    def metrics_urls(self) -> dict[str, str]:
        return {
            "agent": self.agent_url + "/metrics",
            "collector": self.collector_url + "/metrics",
            "controller": self.controller_url + "/metrics",
        }

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{d.log()}" for name, d in self.daemons.items())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Controller, collector and agent running, the controller's real plan (not the measurement
    plan) published, the agent converged on it, the collector estimating every server.

    Per module, not per session: its agent owns every tagged device in the root namespace, so it
    must be gone before another directory's real-OVS agent tests (tests/plan/test_source.py) build
    theirs."""
    reason = ovs_available()
    if reason:
        pytest.skip(f"the agent needs OVS (dummy datapath): {reason}")
    from cosample.plan.signing import generate_keypair

    tmp = tmp_path_factory.mktemp("fleet")
    generate_keypair(tmp / "plan.pem", tmp / "plan.pub")
    generate_keypair(tmp / "snapshot.pem", tmp / "snapshot.pub")
    sflow_port, collector_port = free_port(socket.SOCK_DGRAM), free_port()
    controller_port, agent_port = free_port(), free_port()
    collector_url = f"http://127.0.0.1:{collector_port}"
    controller_url = f"http://127.0.0.1:{controller_port}"
    plan_url = f"{controller_url}/plan.json"
    inventory = write_json(tmp / "inventory.json", inventory_document(f"127.0.0.1:{sflow_port}"))
    daemons: dict[str, Daemon] = {}
    sender = Sender(plan_url, ("127.0.0.1", sflow_port))
    with OvsInstance(tmp / "ovs", dummy=True) as ovs:
        ovs.vsctl("add-br", "br2", "--", "set", "Bridge", "br2", "datapath_type=dummy")
        ovs.vsctl("add-port", "br2", "vm2a")
        (tmp / "agent.toml").write_text(
            f'host = "s2"\nplan = "{plan_url}"\novsdb = "{ovs.remote}"\n'
            f'ovs_rundir = "{ovs.directory}"\nstate_dir = "{tmp / "agent"}"\n'
            f'public_key = "{tmp / "plan.pub"}"\ninterval_s = 1\njitter_s = 0\ntimeout_s = 3\n'
            f'sflow_agent = "127.0.0.1"\ncollector = "127.0.0.1:{sflow_port}"\n'
            f"metrics_port = {agent_port}\n"
        )
        try:
            daemons["controller"] = Daemon(
                "controller",
                cosample(
                    "controller",
                    "run",
                    "--inventory",
                    str(inventory),
                    "--collector",
                    f"c1={collector_url}",
                    "--serve",
                    f"127.0.0.1:{controller_port}",
                    "--key",
                    str(tmp / "plan.pem"),
                    "--collector-key",
                    str(tmp / "snapshot.pub"),
                    "--state-dir",
                    str(tmp / "controller"),
                    "--interval",
                    "1s",
                    "--tau",
                    "1s",
                    "--hold",
                    "1s",
                    "--confirm",
                    "1",
                    "--settle",
                    "2s",
                    "--measure-sampling",
                    "8",
                    "--measure-after",
                    "0s",
                    "--lead",
                    f"{plan_lead_s(PLAN_INTERVAL_S, PLAN_TIMEOUT_S)}s",
                    "--timeout",
                    "2s",
                ),
                tmp,
            )
            daemons["collector"] = Daemon(
                "collector",
                cosample(
                    "collector",
                    "run",
                    "--plan",
                    plan_url,
                    "--public-key",
                    str(tmp / "plan.pub"),
                    "--listen",
                    f"127.0.0.1:{sflow_port}",
                    "--metrics-port",
                    str(collector_port),
                    "--state-dir",
                    str(tmp / "collector"),
                    "--snapshot-key",
                    str(tmp / "snapshot.pem"),
                    "--name",
                    "c1",
                    "--window",
                    "10",
                    "--export-interval",
                    "0.5",
                    "--plan-interval",
                    str(PLAN_INTERVAL_S),
                    "--plan-timeout",
                    str(PLAN_TIMEOUT_S),
                ),
                tmp,
            )
            daemons["agent"] = Daemon(
                "agent", cosample("agent", "run", "--config", str(tmp / "agent.toml")), tmp
            )
            proxy = proxy_argv(agent_port)
            if proxy:
                daemons["agent-metrics-proxy"] = Daemon("agent-metrics-proxy", proxy, tmp)
            sender.start()
            running = Fleet(
                f"http://127.0.0.1:{agent_port}",
                collector_url,
                controller_url,
                daemons,
                sender,
                proxy[1].split("=", 1)[1] if proxy else None,
            )
            try:
                wait_for(lambda: _settled(running), timeout_s=90)
            except AssertionError:
                raise AssertionError(
                    f"the fleet did not settle: waiting for {running.waiting_for}\n{running.logs()}"
                ) from None
            yield running
        finally:
            sender.stop()
            for daemon in daemons.values():
                daemon.stop()


def proxy_argv(agent_port: int) -> list[str] | None:
    """The shipped metrics proxy's ExecStart, socket-activated by ``systemd-socket-activate`` on
    a free port as systemd would on 9479, forwarding to the agent's port (None: tools missing)."""
    unit = (DEPLOY / "systemd" / "cosample-agent-metrics.service").read_text()
    exec_start = next(
        line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")
    )
    argv = exec_start.replace("127.0.0.1:9477", f"127.0.0.1:{agent_port}").split()
    if shutil.which("systemd-socket-activate") is None or not Path(argv[0]).exists():
        return None
    return ["systemd-socket-activate", f"--listen=127.0.0.1:{free_port()}", *argv]


def _settled(fleet: Fleet) -> bool:
    """The real plan published (it has a predicted capacity use), the agent converged on it and
    the collector estimating every server under it."""
    if not all(d.alive() for d in fleet.daemons.values()):
        raise AssertionError("a daemon died\n" + fleet.logs())
    if not all(map(reachable, fleet.metrics_urls().values())):
        return False
    status = json.loads(get(fleet.controller_url + "/status"))
    agent = {
        sample.name: sample.value
        for family in text_string_to_metric_families(get(fleet.agent_url + "/metrics").decode())
        for sample in family.samples
    }
    snapshot = json.loads(get(fleet.collector_url + "/snapshot"))
    version = status.get("plan_version")
    checks = {
        "controller predicts": status.get("predicted_max_use") is not None,
        "agent runs the plan": agent["cosample_agent_plan_version"] == version,
        "agent converged": agent["cosample_agent_last_apply_success"] == 1,
        "collector has the plan": (snapshot.get("plan") or {}).get("version") == version,
        "every server estimated": all(p > 0 for p in snapshot["servers"]["packets_per_s"]),
    }
    fleet.waiting_for = [name for name, ok in checks.items() if not ok]
    return version is not None and not fleet.waiting_for


@dataclass
class PrometheusServer:
    url: str
    daemon: Daemon

    def api(self, path: str, **params: str) -> dict:
        query = urllib.parse.urlencode(params)
        return json.loads(get(f"{self.url}/api/v1/{path}?{query}", timeout_s=10))

    def query(self, expr: str) -> list[dict]:
        answer = self.api("query", query=expr)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]


@pytest.fixture(scope="module")
def prometheus(fleet, tmp_path_factory):
    """A real Prometheus (Debian's) with deploy/prometheus/prometheus.yml, its targets the fleet
    on loopback, a 1-s scrape and rule interval, its storage in tmp; stopped by PID."""
    binary = need("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    targets = {
        "cosample-agent": fleet.agent_target(),
        "cosample-collector": fleet.collector_url.split("//", 1)[1],
        "cosample-controller": fleet.controller_url.split("//", 1)[1],
    }
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    daemon = Daemon(
        "prometheus",
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        tmp,
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}", daemon)
    try:
        wait_for(lambda: not daemon.alive() or reachable(server.url + "/-/ready"), timeout_s=60)
        assert daemon.alive(), daemon.log()
        wait_for(lambda: len(server.query('up{job=~"cosample-.*"} == 1')) == 3, timeout_s=30)
        yield server
    finally:
        daemon.stop()
