"""docs/quickstart.md, run as written: two machines from nothing to a closed loop.

The two machines are network and mount namespaces of this computer (``tests/ops/machines.py``)
named and addressed as the document names them, each with its own ``/etc``, ``/opt``, ``/var``
(overlays: nothing is written to this computer's) and this checkout at ``/opt/cosample``.
host1.example has what the quickstart expects to find: a real Open vSwitch (userspace datapath)
whose bridge ``br-int`` has two VMs (namespaces) sending each other UDP at a bounded rate. Every
command block of the document then runs in order on the machine it names, exactly as written:
``systemctl`` runs the installed units' ``ExecStart`` with their environment and credentials
(``tests/ops/unitrunner.py``), ``scp`` copies between the machines; blocks marked ``repeat
until`` run again until they succeed. Only the two installation blocks are not run (they fetch
from the network; this checkout's virtualenv stands for what they install, and the packages
they name must be installed here).

Then the loop must have closed: the plan served is signed and is the controller's real plan
(not its measurement plan); the agent runs it and OVS samples as it says; the collector
attributes the host's samples to it under that plan; the controller planned it from those
estimates; Prometheus scrapes all three daemons. docs/operations.md's recipe runs on the same
machines afterwards. Everything is stopped and removed at the end, also when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ops.docblocks import Block, command_blocks, run_block
from ops.machines import ROOT, Network, machines_available
from waiting import wait_for

from cosample.lab.netns import Lab, netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

pytestmark = [pytest.mark.root, pytest.mark.ovs, pytest.mark.slow]

QUICKSTART = ROOT / "docs" / "quickstart.md"
OPERATIONS = ROOT / "docs" / "operations.md"
MACHINES = {"controller.example": "192.0.2.10", "host1.example": "192.0.2.21"}
HOST = "host1.example"  # the OVS host, as the inventory names it
#: The blocks not run, and why: everything else in the document is.
NOT_RUN = {
    "# on controller.example: install": "fetches from the network",
    "# on host1.example: install": "fetches from the network",
}
#: Each VM sends the other this many UDP packets per second, for at most ``TRAFFIC_S``.
VM_PPS, TRAFFIC_S = 500, 1800
#: The agent polls every 30-35 s and the collector every 5 s; a plan applies 11 s after it is
#: published (the controller's lead).
CONVERGE_S = 180
SENDER = """
import socket, sys, time
rate, end = float(sys.argv[2]), time.monotonic() + float(sys.argv[3])
sock, start, sent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), time.monotonic(), 0
while time.monotonic() < end:
    sock.sendto(bytes(64), (sys.argv[1], 9))
    sent += 1
    time.sleep(max(0.0, start + sent / rate - time.monotonic()))
"""


@dataclass
class Fleet:
    network: Network
    ovs: OvsInstance
    ran: list[Block]
    skipped: list[Block]

    def __getitem__(self, name: str):
        return self.network.machines[name]

    def json(self, machine: str, command: str):
        done = self[machine].shell(command)
        assert done.returncode == 0, (command, done.stderr)
        return json.loads(done.stdout)

    def logs(self) -> str:
        return "\n".join(m.logs() for m in self.network.machines.values())


def _reasons() -> str | None:
    for reason in (machines_available(), netns_available(), ovs_available()):
        if reason:
            return reason
    for program in ("systemd-socket-activate", "curl", "promtool", "prometheus"):
        if shutil.which(program) is None:
            return f"{program} not installed"
    if not Path("/lib/systemd/system/prometheus.service").exists():
        return "Debian's prometheus package (its unit) not installed"
    return None


def _installed(package: str) -> bool:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
    )
    return done.returncode == 0 and done.stdout.endswith("installed")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = _reasons()
    if reason:
        pytest.skip(f"the quickstart's machines need root, namespaces and OVS: {reason}")
    blocks = command_blocks(QUICKSTART)
    skipped = [b for b in blocks if b.marker in NOT_RUN]
    for block in skipped:
        for line in block.script.splitlines():
            if line.startswith("apt-get install"):
                missing = [p for p in line.split()[3:] if not _installed(p)]
                if missing:
                    pytest.skip(f"{block.where()} installs {', '.join(missing)}: not here")
    tmp = tmp_path_factory.mktemp("quickstart")
    tag = f"qs{secrets.token_hex(3)}"
    ovs_dir = tmp / "ovs"
    ovs_dir.mkdir()
    network = Network(
        tmp / "machines",
        tag,
        MACHINES,
        binds={"host1.example": {"/run/openvswitch": ovs_dir}},
    )
    senders: list[subprocess.Popen] = []
    lab = Lab(prefix=f"{tag}v")
    ovs = OvsInstance(ovs_dir, dummy=False, namespace=None)
    try:
        network.__enter__()
        host1 = network.machines["host1.example"]
        ovs.namespace = host1.netns
        ovs.start()
        ovs.vsctl("add-br", "br-int", "--", "set", "Bridge", "br-int", "datapath_type=netdev")
        for k in (1, 2):
            vm = lab.namespace(str(k))
            lab.veth(f"tap{k}", namespace=vm, address=f"10.0.0.{k}/24", host_namespace=host1.netns)
            ovs.vsctl("add-port", "br-int", f"tap{k}")
        ovs.wait_for_ports("tap1", "tap2")
        for k, peer in ((1, 2), (2, 1)):
            senders.append(
                subprocess.Popen(
                    lab.exec_argv(
                        f"{tag}v{k}",
                        [
                            sys.executable,
                            "-c",
                            SENDER,
                            f"10.0.0.{peer}",
                            str(VM_PPS),
                            str(TRAFFIC_S),
                        ],
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        ran = [b for b in blocks if b.marker not in NOT_RUN]
        for block in ran:
            run_block(block, network.machines)
        yield Fleet(network, ovs, ran, skipped)
    finally:
        for sender in senders:
            if sender.poll() is None:
                os.killpg(sender.pid, signal.SIGKILL)
                sender.wait(timeout=10)
        problems = network.stop()  # the units first: the agent's ExecStop needs OVS
        ovs.stop()
        problems += lab.teardown()
        assert not problems, problems


def test_every_block_but_the_installation_ran(fleet):
    assert {b.marker for b in fleet.skipped} == set(NOT_RUN)
    assert len(fleet.ran) >= 10
    machines = {name for block in fleet.ran for name in block.machines}
    assert machines == set(MACHINES)


def test_the_units_run(fleet):
    assert set(fleet["controller.example"].pids()) == {
        "cosample-collector.service",
        "cosample-controller.service",
        "prometheus.service",
    }, fleet.logs()
    assert set(fleet["host1.example"].pids()) == {
        "cosample-agent.service",
        "cosample-agent-metrics.socket",
    }, fleet.logs()


def test_the_loop_closed(fleet):
    """The served plan is signed, is the controller's own (not the measurement plan), runs on
    the host as OVS shows, and was planned from the collector's estimates of the host's
    samples, which the collector attributes under that same plan. (The agent and the collector
    take up a new plan within their polling intervals: the checks are repeated until they
    agree, for at most ``CONVERGE_S``.)"""
    valid = fleet["host1.example"].shell(
        "/opt/cosample/.venv/bin/cosample agent validate "
        "http://controller.example:8080/plan.json --public-key /etc/cosample/plan.pub"
    )
    assert valid.returncode == 0 and ": valid" in valid.stdout, valid.stderr
    checks: dict[str, object] = {}
    try:
        wait_for(lambda: _converged(fleet, checks), timeout_s=CONVERGE_S)
    except AssertionError:
        raise AssertionError(f"not converged: {checks}\n{fleet.logs()}") from None
    # what the VMs send, counted by OVS on their ports over one collector window, against the
    # samples the collector counted meanwhile (the plan's 1-in-N of them), its estimate, and
    # what the plan was made for (from 1-in-4096 estimates, the top of their noise: up to twice)
    sampling = int(checks["ovs sflow"][0])
    window = fleet.json("controller.example", "curl -fsS http://127.0.0.1:9478/snapshot")
    sent, counted = _count_for(fleet, window["window_s"])
    print(
        f"over {window['window_s']:g} s: {sent} packets into br-int, "
        f"{counted:.0f} samples at 1-in-{sampling}"
    )
    assert 0.9 * sent / sampling <= counted <= 1.1 * sent / sampling, (sent, counted, sampling)
    truth = sent / window["window_s"]
    snapshot = fleet.json("controller.example", "curl -fsS http://127.0.0.1:9478/snapshot")
    estimate = snapshot["servers"]["packets_per_s"][snapshot["servers"]["name"].index(HOST)]
    assert 0.6 * truth < estimate < 1.4 * truth, (truth, estimate, checks)
    assert 0.5 * truth < checks["planned for"] < 4 * truth, (truth, checks)


def _count_for(fleet: Fleet, seconds: float) -> tuple[int, float]:
    """Over ``seconds``: the packets the VMs sent into br-int and the sFlow samples the collector
    counted (all of them host1's: the only agent), both read live at the same two instants:
    vswitchd's port counters (``ovs-ofctl dump-ports``; the database's ``statistics`` column
    is refreshed only every 5 s) and the collector's ``/status`` (``samples_total`` on
    ``/metrics`` moves only at each export, seconds apart under load)."""

    def counts() -> tuple[int, float]:
        ports = fleet.ovs.ofctl("--names", "dump-ports", "br-int")
        received = [int(n) for n in re.findall(r"port\s+\"?tap[12]\"?: rx pkts=(\d+)", ports)]
        assert len(received) == 2, ports
        status = fleet.json("controller.example", "curl -fsS http://127.0.0.1:9478/status")
        return sum(received), status["samples"]

    first = counts()
    time.sleep(seconds)
    last = counts()
    return last[0] - first[0], last[1] - first[1]


def _converged(fleet: Fleet, checks: dict) -> bool:
    """One look at every daemon; ``checks`` says what each showed."""
    checks.clear()
    plan = fleet.json("host1.example", "curl -fsS http://controller.example:8080/plan.json")
    version = plan["version"]
    checks["served plan"] = "measurement" if plan.get("bootstrap") else version
    status = fleet.json("host1.example", "cat /var/lib/cosample-agent/status.json")
    checks["agent"] = (status["result"], status["plan_version"])
    sflow = fleet["host1.example"].shell("ovs-vsctl get sFlow . sampling targets").stdout.split()
    checks["ovs sflow"] = sflow
    snapshot = fleet.json("controller.example", "curl -fsS http://127.0.0.1:9478/snapshot")
    servers = snapshot["servers"]
    row = servers["name"].index("host1.example") if "host1.example" in servers["name"] else None
    checks["collector plan"] = (snapshot.get("plan") or {}).get("version")
    checks["collector samples"] = servers["local_samples"][row] if row is not None else 0
    checks["collector estimate"] = servers["packets_per_s"][row] if row is not None else 0
    state = fleet.json("controller.example", "cat /var/lib/cosample-controller/status.json")
    checks["controller"] = (state["plan_version"], state["plan_kind"], state["collectors_up"])
    report = fleet.json(
        "controller.example", "cat /var/lib/cosample-controller/current-report.json"
    )
    checks["planned for"] = report["own_pps"][report["names"].index("host1.example")]
    return (
        not plan.get("bootstrap")
        and checks["agent"] == ("ok", version)
        and sflow == [str(plan["hosts"]["host1.example"]["sflow_sampling"]), '["192.0.2.10:6343"]']
        and checks["collector plan"] == version
        and checks["collector samples"] > 0
        and checks["controller"] == (version, "planned", 1)
        and report["version"] == version
    )


def test_prometheus_scrapes_every_daemon(fleet):
    done = fleet["controller.example"].shell(
        "promtool query instant http://localhost:9090 'cosample_collector_samples_total'"
    )
    assert done.returncode == 0 and "=>" in done.stdout, done.stderr
    assert float(done.stdout.split("=>")[1].split()[0]) > 0


def test_operations_recipe_on_the_same_fleet(fleet):
    """docs/operations.md's blocks (checks, the key rotation, the backup) on the running fleet:
    afterwards the plan served verifies with the new key alone, and the loop is still closed."""
    blocks = command_blocks(OPERATIONS)
    assert len(blocks) >= 5
    for block in blocks:
        run_block(block, fleet.network.machines)
    valid = fleet["host1.example"].shell(
        "/opt/cosample/.venv/bin/cosample agent validate "
        "http://controller.example:8080/plan.json --public-key /etc/cosample/plan-2.pub"
    )
    assert valid.returncode == 0, valid.stdout + valid.stderr
    listing = fleet["controller.example"].shell("tar -tf /backup/cosample-controller-*.tar")
    assert listing.stdout.split() == ["current-plan.json", "current-report.json", "state.json"]
    checks: dict[str, object] = {}
    try:
        wait_for(lambda: _converged(fleet, checks), timeout_s=CONVERGE_S)
    except AssertionError:
        raise AssertionError(f"not converged after the recipe: {checks}\n{fleet.logs()}") from None
