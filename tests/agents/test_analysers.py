"""The analyser supervisor's decisions (``agents/analysers.py``) and its effects against a fake
process table (``agents/analyser_procs.py``); the agent runs it every cycle. The real processes
are in test_analysers_real.py."""

from __future__ import annotations

import copy
import json
import signal
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from cosample.agents.analyser_procs import PID_FILE, Supervisor, wanted_for
from cosample.agents.analysers import (
    STABLE_S,
    Child,
    StartAnalyser,
    StopAnalyser,
    backoff_s,
    exited,
    supervise,
    wanted_analysers,
)
from cosample.agents.fakehost import FakeHost
from cosample.agents.report import read_status
from cosample.agents.runner import Agent
from cosample.dataplane.recordkeys import pair_key
from cosample.dataplane.tunnels import RECORD_PORT

SERVICE = {"address": "10.0.0.12", "port": 8080}


class FakeProcesses:
    """Processes as a dictionary: pid -> argv while alive; ``exit`` makes one exit; a process
    ignores SIGTERM when ``stubborn``."""

    def __init__(self, stubborn: bool = False) -> None:
        self.alive: dict[int, tuple] = {}
        self.codes: dict[int, int] = {}
        self.signals: list[tuple[int, int]] = []
        self.spawned: list[tuple] = []
        self.next_pid, self.stubborn = 1000, stubborn
        self.foreign: dict[int, tuple] = {}  # live processes not ours (adoption)

    def spawn(self, argv, log):
        self.next_pid += 1
        self.alive[self.next_pid] = tuple(argv)
        self.spawned.append(tuple(argv))
        assert log.parent.exists()
        return self.next_pid

    def poll(self, pid):
        if pid in self.alive or pid in self.foreign:
            return False, None
        return True, self.codes.get(pid)

    def signal(self, pid, number):
        self.signals.append((pid, number))
        if number == signal.SIGKILL or not self.stubborn:
            self.exit(pid, -number)

    def exit(self, pid, code):
        self.alive.pop(pid, None)
        self.foreign.pop(pid, None)
        self.codes[pid] = code

    def find(self, argv, pid):
        return self.foreign.get(pid) == tuple(argv)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def spec_item(**extra):
    return {
        "service": {**SERVICE, "protocol": "http"},
        "mechanism": "sniffer",
        "from": "s1",
        "interface": "vm2",
        "share": 1.0,
        **extra,
    }


def wanted(tmp_path, *items, key=None, secret=None):
    return wanted_analysers(
        tuple(items),
        host="s1",
        state_dir=tmp_path,
        window_s=10.0,
        snapshot_key=key,
        record_secret=secret,
        python="py",
    )


def test_a_record_pair_gets_one_key_from_the_site_secret(tmp_path):
    """The sender (s1 -> s4) and the receiver (s4, from s1) derive the same key; another pair,
    or no secret, another argument list."""
    send = spec_item(send_records="10.9.0.4:9555", send_to="s4", send_records_from="10.9.0.1")
    receive = spec_item(
        **{"from": "s1", "interface": None, "receive_records": "10.9.0.4:9555"},
        records_from="10.9.0.1",
    )
    secret = bytes(32)
    (sender,) = wanted(tmp_path / "s1", send, secret=secret).values()
    (receiver,) = wanted_analysers(
        (receive,), host="s4", state_dir=tmp_path / "s4", window_s=10.0, record_secret=secret
    ).values()
    assert sender.record_key == receiver.record_key == pair_key(secret, "s1", "s4")
    assert sender.argv[sender.argv.index("--send-records-from") + 1] == "10.9.0.1"
    assert receiver.argv[receiver.argv.index("--records-from") + 1] == "10.9.0.1"
    name = Path(sender.argv[sender.argv.index("--record-key") + 1]).name
    assert name == Path(receiver.argv[receiver.argv.index("--record-key") + 1]).name
    (other,) = wanted(tmp_path / "s1", send, secret=b"\1" * 32).values()
    assert other.argv != sender.argv  # a new secret restarts the pair
    (bare,) = wanted(tmp_path / "s1", send).values()
    assert bare.record_key is None and "--record-key" not in bare.argv
    (lab,) = wanted_analysers(
        (send,), host="s1", state_dir=tmp_path, window_s=10.0, insecure_records=True
    ).values()
    assert "--insecure-records" in lab.argv


def supervisor(tmp_path, processes, clock):
    return Supervisor(
        processes,
        tmp_path,
        stop_s=5.0,
        backoff_s=1.0,
        backoff_max_s=8.0,
        clock=clock,
        sleep=clock.sleep,
    )


# pure --------------------------------------------------------------------------------------------
def test_one_process_per_item_with_the_items_arguments(tmp_path):
    items = (
        spec_item(),
        spec_item(send_records="10.9.0.4:9555", send_to="s4", share=0.25),
        spec_item(
            **{"from": "s2", "interface": None, "receive_records": f"10.9.0.1:{RECORD_PORT}"}
        ),
        spec_item(mechanism="selective_mirror", **{"from": "s3"}, interface="cosar-1a2b3c4d"),
    )
    out = wanted(tmp_path, *items, key="/k.pem")
    roles = sorted(a.role for a in out.values())
    assert roles == ["mirror", "receiver", "sender", "sniffer"]
    by_role = {a.role: a for a in out.values()}
    sender = by_role["sender"].argv
    assert sender[:5] == ("py", "-m", "cosample", "appmon", "run")
    assert sender[sender.index("--send-records") + 1] == "10.9.0.4:9555"
    assert sender[sender.index("--share-residues") + 1] == "64"
    assert "--share-residues" not in by_role["sniffer"].argv
    assert "--interface" not in by_role["receiver"].argv
    assert (
        by_role["mirror"].argv[by_role["mirror"].argv.index("--interface") + 1] == "cosar-1a2b3c4d"
    )
    for a in out.values():
        assert a.argv[a.argv.index("--snapshot-key") + 1] == "/k.pem"
        assert a.argv[a.argv.index("--state-dir") + 1] == a.state_dir
        assert a.state_dir.startswith(str(tmp_path / "analysers"))
    # names are stable across calls and distinct
    assert wanted(tmp_path, *items, key="/k.pem") == out and len(out) == 4


def test_decisions_start_stop_change_and_restart(tmp_path):
    want = wanted(tmp_path, spec_item())
    ((name, analyser),) = want.items()
    assert supervise(want, {}, 0.0) == [StartAnalyser(analyser)]
    running = {name: Child(name, analyser.argv, analyser.state_dir, 7, 0.0)}
    assert supervise(want, running, 1.0) == []
    assert supervise({}, running, 1.0) == [StopAnalyser(name, 7, "the plan no longer asks for it")]
    changed = {name: Child(name, analyser.argv + ("--x",), analyser.state_dir, 7, 0.0)}
    assert supervise(want, changed, 1.0) == [
        StopAnalyser(name, 7, "its arguments changed"),
        StartAnalyser(analyser),
    ]
    gone = {name: exited(running[name], 1, 2.0, 1.0, 8.0)}
    assert supervise(want, gone, 2.5) == []  # backing off
    assert supervise(want, gone, 3.0) == [StartAnalyser(analyser, restart=True)]


def test_backoff_doubles_on_early_exits_and_resets_after_a_stable_run():
    child = Child("a", ("x",), "/d", 7, 0.0)
    delays = []
    for k in range(6):
        child = exited(child, 1, child.started_at + 1, 1.0, 8.0)
        delays.append(child.retry_at - (child.started_at + 1))
        child = Child("a", ("x",), "/d", 8, child.retry_at, failures=child.failures)
    assert delays == [1, 2, 4, 8, 8, 8]
    stable = exited(child, 0, child.started_at + STABLE_S, 1.0, 8.0)
    assert stable.failures == 1 and stable.retry_at - (child.started_at + STABLE_S) == 1
    assert backoff_s(0, 1.0, 8.0) == 1.0


# effects against the fake table -------------------------------------------------------------------
def test_supervisor_starts_restarts_and_stops_by_pid(tmp_path):
    processes, clock = FakeProcesses(), Clock()
    sup = supervisor(tmp_path, processes, clock)
    want = wanted(tmp_path, spec_item())
    ((name, analyser),) = want.items()
    done, failed = sup.step(want)
    assert done == [f"start analyser {name} (sniffer 10.0.0.12:8080)"] and not failed
    pid = sup.children[name].pid
    assert processes.alive[pid] == analyser.argv
    directory = tmp_path / "analysers" / name
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "analysers").stat().st_mode) == 0o700
    assert json.loads((directory / PID_FILE).read_text()) == {
        "pid": pid,
        "argv": list(analyser.argv),
    }
    assert sup.step(want) == ([], [])  # converged: nothing to do
    processes.exit(pid, 3)
    assert sup.step(want) == ([], [])  # exited: waits its back-off
    assert sup.status()[0]["state"] == "waiting" and sup.status()[0]["last_exit"] == 3
    clock.now += 1.0
    done, _ = sup.step(want)
    assert done == [f"restart analyser {name} (sniffer 10.0.0.12:8080)"]
    pid2 = sup.children[name].pid
    assert pid2 != pid and sup.status()[0]["restarts"] == 1
    assert sup.stop_all() == [f"stop analyser {name} (pid {pid2}: the plan no longer asks for it)"]
    assert processes.signals == [(pid2, signal.SIGTERM)] and not processes.alive
    assert not (directory / PID_FILE).exists() and sup.children == {}


def test_a_process_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path):
    processes, clock = FakeProcesses(stubborn=True), Clock()
    sup = supervisor(tmp_path, processes, clock)
    sup.step(wanted(tmp_path, spec_item()))
    pid = next(iter(sup.children.values())).pid
    started = clock.now
    sup.step({})
    assert processes.signals == [(pid, signal.SIGTERM), (pid, signal.SIGKILL)]
    assert clock.now - started >= 5.0 and not processes.alive


def test_a_changed_spec_replaces_the_process(tmp_path):
    processes, clock = FakeProcesses(), Clock()
    sup = supervisor(tmp_path, processes, clock)
    sup.step(wanted(tmp_path, spec_item()))
    old = next(iter(sup.children.values())).pid
    sup.step(wanted(tmp_path, spec_item(share=0.5)))
    (child,) = sup.children.values()
    assert old not in processes.alive and child.pid in processes.alive
    assert "--share-residues" in processes.alive[child.pid]


def test_a_restarted_agent_adopts_its_running_analysers_and_stops_unwanted_ones(tmp_path):
    processes, clock = FakeProcesses(), Clock()
    first = supervisor(tmp_path, processes, clock)
    both = wanted(tmp_path, spec_item(), spec_item(**{"from": "s2"}, interface="vm3"))
    first.step(both)
    pids = {name: child.pid for name, child in first.children.items()}
    # the agent is killed: its children live on, not its own any more
    processes.foreign, processes.alive = dict(processes.alive), {}
    second = supervisor(tmp_path, processes, clock)
    keep = dict(list(both.items())[:1])
    done, _ = second.step(keep)
    (kept,), (dropped,) = keep, set(both) - set(keep)
    assert done == [
        f"stop analyser {dropped} (pid {pids[dropped]}: the plan no longer asks for it)"
    ]
    assert second.children[kept].pid == pids[kept] and len(processes.spawned) == 2
    # a reused PID running something else is not taken for an analyser
    processes.foreign[pids[kept]] = ("sleep", "100")
    third = supervisor(tmp_path, processes, clock)
    third.step(keep)
    assert third.children[kept].pid != pids[kept] and len(processes.spawned) == 3


def test_a_start_that_cannot_exec_is_a_problem_and_retried(tmp_path):
    class Broken(FakeProcesses):
        def spawn(self, argv, log):
            raise FileNotFoundError(2, "No such file", argv[0])

    clock = Clock()
    sup = supervisor(tmp_path, Broken(), clock)
    done, failed = sup.step(wanted(tmp_path, spec_item()))
    assert not done and "No such file" in failed[0]
    assert sup.status()[0]["state"] == "waiting"


# the agent runs it -------------------------------------------------------------------------------
def test_the_agent_runs_the_analysers_its_plan_asks_for(
    tmp_path, config_for, make_plan, to_bytes, now
):
    plan_path = tmp_path / "plan.json"
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [
        {"service": SERVICE, "mechanism": "sniffer", "interface": "vm2"}
    ]
    plan_path.write_bytes(to_bytes(doc))
    config = config_for("s1", plan=str(plan_path), analyser_key="/etc/k.pem")
    processes, clock = FakeProcesses(), Clock()
    agent = Agent(
        config,
        FakeHost(),
        clock=lambda: now,
        supervisor=supervisor(config.state_dir, processes, clock),
    )
    report = agent.cycle()
    assert report.result == "ok"
    (analyser,) = report.analysers
    assert analyser["state"] == "running" and analyser["role"] == "sniffer"
    assert any(c.startswith("start analyser") for c in report.commands)
    (argv,) = processes.alive.values()
    assert argv[argv.index("--interface") + 1] == "vm2" and "/etc/k.pem" in argv
    assert read_status(config.state_dir)["analysers"][0]["pid"] == analyser["pid"]
    metrics = (agent.state_dir / "metrics.prom").read_text()
    assert 'cosample_agent_analysers{state="running"} 1.0' in metrics
    # the next plan moves the analysis off-host: the sniffer stops
    moved = copy.deepcopy(doc)
    moved["version"] += 1
    moved["hosts"]["s1"]["appmon"] = [
        {"service": SERVICE, "mechanism": "selective_mirror", "to": "s4"}
    ]
    plan_path.write_bytes(to_bytes(moved))
    report = agent.cycle()
    assert report.analysers == () and not processes.alive
    assert any(c.startswith("stop analyser") for c in report.commands)


def test_the_analysis_host_runs_the_mirrors_analyser(
    tmp_path, config_for, make_plan, to_bytes, now
):
    plan_path = tmp_path / "plan.json"
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [
        {"service": SERVICE, "mechanism": "selective_mirror", "to": "s4"}
    ]
    plan_path.write_bytes(to_bytes(doc))
    config = config_for("s4", plan=str(plan_path))
    processes, clock = FakeProcesses(), Clock()
    agent = Agent(
        config,
        FakeHost(),
        clock=lambda: now,
        supervisor=supervisor(config.state_dir, processes, clock),
    )
    report = agent.cycle()
    (analyser,) = report.analysers
    assert analyser["role"] == "mirror" and analyser["state"] == "running"
    (argv,) = processes.alive.values()
    assert argv[argv.index("--interface") + 1].startswith("cosar-")
    agent.close()
    assert not processes.alive


def test_without_a_supervisor_no_process_is_started(tmp_path, config_for, make_plan, to_bytes, now):
    plan_path = tmp_path / "plan.json"
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [
        {"service": SERVICE, "mechanism": "sniffer", "interface": "vm2"}
    ]
    plan_path.write_bytes(to_bytes(doc))
    agent = Agent(config_for("s1", plan=str(plan_path)), FakeHost(), clock=lambda: now)
    assert agent.cycle().analysers == ()


@pytest.mark.parametrize(
    "field, value", [("analyser_window_s", 0), ("analyser_stop_s", -1), ("run_analysers", "maybe")]
)
def test_bad_analyser_settings_are_refused(config_for, field, value):
    from cosample.agents.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        config_for("s1", **{field: value})


def test_the_agent_gives_its_record_pair_the_key_from_its_secret(
    tmp_path, config_for, make_plan, to_bytes, now
):
    """A sniffer sending records to s4: the agent reads ``record_secret``, the started
    analyser's ``--record-key`` file holds the pair's key (0600); an unreadable or open secret
    leaves the analyser keyless (it then refuses to start: test_analysers_real)."""
    plan_path = tmp_path / "plan.json"
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [
        {"service": SERVICE, "mechanism": "sniffer", "interface": "vm2", "to": "s4"}
    ]
    plan_path.write_bytes(to_bytes(doc))
    secret = tmp_path / "record-secret"
    secret.write_text("ab" * 32 + "\n")
    secret.chmod(0o600)
    config = config_for("s1", plan=str(plan_path), record_secret=str(secret))
    processes, clock = FakeProcesses(), Clock()
    agent = Agent(
        config,
        FakeHost(),
        clock=lambda: now,
        supervisor=supervisor(config.state_dir, processes, clock),
    )
    assert agent.cycle().result == "ok"
    (argv,) = processes.alive.values()
    key_file = Path(argv[argv.index("--record-key") + 1])
    assert key_file.read_text() == pair_key(bytes.fromhex("ab" * 32), "s1", "s4").hex()
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert argv[argv.index("--send-records-from") + 1] == doc["hosts"]["s1"]["tunnel_ip"]
    desired = SimpleNamespace(spec=(spec_item(send_records="10.9.0.4:9555", send_to="s4"),))
    (again,) = wanted_for(desired, config).values()
    assert again.record_key == pair_key(bytes.fromhex("ab" * 32), "s1", "s4")
    secret.chmod(0o644)  # readable by others: refused, logged, no key given
    (keyless,) = wanted_for(desired, config).values()
    assert keyless.record_key is None and "--record-key" not in keyless.argv


def test_a_service_of_another_protocol_is_declared_to_its_analyser(tmp_path):
    plain = wanted(tmp_path, spec_item())
    assert not any(arg == "--protocol" for one in plain.values() for arg in one.argv)
    item = spec_item(service={**SERVICE, "protocol": "tls"})
    (analyser,) = wanted(tmp_path, item).values()
    at = analyser.argv.index("--protocol")
    assert analyser.argv[at + 1] == "8080=tls"
