"""The shipped systemd units: ``systemd-analyze verify`` clean, exposure bounded, and the agent's
one capability (CAP_NET_ADMIN) shown to be enough, and needed, on a real OVS with real links.

systemd is not PID 1 on the machines the tests run on, so the units are checked statically; the
agent's capability bound is checked for real by running the agent under ``setpriv`` with the
same bounding set the unit gives it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from plan_documents import plan_bytes, plan_document

from cosample.lab.netns import Lab, netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/cosample/.venv/bin/cosample"
#: ``systemd-analyze security --offline`` exposure (0-10) no unit may exceed: measured 0.9-2.0.
EXPOSURE_LIMIT = 2.5


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed (Debian package systemd)")
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True, timeout=60)


def installed_copy(directory: Path, names: list[str] | None = None) -> list[Path]:
    """The units as installed, with this checkout's ``cosample`` where /opt/cosample's would be
    (verify checks that every ExecStart= program exists)."""
    cosample = Path(sys.executable).with_name("cosample")
    copies = []
    for unit in sorted(UNITS.iterdir()):
        if names is None or unit.name in names:
            copy = directory / unit.name
            copy.write_text(unit.read_text().replace(INSTALLED, str(cosample)))
            copies.append(copy)
    return copies


def test_every_daemon_has_a_unit():
    names = {unit.name for unit in UNITS.iterdir()}
    assert {
        "cosample-agent.service",
        "cosample-collector.service",
        "cosample-controller.service",
    } <= names


def test_units_verify_clean(tmp_path):
    copies = installed_copy(tmp_path)
    result = analyze("verify", *map(str, copies))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stderr


def test_verify_reports_a_misspelt_hardening_option(tmp_path):
    """What makes the check above worth running: a typo only warns (exit 0), so any output fails."""
    unit = installed_copy(tmp_path, ["cosample-collector.service"])[0]
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystm=strict"))
    result = analyze("verify", str(unit))
    assert "Unknown key 'ProtectSystm'" in result.stderr


@pytest.mark.parametrize(
    "name",
    [
        "cosample-agent.service",
        "cosample-collector.service",
        "cosample-controller.service",
        "cosample-agent-metrics.service",
    ],
)
def test_exposure_is_bounded(tmp_path, name):
    unit = installed_copy(tmp_path, [name])[0]
    result = analyze("security", "--offline=true", str(unit))
    if "--offline" in result.stderr and "unrecognized" in result.stderr:
        pytest.skip("systemd-analyze security --offline needs systemd >= 250")
    line = result.stdout.strip().splitlines()[-1]
    exposure = float(line.split("Overall exposure level for", 1)[1].split(":", 1)[1].split()[0])
    assert exposure <= EXPOSURE_LIMIT, line


def test_only_the_agent_keeps_root():
    for name in ("cosample-collector.service", "cosample-controller.service"):
        text = (UNITS / name).read_text()
        assert "DynamicUser=yes" in text and "\nCapabilityBoundingSet=\n" in text
    assert (
        "\nCapabilityBoundingSet=CAP_NET_ADMIN\n" in (UNITS / "cosample-agent.service").read_text()
    )


# the agent under the unit's capability bounding set -------------------------------------------


@pytest.fixture
def sender_host(tmp_path):
    """A network namespace of its own (the agent owns every tagged VXLAN device it sees, so it
    must not see those of agents' tests running beside it) with two veth VM ports, and a private
    dummy-datapath OVS with a bridge holding ports of the same names; names unique to this run."""
    reason = ovs_available() or netns_available()
    if reason:
        pytest.skip(f"the agent's mirrors need real links and OVS: {reason}")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not installed (Debian package util-linux)")
    tag = secrets.token_hex(2)
    bridge, ports, prefix = f"opbr{tag}", (f"opV{tag}a", f"opV{tag}b"), f"o{tag}"
    with Lab.unique("op") as lab:
        namespace = lab.namespace("h")
        for k, name in enumerate(ports):
            lab.veth(
                name,
                namespace=namespace,
                peer=f"{name}p",
                host_namespace=namespace,
                address=f"10.0.0.{1 + 10 * k}/24",
            )
        with OvsInstance(tmp_path / "ovs", dummy=True) as ovs:
            ovs.vsctl("add-br", bridge, "--", "set", "Bridge", bridge, "datapath_type=dummy")
            for name in ports:
                ovs.vsctl("add-port", bridge, name)
            yield ovs, bridge, ports, prefix, lab.exec_argv(namespace, [])


def _run_agent_bounded(tmp_path, sender_host, capabilities: str) -> dict:
    ovs, bridge, ports, prefix, in_namespace = sender_host
    created = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=1)
    plan = tmp_path / "plan.json"
    plan.write_bytes(
        plan_bytes(plan_document(created=created, bridge=bridge, vm_ports=list(ports)))
    )
    state = tmp_path / f"state-{capabilities.replace(',', '_').replace('+', '')}"
    config = tmp_path / "agent.toml"
    config.write_text(
        f'host = "s1"\nplan = "{plan}"\novsdb = "{ovs.remote}"\nbridge = "{bridge}"\n'
        f'ovs_rundir = "{ovs.directory}"\nstate_dir = "{state}"\n'
        f'mirror_device_prefix = "{prefix}"\ntunnel_port_prefix = "q{prefix[1:]}"\n'
        f"timeout_s = 5\njitter_s = 0\ninsecure_unsigned = true\n"
    )
    argv = [
        *in_namespace,
        "setpriv",
        f"--bounding-set={capabilities}",
        "--inh-caps=-all",
        "--no-new-privs",
        "--",
        sys.executable,
        "-m",
        "cosample",
        "agent",
        "run",
        "--cycles",
        "1",
        "--config",
        str(config),
    ]
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert (state / "status.json").exists(), ran.stderr[-3000:]
    status = json.loads((state / "status.json").read_text())
    subprocess.run(
        [
            *in_namespace,
            sys.executable,
            "-m",
            "cosample",
            "agent",
            "remove",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return status


def test_agent_converges_with_cap_net_admin_alone(tmp_path, sender_host):
    """The unit's bound: uid 0 with only CAP_NET_ADMIN, no new privileges."""
    status = _run_agent_bounded(tmp_path, sender_host, "-all,+net_admin")
    assert status["result"] == "ok", (status["errors"], status["problems"], status["remaining"])
    assert set(status["desired"]["mirrors"]) == {"s2", "s3"}


def test_agent_without_cap_net_admin_cannot_mirror(tmp_path, sender_host):
    """And the capability is needed: without it the kernel refuses the mirror devices."""
    status = _run_agent_bounded(tmp_path, sender_host, "-all")
    assert status["result"] != "ok", status
    assert any(
        "Operation not permitted" in line
        for line in status["errors"] + status["problems"] + status["remaining"]
    ), status
