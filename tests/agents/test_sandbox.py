"""The agent against a real ovsdb-server + ``ovs-vswitchd --enable-dummy`` and real ip/tc.

VM ports are veth pairs in the root namespace (``agentsandbox.VM_PORTS``), so tc filters and VXLAN
devices are real; that part needs root and is skipped otherwise. Nothing here sends packets:
test_dataplane does.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from agentsandbox import (
    BRIDGE,
    DEVICE_PREFIX,
    VM_PORTS,
    _our_vxlan_devices,
    agent,
    fingerprint,
    receiver_plan,
)

from cosample.agents.desired import desired_state
from cosample.agents.host import LinuxOvsHost
from cosample.agents.reconcile import reconcile
from cosample.cli import main
from cosample.dataplane.run import run
from cosample.plan.document import plan_from_dict

pytestmark = pytest.mark.ovs
across_epochs = pytest.mark.parametrize(
    "epoch", [timedelta(0), timedelta(days=365)], ids=["today", "a-year-ahead"], indirect=True
)


@pytest.fixture
def epoch(request) -> timedelta:
    """How far the agent's clock runs ahead of the real one (0 unless a test says otherwise)."""
    return getattr(request, "param", timedelta(0))


@pytest.fixture
def clock(epoch):
    return lambda: datetime.now(timezone.utc) + epoch


@pytest.fixture
def now(clock):
    """Plans in this module are created relative to the agent's clock, not the real one."""
    return clock().replace(microsecond=0)


@across_epochs
def test_converges_to_the_plan_as_seen_by_the_tools_themselves(sandbox, clock, make_plan):
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    report = agent(config, clock).cycle()
    assert report.result == "ok", report
    sflow = json.loads(
        ovs.vsctl("--format=json", "--columns=sampling,targets,external_ids", "list", "sFlow")
    )["data"]
    assert sflow == [[10, "127.0.0.1:6343", ["map", [["cosample-owner", "agent"]]]]]
    filters = json.loads(run(["tc", "-j", "filter", "show", "dev", VM_PORTS[0], "ingress"]).stdout)
    mirred = [f["options"]["actions"][0]["to_dev"] for f in filters if "options" in f]
    assert len(mirred) == 2 and all(name.startswith(f"{DEVICE_PREFIX}-") for name in mirred)
    devices = json.loads(run(["ip", "-j", "-d", "link", "show", mirred[0]]).stdout)[0]
    assert devices["linkinfo"]["info_data"]["remote"] == "10.0.0.2"
    assert devices["ifalias"].startswith("cosample-owner=agent")


@across_epochs
def test_second_run_writes_nothing(sandbox, clock, make_plan):
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    agent(config, clock).cycle()
    uuid = ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip()
    again = agent(config, clock)
    report = again.cycle()
    assert report.result == "ok" and report.commands == () and again.host.writes == 0
    assert ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip() == uuid


@across_epochs
def test_a_b_a_equals_fresh_a(sandbox, clock, make_plan):
    _, config, _, write_plan = sandbox
    write_plan(make_plan(version=1))
    a = agent(config, clock)
    a.cycle()
    fresh = fingerprint(a)
    write_plan(receiver_plan(make_plan, 2))
    assert a.cycle().result == "ok"
    assert fingerprint(a) != fresh
    write_plan(make_plan(version=3))
    assert a.cycle().result == "ok"
    assert fingerprint(a) == fresh


def test_killed_at_a_random_step_then_converges_without_orphans(sandbox, make_plan, tmp_path):
    """SIGKILL the agent right after its k-th command (k random), then let the next run repair."""
    _, config, _, write_plan = sandbox
    rng = random.Random(2026)
    write_plan(receiver_plan(make_plan, 1))
    reference = agent(config)
    reference.cycle()
    expected_b = fingerprint(reference)
    full = len(
        reconcile(
            desired_state(plan_from_dict(make_plan()), reference.config),
            reference.host.observe(BRIDGE, VM_PORTS),
        )
    )
    assert full >= 8
    for trial in range(3):
        version = 10 + 2 * trial
        write_plan(make_plan(version=version))  # s1 turns sender: many commands to die among
        steps = rng.randint(1, full - 2)
        process = subprocess.Popen(
            [sys.executable, "-m", "cosample", "agent", "apply", "--once", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(steps):
            assert process.stdout.readline()  # one line per applied command
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        process.stdout.close()
        half_done = agent(config)
        assert reconcile(
            desired_state(plan_from_dict(make_plan()), half_done.config),
            half_done.host.observe(BRIDGE, VM_PORTS),
        )  # really killed half-way
        write_plan(receiver_plan(make_plan, version + 1))
        assert half_done.cycle().result == "ok"
        assert fingerprint(half_done) == expected_b


@across_epochs
def test_survives_ovsdb_and_vswitchd_restarts(sandbox, clock, make_plan):
    ovs, config, _, write_plan = sandbox
    write_plan(receiver_plan(make_plan, 1))
    a = agent(config, clock)
    a.cycle()
    expected = fingerprint(a)
    ovs.stop_ovsdb()
    report = a.cycle()
    assert report.result == "error" and "ovsdb-server" in report.errors[-1]
    ovs.start_ovsdb()
    assert a.cycle().result == "ok" and fingerprint(a) == expected
    ovs.stop_vswitchd()
    ovs.start_vswitchd()
    report = a.cycle()  # the drop flow was lost with ovs-vswitchd and is put back
    assert report.result == "ok" and any("actions=drop" in line for line in report.commands)
    assert fingerprint(a) == expected


@across_epochs
def test_bad_plans_are_rejected_before_any_write(sandbox, clock, make_plan, to_bytes, tmp_path):
    ovs, config, plan_path, write_plan = sandbox
    write_plan(make_plan(version=1))
    agent(config, clock).cycle()
    before = ovs.vsctl("show"), run(["tc", "filter", "show", "dev", VM_PORTS[0], "ingress"]).stdout

    def rate_too_high(doc):
        doc["hosts"]["s1"]["mirrors"][0]["rate"] = 1.5

    def unmatched_pair(doc):
        doc["hosts"]["s2"]["receives"] = []

    def no_tunnel_ip(doc):
        del doc["hosts"]["s3"]["tunnel_ip"]

    def host_missing(doc):
        del doc["hosts"]["s1"]

    def expired(doc):
        doc["created"], doc["expires"] = "2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"

    for mutate in (rate_too_high, unmatched_pair, no_tunnel_ip, host_missing, expired):
        doc = make_plan(version=5)
        mutate(doc)
        write_plan(doc)
        a = agent(config, clock)
        report = a.cycle()
        assert report.plan_version == 1 and report.errors, mutate.__name__
        assert a.host.writes == 0, mutate.__name__
    plan_path.write_bytes(b"{ not json")
    a = agent(config, clock)
    assert "not valid UTF-8 JSON" in a.cycle().errors[0] and a.host.writes == 0
    after = ovs.vsctl("show"), run(["tc", "filter", "show", "dev", VM_PORTS[0], "ingress"]).stdout
    assert after == before


@across_epochs
def test_missing_bridge_is_reported_never_created(sandbox, clock, make_plan):
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    a = agent(config, clock, bridge="canobr")
    report = a.cycle()
    assert report.result == "degraded" and "canobr does not exist" in report.problems[0]
    assert "canobr" not in ovs.vsctl("list-br").split() and a.host.writes == 0


@across_epochs
def test_foreign_objects_are_left_alone_and_remove_takes_only_ours(sandbox, clock, make_plan):
    ovs, config, _, write_plan = sandbox
    ovs.vsctl(
        "--",
        "--id=@s",
        "create",
        "sFlow",
        'targets="192.0.2.1:6343"',
        "sampling=7",
        "--",
        "set",
        "Bridge",
        BRIDGE,
        "sflow=@s",
    )
    ovs.vsctl(
        "add-port",
        BRIDGE,
        "cafore",
        "--",
        "set",
        "Interface",
        "cafore",
        "type=vxlan",
        "options:remote_ip=192.0.2.7",
    )
    ovs.ofctl("add-flow", f"unix:{ovs.directory}/{BRIDGE}.mgmt", "priority=5,actions=NORMAL")
    write_plan(receiver_plan(make_plan, 1))
    report = agent(config, clock).cycle()
    assert report.result == "degraded" and "foreign sFlow" in report.problems[0]
    assert (
        ovs.vsctl(
            "get", "sFlow", ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip(), "sampling"
        ).strip()
        == "7"
    )
    assert main(["agent", "remove", "--config", str(config)]) == 1  # degraded: foreign sFlow
    assert "cafore" in ovs.vsctl("list-ports", BRIDGE).split()
    assert not any(p.startswith("car-") for p in ovs.vsctl("list-ports", BRIDGE).split())
    flows = ovs.ofctl("dump-flows", f"unix:{ovs.directory}/{BRIDGE}.mgmt")
    assert "priority=5" in flows and "0xc05a" not in flows


def test_cli_paths_against_real_ovs(sandbox, make_plan, capsys):
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    assert main(["agent", "apply", "--dry-run", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "create sFlow on cabr1: 1-in-10" in out and "would run" in out
    assert ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip() == "[]"
    assert main(["agent", "run", "--cycles", "1", "--config", str(config)]) == 0
    assert main(["agent", "status", "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out)["plan_version"] == 100
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 0
    assert "0 command(s) applied" in capsys.readouterr().out
    assert main(["agent", "remove", "--config", str(config)]) == 0
    assert ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip() == "[]"
    assert _our_vxlan_devices() == []
    assert run(["tc", "qdisc", "show", "dev", VM_PORTS[0]]).stdout.count("clsact") == 0


@across_epochs
def test_real_host_matches_the_fake_on_the_same_plan(sandbox, clock, make_plan):
    """The fake used by the unit tests says what the real host says, command for command."""
    from cosample.agents.fakehost import FakeHost

    _, config, _, write_plan = sandbox
    write_plan(make_plan())
    real = agent(config, clock)
    desired = desired_state(plan_from_dict(make_plan()), real.config)
    fake = FakeHost(bridge=BRIDGE, vm_ports=VM_PORTS)
    fake.ports[BRIDGE] = fake.ports.pop(VM_PORTS[0]).__class__(BRIDGE, "internal", 65534, False)
    fake.ports.update(
        {
            n: fake.ports.get(n) or type(fake.ports[BRIDGE])(n, "", i + 1, False)
            for i, n in enumerate(VM_PORTS)
        }
    )
    real_commands = reconcile(desired, real.host.observe(BRIDGE, VM_PORTS))
    fake_commands = reconcile(desired, fake.observe(BRIDGE, VM_PORTS))
    assert real_commands == fake_commands
    for command in real_commands:
        real.host.apply(command)
        fake.apply(command)
    assert reconcile(desired, real.host.observe(BRIDGE, VM_PORTS)) == []
    assert reconcile(desired, fake.observe(BRIDGE, VM_PORTS)) == []


def test_linux_host_class_is_the_default(sandbox):
    _, config, _, _ = sandbox
    assert isinstance(agent(config).host, LinuxOvsHost)


def test_daemon_cycles_on_schedule_and_stops_on_sigterm(sandbox, make_plan, tmp_path):
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    status = tmp_path / "state" / "status.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "agent",
            "run",
            "--config",
            str(config),
            "--interval",
            "200ms",
            "--jitter",
            "100ms",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert json.loads(status.read_text())["result"] == "ok"
        first = status.stat().st_mtime_ns
        while status.stat().st_mtime_ns == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.stat().st_mtime_ns != first  # a later cycle rewrote the status
        write_plan(make_plan(version=101, sampling=20))
        while (
            time.monotonic() < deadline
            and json.loads(status.read_text()).get("plan_version") != 101
        ):
            time.sleep(0.1)
        assert (
            ovs.vsctl(
                "get", "sFlow", ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip(), "sampling"
            ).strip()
            == "20"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0, process.stderr.read()[-2000:]


@across_epochs
def test_filters_on_a_former_vm_port_are_found_and_removed(sandbox, clock, make_plan):
    """A port that left the bridge keeps no mirror: the clsact ledger leads the agent to it."""
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    assert agent(config, clock).cycle().result == "ok"
    ovs.vsctl("del-port", BRIDGE, VM_PORTS[1])  # no longer a VM port of the bridge
    report = agent(config, clock).cycle()
    assert f"remove filter {VM_PORTS[1]} ingress prio 49152" in report.commands
    assert f"remove clsact qdisc from {VM_PORTS[1]}" in report.commands
    assert "clsact" not in run(["tc", "qdisc", "show", "dev", VM_PORTS[1]]).stdout
