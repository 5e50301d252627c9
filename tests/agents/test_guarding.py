"""The guard in the agent, against the in-memory host and a scripted headroom probe: steps
applied at once, reported (status, metrics, a WARNING, a datagram to the collector), undone by a
new plan; ``report`` changes nothing; the wire format of the report."""

from __future__ import annotations

import logging

import pytest

from cosample.agents.fakehost import FakeHost
from cosample.agents.guard import Reading
from cosample.agents.guarding import HostGuard
from cosample.agents.report import read_status
from cosample.agents.runner import Agent
from cosample.dataplane import guardwire
from cosample.dataplane.tcmirror import match_probability

GUARD = {"floor_sampling": 80, "floor_mirror_share": 0.0, "limit": 0.8}


class ScriptedProbe:
    """Readings from a list (then calm ones)."""

    def __init__(self, busy):
        self.busy = list(busy)

    def read(self):
        return Reading(self.busy.pop(0) if self.busy else 0.1)


@pytest.fixture
def agent_with(tmp_path, config_for, make_plan, to_bytes):
    plan_path = tmp_path / "plan.json"
    sent = []

    def make(busy, mode="on", guard=GUARD, version=100):
        plan = make_plan(version=version)
        if guard is not None:
            plan["hosts"]["s1"]["guard"] = guard
        plan_path.write_bytes(to_bytes(plan))
        config = config_for("s1", plan=str(plan_path), guard=mode, guard_up_after=2)
        guard_ = HostGuard(
            config,
            ScriptedProbe(busy),
            lambda data, agent, to: sent.append((guardwire.decode(data), agent, to)),
        )
        agent = Agent(config, FakeHost(), guard=guard_)
        agent.cycle()
        return agent, config

    return make, sent, plan_path


def test_steps_down_at_once_reports_and_climbs_back(agent_with, caplog):
    make, sent, _ = agent_with
    agent, config = make([0.95, 0.95, 0.5] + [0.1] * 10)
    host = agent.host
    assert host.sflow.settings.sampling == 10 and len(host.devices) == 2
    with caplog.at_level(logging.WARNING, logger="cosample.agents"):
        report = agent.guard_tick()
    # rung 1: the mirrors at half their planned rates, the sFlow row untouched
    assert report is not None and report.guard["rung"] == 1
    assert host.sflow.settings.sampling == 10
    assert report.desired["mirrors"] == pytest.approx({"s2": 0.1, "s3": 0.15})
    # the tc chain on each VM port copies those shares (exclusive: the second filter's
    # threshold is conditional on the first not matching)
    first, second = (
        match_probability(f.bytecode) for _, f in sorted(host.links["vm1"].filters.items())
    )
    assert first == pytest.approx(0.1, abs=1e-6) and second == pytest.approx(0.15 / 0.9, abs=1e-6)
    assert "guard: backs off to rung 1" in caplog.text and "busy 0.95" in caplog.text
    assert (
        sent[-1][0].rung == 1
        and sent[-1][0].mirror_scale == 0.5
        and sent[-1][2] == "127.0.0.1:6343"
    )
    assert sent[-1][1] == "127.0.0.1"  # from the plan's sFlow agent address
    # stride 2: to rung 3 (mirrors at an eighth)
    report = agent.guard_tick()
    assert report.guard["rung"] == 3 and report.guard["steps_down"] == 2
    status = read_status(config.state_dir)
    assert status["guard"]["rung"] == 3 and status["guard"]["mirror_scale"] == 0.125
    assert status["reason"].startswith("guard: rung 3 of")
    metrics = (agent.state_dir / "metrics.prom").read_text()
    assert "cosample_agent_guard_rung 3.0" in metrics
    assert 'cosample_agent_guard_steps_total{direction="down"} 2.0' in metrics
    # calm readings: back up one rung per two of them, to the plan
    rungs = [agent.guard.status().rung]
    for _ in range(10):
        agent.guard_tick()
        rungs.append(agent.guard.status().rung)
    assert rungs[-1] == 0 and rungs == sorted(rungs, reverse=True)
    assert agent.last_report.desired["mirrors"] == {"s2": 0.2, "s3": 0.3}
    assert agent.last_report.guard["steps_up"] == 3


def test_sampling_rungs_reach_the_floor_and_never_pass_it(agent_with):
    make, sent, _ = agent_with
    agent, _ = make([1.0] * 12)
    for _ in range(12):
        agent.guard_tick()
    # mirrors shed (scale 0), sFlow at the floor, and the host applied it
    assert agent.host.sflow.settings.sampling == 80
    assert agent.guard.status().sflow_sampling == 80 and agent.guard.status().rung == 7
    # the mirrors went: no device, no tc filter copies anything any more
    assert agent.host.devices == {} and agent.last_report.desired["mirrors"] == {}
    assert all(not link.filters for link in agent.host.links.values())
    assert sent[-1][0].sflow_sampling == 80 and sent[-1][0].mirror_scale == 0.0
    assert [r.rung for r, _, _ in sent] == sorted(r.rung for r, _, _ in sent)


def test_a_cycle_keeps_the_rung_and_a_new_plan_ends_it(agent_with, make_plan, to_bytes):
    make, _, plan_path = agent_with
    agent, _ = make([1.0] * 5)
    for _ in range(5):
        agent.guard_tick()
    assert agent.host.sflow.settings.sampling > 10
    writes = agent.host.writes
    report = agent.cycle()  # the same plan: the host stays where the guard put it
    assert report.commands == () and agent.host.writes == writes
    assert report.guard["rung"] == agent.guard.status().rung > 0
    plan = make_plan(version=101)
    plan["hosts"]["s1"]["guard"] = GUARD
    plan_path.write_bytes(to_bytes(plan))
    report = agent.cycle()  # a new plan: on its rung 0
    assert report.plan_version == 101 and report.guard["rung"] == 0
    assert agent.host.sflow.settings.sampling == 10
    assert report.desired["mirrors"] == {"s2": 0.2, "s3": 0.3}


def test_report_only_changes_nothing_and_tells_the_collector_nothing(agent_with, caplog):
    make, sent, _ = agent_with
    agent, _ = make([1.0] * 3, mode="report")
    writes = agent.host.writes
    with caplog.at_level(logging.WARNING, logger="cosample.agents"):
        for _ in range(3):
            assert agent.guard_tick() is None
    assert agent.host.writes == writes and sent == []
    assert "would back off (report only)" in caplog.text
    status = agent.guard.status()
    assert status.rung > 0 and status.mode == "report"
    assert agent.guard.rung().sampling == 10 and agent.guard.rung().mirror_scale == 1.0


def test_a_plan_without_guard_room_only_reads(agent_with):
    make, sent, _ = agent_with
    agent, _ = make([1.0] * 3, guard=None)
    writes = agent.host.writes
    for _ in range(3):
        agent.guard_tick()
    assert agent.host.writes == writes and sent == []
    assert agent.guard.status().busy == 1.0 and agent.guard.status().rungs == 1


def test_report_wire_round_trip_and_refusals():
    report = guardwire.GuardReport("s1", 7, 2, 16, 0.25, 1700000000.5, 0.93)
    assert guardwire.decode(guardwire.encode(report)) == report
    assert len(guardwire.encode(report)) < 200
    body = guardwire.encode(report)[len(guardwire.MAGIC) :]
    for bad in (
        b"\0\0\0\5" + body,
        guardwire.MAGIC + b"{",
        guardwire.MAGIC + body.replace(b'"rung":2', b'"rung":-2'),
        guardwire.MAGIC + body.replace(b'"mirror_scale":0.25', b'"mirror_scale":2'),
        guardwire.MAGIC + body.replace(b'"sflow_sampling":16', b'"sflow_sampling":"16"'),
        guardwire.MAGIC + body.replace(b'"busy"', b'"extra":1,"busy"'),
        guardwire.MAGIC + b" " * 600,
        guardwire.MAGIC + body.replace(b'"time":1700000000.5', b'"time":NaN'),
    ):
        with pytest.raises(ValueError):
            guardwire.decode(bad)


@pytest.mark.parametrize(
    "key, value",
    [
        ("guard", "maybe"),
        ("guard_interval_s", 5),  # every second or faster
        ("guard_signals", ["vswitchd", "magic"]),
        ("guard_signals", []),
        ("guard_band", 1.5),
        ("guard_up_after", 0),
    ],
)
def test_bad_guard_settings_are_one_line_naming_the_key(config_for, key, value):
    from cosample.agents.errors import ConfigError

    with pytest.raises(ConfigError, match=key) as caught:
        config_for("s1", **{key: value})
    assert "\n" not in str(caught.value)


def test_a_host_that_mirrors_and_receives_keeps_taking_copies_on_every_rung(
    tmp_path, config_for, make_plan, to_bytes
):
    # issue 44: s1 mirrors to s2 and s3 and takes a share of s2's traffic (s2 mirrors to it),
    # which its bridge's sFlow samples at s1's own 1-in-N. Its guard sheds s1's mirrors and
    # samples more sparsely; the tunnel port s2's copies arrive on stays on every rung (the
    # copies are then sampled at the rung's 1-in-N, which s1's samples declare)
    plan = make_plan()
    plan["hosts"]["s2"].update(role="sender", sflow_sampling=3, local_rate=1 / 3)
    plan["hosts"]["s2"]["mirrors"] = [{"to": "s1", "rate": 0.25}]
    plan["hosts"]["s1"]["receives"] = [{"from": "s2", "rate": 0.25, "pps": 1e5}]
    plan["hosts"]["s1"]["guard"] = GUARD
    path = tmp_path / "plan.json"
    path.write_bytes(to_bytes(plan))
    config = config_for("s1", plan=str(path), guard="on", guard_up_after=2)
    guard = HostGuard(config, ScriptedProbe([1.0] * 12), lambda data, agent, to: None)
    agent = Agent(config, FakeHost(), guard=guard)
    agent.cycle()
    tunnels = {name for name, port in agent.host.ports.items() if port.owned}
    assert len(tunnels) == 1 and len(agent.host.devices) == 2  # s2's copies in; two mirrors out
    for _ in range(12):
        agent.guard_tick()
        assert {name for name, port in agent.host.ports.items() if port.owned} == tunnels
    assert agent.host.sflow.settings.sampling == 80 and agent.host.devices == {}
    assert agent.last_report.desired["mirrors"] == {}
