"""A rig killed in its set-up leaves namespaces, links and daemons behind; the next run removes
them (only what owner marks prove a dead run's) and succeeds (cosample.lab.names)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from waiting import wait_for

from cosample.costmodel.onehost import OneHostTestbed, one_host_testbed_unavailable
from cosample.dataplane.run import CommandError, run
from cosample.lab import names
from cosample.lab.netns import Lab, netns_available


def test_run_tags_are_fixed_width_and_prefixes_differ():
    assert names.run_tag(0) == "00000" and names.run_tag(35) == "0000z"
    assert names.run_tag(4194304) == "2hwcg"  # Linux's largest pid_max fits in 5 characters
    first, second = names.run_prefix("am"), names.run_prefix("am")
    assert first != second and first[:7] == second[:7] == "am" + names.run_tag()
    with pytest.raises(ValueError, match="rig kind"):
        names.run_prefix("toolong")


def test_only_a_dead_or_released_owner_makes_a_leftover():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = f"cosample-lab pid={child.pid} start=1"
    assert names.abandoned(dead, "x")
    assert not names.abandoned(None, "x") and not names.abandoned("someone's alias", "x")
    mine = names.mark()
    names.hold("held-name")
    try:
        assert not names.abandoned(mine, "held-name")  # a live rig of this process has it
        assert names.abandoned(mine, "released-name")  # this process, no rig holds it
    finally:
        names.release("held-name")
    parent = f"cosample-lab pid={os.getppid()} start={names._start_time(os.getppid())}"
    assert not names.abandoned(parent, "x")  # a live process's, whoever it is


CRASH = textwrap.dedent("""\
    import os, subprocess, sys
    from cosample.lab.netns import Lab
    lab = Lab(prefix=sys.argv[1], kind=sys.argv[2])
    namespace = lab.namespace("n")
    lab.veth(sys.argv[1] + "v", namespace)
    quiet = subprocess.DEVNULL  # a daemon in the namespace, holding none of our pipes
    subprocess.Popen(lab.exec_argv(namespace, ["sleep", "300"]), stdout=quiet, stderr=quiet)
    print(namespace, flush=True)
    os.kill(os.getpid(), 9)  # killed in its set-up: no teardown runs
    """)


def _namespaces() -> set[str]:
    return {line.split(" ", 1)[0] for line in run(["ip", "netns", "list"]).stdout.splitlines()}


def _link_exists(name: str) -> bool:
    return run(["ip", "link", "show", name], check=False).returncode == 0


@pytest.fixture
def root():
    reason = netns_available()
    if reason:
        pytest.skip(reason)


def test_a_lab_killed_in_its_set_up_is_swept_and_the_next_run_succeeds(root):
    prefix = names.run_prefix("lk")  # the next run asks for the very same names
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH, prefix, "lk"], capture_output=True, text=True, timeout=60
    )
    assert crashed.returncode == -9, crashed.stderr
    namespace = crashed.stdout.strip()
    sleeper: list[int] = []
    try:
        # the daemon enters the namespace after its launcher forked: on a loaded machine the
        # crash may come first (seen: no pid yet)
        sleeper = wait_for(
            lambda: [int(p) for p in run(["ip", "netns", "pids", namespace]).stdout.split()], 10
        )
        assert namespace in _namespaces() and _link_exists(prefix + "v")
        with pytest.raises(CommandError, match="File exists"):
            run(["ip", "netns", "add", namespace])  # what the next run met before
        with Lab(prefix=prefix, kind="lk") as lab:
            assert lab.namespace("n") == namespace  # the same name, created again
            lab.veth(prefix + "v", namespace)
            wait_for(lambda: not any(map(names._running, sleeper)), 10)
        assert namespace not in _namespaces() and not _link_exists(prefix + "v")
    finally:  # never leave the crash behind, whatever failed above
        names.stop_processes(sleeper)
        run(["ip", "netns", "del", namespace], check=False)
        run(["ip", "link", "del", prefix + "v"], check=False)


def test_names_a_live_run_or_nobody_marked_are_never_swept(root):
    prefix = names.run_prefix("lk")
    foreign = prefix + "f"
    run(["ip", "netns", "add", foreign])  # our prefix, but no owner mark: not provably ours
    try:
        with Lab(prefix=prefix, kind="lk") as live:
            held = live.namespace("h")
            assert names.sweep(prefix) == []
            assert {foreign, held} <= _namespaces()
    finally:
        run(["ip", "netns", "del", foreign], check=False)


ONEHOST_CRASH = textwrap.dedent("""\
    import os, sys
    from cosample.costmodel.onehost import OneHostTestbed
    testbed = OneHostTestbed(sys.argv[1])
    testbed.__enter__()  # bridge, namespaces, links and both OVS daemons up
    print(testbed.ovs.directory, flush=True)
    os.kill(os.getpid(), 9)
    """)


def test_a_one_host_testbed_killed_leaves_nothing_the_next_one_trips_on(root):
    reason = one_host_testbed_unavailable()
    if reason:
        pytest.skip(reason)
    prefix = "lk" + names.run_tag()
    crashed = subprocess.run(
        [sys.executable, "-c", ONEHOST_CRASH, prefix], capture_output=True, text=True, timeout=120
    )
    assert crashed.returncode == -9, crashed.stderr
    directory = crashed.stdout.strip()
    daemons = [
        int((open(f"{directory}/{name}.pid").read()).strip())
        for name in ("ovs-vswitchd", "ovsdb-server")
    ]
    try:
        assert all(map(names._running, daemons))
        assert f"{prefix}A" in _namespaces() and _link_exists(f"{prefix}va")
        with OneHostTestbed(prefix) as testbed:  # the same names again
            assert testbed.endpoints.bridge == f"{prefix}br0"
            assert not any(map(names._running, daemons))  # stopped (a zombie at most)
            assert not os.path.exists(directory)
        assert f"{prefix}A" not in _namespaces() and not _link_exists(f"{prefix}va")
    finally:
        names.stop_processes(daemons)
        for letter in "ABC":
            run(["ip", "netns", "del", f"{prefix}{letter}"], check=False)
        for link in ("va", "vb", "vc", "br0"):
            run(["ip", "link", "del", f"{prefix}{link}"], check=False)


def test_a_testbed_build_killed_midway_is_downed_by_the_next_up(root, tmp_path):
    from cosample.experiments.testbed import build

    prefix = names.run_prefix("lk")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    run(["ip", "netns", "add", prefix + "s1"])  # built, recorded, then the builder was killed
    try:
        crashed = build.Ledger(tmp_path / "state", prefix, {}, namespaces=[prefix + "s1"])
        crashed.builder = f"cosample-lab pid={child.pid} start=1"
        (tmp_path / "state").mkdir()
        crashed.save()
        build._remove_crashed_build(tmp_path / "state")
        assert prefix + "s1" not in _namespaces() and not crashed.path.exists()
        (tmp_path / "state").mkdir()  # down() removed the emptied state folder
        running = build.Ledger(
            tmp_path / "state",
            prefix,
            {},
            builder=f"cosample-lab pid=1 start={names._start_time(1)}",
        )
        running.save()  # a build still under way (its builder runs): left alone
        build._remove_crashed_build(tmp_path / "state")
        assert running.path.exists()
    finally:
        run(["ip", "netns", "del", prefix + "s1"], check=False)
