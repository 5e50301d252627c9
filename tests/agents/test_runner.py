"""The agent loop against the in-memory host: plan files on disk, a controllable clock."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cosample.agents.fakehost import FakeHost
from cosample.agents.report import read_status
from cosample.agents.runner import LAST_GOOD_FILE, Agent
from cosample.plan.signing import generate_keypair, sign_file


class Clock:
    def __init__(self, start):
        self.now = start

    def __call__(self):
        return self.now


@pytest.fixture
def setup(tmp_path, config_for, now):
    plan_path = tmp_path / "plan.json"

    def make(**overrides):
        config = config_for("s1", plan=str(plan_path), **overrides)
        return Agent(config, FakeHost(), clock=clock), config

    clock = Clock(now)
    return plan_path, make, clock


def test_cycle_applies_reports_and_remembers(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, config = make()
    report = agent.cycle()
    assert report.result == "ok" and report.plan_version == 100 and report.commands
    assert agent.host.sflow.settings.sampling == 10
    status = read_status(config.state_dir)
    assert status["result"] == "ok" and status["desired"]["mirrors"] == {"s2": 0.2, "s3": 0.3}
    metrics = (agent.state_dir / "metrics.prom").read_text()
    assert "cosample_agent_plan_version 100.0" in metrics
    assert 'cosample_agent_mirror_ratio{target="s3"} 0.3' in metrics
    assert "cosample_agent_sflow_sampling_n 10.0" in metrics
    expires = datetime.fromisoformat(make_plan()["expires"]).timestamp()
    assert expires == next(
        sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "cosample_agent_plan_expires_timestamp_seconds"
    )
    assert json.loads((agent.state_dir / LAST_GOOD_FILE).read_text())["version"] == 100
    writes = agent.host.writes
    remembered = (agent.state_dir / LAST_GOOD_FILE).stat().st_mtime_ns
    assert agent.cycle().commands == () and agent.host.writes == writes
    assert (agent.state_dir / LAST_GOOD_FILE).stat().st_mtime_ns == remembered


def test_bad_plan_keeps_the_last_good_one(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make()
    agent.cycle()
    bad = make_plan(version=101)
    bad["hosts"]["s1"]["local_rate"] = 7
    plan_path.write_bytes(to_bytes(bad))
    writes = agent.host.writes
    report = agent.cycle()
    assert report.plan_version == 100 and "hosts.s1.local_rate" in report.errors[0]
    assert agent.host.writes == writes
    assert 'cosample_agent_errors_total{kind="plan"} 1.0' in agent.metrics.text().decode()


def test_rollback_refused_even_after_restart(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan(version=100)))
    make()[0].cycle()
    plan_path.write_bytes(to_bytes(make_plan(version=99, sampling=20)))
    agent, _ = make()  # a restarted agent: new process, same state dir
    report = agent.cycle()
    assert report.plan_version == 100 and "rollback" in report.errors[0]
    assert agent.host.sflow.settings.sampling == 10


def test_expiry_falls_back_to_safe_state(setup, make_plan, to_bytes):
    plan_path, make, clock = setup
    plan_path.write_bytes(to_bytes(make_plan(hours=1)))
    agent, config = make()
    agent.cycle()
    assert agent.host.devices
    clock.now += timedelta(hours=2)
    report = agent.cycle()
    assert report.mode == "safe" and report.plan_version is None
    assert agent.host.sflow.settings.sampling == config.safe_sampling
    assert agent.host.devices == {} and not any(p.owned for p in agent.host.ports.values())
    assert "cosample_agent_safe_state 1.0" in agent.metrics.text().decode()


def test_unreachable_plan_keeps_running_plan(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make()
    agent.cycle()
    plan_path.unlink()
    report = agent.cycle()
    assert report.plan_version == 100 and "not found" in report.errors[0]


def test_signature_required_when_a_key_is_configured(setup, tmp_path, make_plan, to_bytes):
    plan_path, make, _ = setup
    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make(public_key=str(tmp_path / "k.pub"))
    report = agent.cycle()
    assert report.mode == "safe" and "missing" in report.errors[0]
    sign_file(plan_path, tmp_path / "k")
    assert agent.cycle().plan_version == 100
    plan_path.write_bytes(to_bytes(make_plan(version=101, sampling=20)))  # stale signature
    report = agent.cycle()
    assert report.plan_version == 100 and "does not verify" in report.errors[0]


def test_dry_run_changes_and_writes_nothing(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, config = make()
    report = agent.cycle(dry_run=True)
    assert report.result == "dry-run" and any("sFlow" in line for line in report.commands)
    assert agent.host.writes == 0 and read_status(config.state_dir) is None
    assert not (agent.state_dir / LAST_GOOD_FILE).exists()


def test_two_phase_plan_set_applies_phase_two_after_not_before(setup, make_plan, now):
    plan_path, make, clock = setup
    phase2 = make_plan(version=201, sampling=5, local_rate=0.2)
    phase2["not_before"] = (now + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plan_path.write_text(
        json.dumps(
            {
                "format": "cosample.planset",
                "format_version": 1,
                "plans": [make_plan(version=200), phase2],
            }
        )
    )
    agent, _ = make()
    report = agent.cycle()
    assert report.plan_version == 200 and report.pending_version == 201
    clock.now += timedelta(minutes=3)
    assert agent.cycle().plan_version == 201 and agent.host.sflow.settings.sampling == 5


def test_first_plan_not_yet_due_keeps_the_safe_state(setup, make_plan, to_bytes, now):
    """A fresh host whose only plan waits for its not_before (the controller's lead): the safe
    state, the plan reported as pending, a status and metrics written (the cycle used to fail
    with an IndexError here, leaving neither)."""
    plan_path, make, clock = setup
    document = make_plan(version=300)
    document["not_before"] = (now + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plan_path.write_bytes(to_bytes(document))
    agent, config = make()
    report = agent.cycle()
    assert report.mode == "safe" and report.plan_version is None and report.pending_version == 300
    assert read_status(config.state_dir)["pending_version"] == 300
    clock.now += timedelta(seconds=6)
    assert agent.cycle().plan_version == 300


def test_remove_leaves_nothing_owned(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make()
    agent.cycle()
    report = agent.remove()
    assert report.result == "ok"
    host = agent.host
    assert host.sflow is None and host.devices == {} and host.flows == {}
    assert all(not link.filters and not link.clsact for link in host.links.values())


def test_missing_bridge_is_reported_not_created(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make()
    agent.host.bridge_exists = False
    report = agent.cycle()
    assert report.result == "degraded" and "does not exist" in report.problems[0]
    assert agent.host.writes == 0


def test_run_loop_survives_a_failing_host_and_stops(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make(interval_s=0.01)
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("a bug")

    agent.host.observe = broken
    agent.run(threading.Event(), max_cycles=3)
    assert len(calls) == 3
    assert 'cosample_agent_errors_total{kind="internal"} 3.0' in agent.metrics.text().decode()


def test_plan_failing_on_the_host_is_rolled_back_and_not_retried(setup, make_plan, to_bytes):
    """The fake twin of test_hardening's kernel refusal: last good means applied and verified."""
    from cosample.agents import commands as c

    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan(version=100, sender_mirrors=())))
    agent, _ = make()
    assert agent.cycle().result == "ok"
    before = (agent.host.sflow, dict(agent.host.devices), dict(agent.host.flows))
    remembered = (agent.state_dir / LAST_GOOD_FILE).read_bytes()
    plan_path.write_bytes(to_bytes(make_plan(version=101, sampling=20)))
    agent.host.fail_on = {c.AddMirrorDevice}
    report = agent.cycle()
    assert report.result == "rejected" and report.plan_version == 100
    assert "plan version 101 failed on this host" in report.errors[-1]
    assert (agent.host.sflow, dict(agent.host.devices), dict(agent.host.flows)) == before
    assert (agent.state_dir / LAST_GOOD_FILE).read_bytes() == remembered
    writes = agent.host.writes
    report = agent.cycle()
    assert report.result == "rejected" and agent.host.writes == writes
    agent.host.fail_on = set()
    plan_path.write_bytes(to_bytes(make_plan(version=102, sampling=20)))
    assert agent.cycle().result == "ok" and agent.host.sflow.settings.sampling == 20


def test_unsigned_plans_refused_unless_insecure(setup, make_plan, to_bytes):
    plan_path, make, _ = setup
    plan_path.write_bytes(to_bytes(make_plan()))
    agent, _ = make(insecure_unsigned=False)
    report = agent.cycle()
    assert report.result == "rejected" and "no public_key configured" in report.errors[0]
    assert agent.host.sflow is None and agent.host.writes == 0


def test_plan_size_limit_is_the_configured_one(setup, make_plan, to_bytes):
    """``max_plan_mib`` bounds the fetch (default 256 MiB: a 10^5-server plan set fits)."""
    plan_path, make, _ = setup
    data = to_bytes(make_plan())
    plan_path.write_bytes(data + b" " * (1024 * 1024))  # valid JSON, just above 1 MiB
    agent, config = make()
    assert config.max_plan_mib == 256
    assert agent.cycle().result == "ok"
    agent, _ = make(max_plan_mib=1)
    report = agent.cycle()
    assert report.result != "ok" and "1048576" in " ".join(report.problems + report.errors)


@pytest.mark.parametrize("form", ["auto", "always", "never"])
def test_slices_setting_decides_what_is_read(setup, config_for, tmp_path, make_plan, form):
    """``auto``: the slice when the location has one, else the whole plan in the same cycle;
    ``always``: a missing slice is an error (the host keeps its plan); ``never``: the plan."""
    from cosample.controller.publish import DirectoryTarget, render

    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    key, public = str(tmp_path / "k"), str(tmp_path / "k.pub")
    folder = tmp_path / "pub"
    DirectoryTarget(folder).publish(render(make_plan(), 100, key))
    _, _, clock = setup
    config = config_for(
        "s1",
        plan=str(folder / "plan.json"),
        public_key=public,
        insecure_unsigned=False,
        slices=form,
    )
    agent = Agent(config, FakeHost(), clock=clock)
    report = agent.cycle()
    assert report.result == "ok" and report.plan_version == 100
    assert ("slice" in agent.running.raw) == (form != "never")
    DirectoryTarget(folder, slices=False).publish(render(make_plan(), 101, key))
    report = agent.cycle()
    if form == "always":
        assert report.result == "error" and "hosts/s1: not found" in report.errors[0]
        assert report.plan_version == 100
    else:
        assert report.result == "ok" and report.plan_version == 101
        assert "slice" not in agent.running.raw
