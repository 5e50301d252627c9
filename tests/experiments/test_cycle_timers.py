"""The cycle timers on a tiny fleet (structure only, never timings): the benchmark's three
cycles run with the functions wrapped, and every publishing part is timed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from cosample.collector.snapshot import parse_snapshot
from research.cycle_timers import TIMED


def test_three_cycles_and_the_functions_they_called():
    done = subprocess.run(
        [sys.executable, "-m", "research.cycle_timers", "--servers", "300"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == [
        "cycle 1 (published)",
        "cycle 2 (kept)",
        "cycle 3 (published, two phases)",
    ]
    assert "floor" not in lines[0] and lines[0].split()[-2:-1] == ["publish"]
    assert lines[3] == "beside the floor:"
    floors = lines[4:7]
    assert [line.split(" (")[0].split()[-2:] for line in floors] == [
        ["cycle", "1"],
        ["cycle", "2"],
        ["cycle", "3"],
    ]
    assert all(", floor " in line and "x; read " in line for line in floors)
    assert lines[7] == "functions, CPU seconds over the cycles:"
    timed = {line.split()[1] for line in lines[8:]}
    # what a publication through the HTTP target calls (not the folder target's publish)
    called = {f"{module.rsplit('.', 1)[-1]}.{path}" for module, path in TIMED} - {
        "publish.DirectoryTarget.publish"
    }
    assert called <= timed, called - timed


def test_too_few_servers_is_one_error():
    done = subprocess.run(
        [sys.executable, "-m", "research.cycle_timers", "--servers", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--servers: at least 10" in done.stderr


def test_again_adds_two_phase_publications_on_the_traffic_moving_back_and_forth():
    """What a running controller repeats: every extra cycle publishes two phases (the
    benchmark raises if one does not), its snapshot ``MOVED_AFTER_S`` after the one before."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "research.cycle_timers",
            "--servers",
            "300",
            "--again",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:5]] == [
        "cycle 1 (published)",
        "cycle 2 (kept)",
        "cycle 3 (published, two phases)",
        "cycle 4 (published, two phases)",
        "cycle 5 (published, two phases)",
    ]
    # the extra cycles beside the floor of a two-phase publication (cycle 3's plan set)
    floor_3, floor_5 = (lines[6 + k].split(", floor ")[1].split(" s")[0] for k in (2, 4))
    assert floor_5 == floor_3 and "two phases" in lines[6 + 4]


@pytest.mark.parametrize("suffix", ["bin", "json"])
def test_again_snapshots_alternate_the_traffic_and_move_on_in_time(tmp_path, suffix):
    from datetime import datetime, timedelta, timezone

    from cosample.collector import snapshotbin
    from research.bench_controller import MOVED_AFTER_S, again_snapshots, write_snapshot

    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    write_snapshot(50, tmp_path / "snap.json", started)
    schedule = again_snapshots(tmp_path, suffix, started, 3)
    assert schedule == [
        (2 * MOVED_AFTER_S, "again0"),
        (3 * MOVED_AFTER_S, "again1"),
        (4 * MOVED_AFTER_S, "again2"),
    ]

    def read(name: str) -> Any:
        data = (tmp_path / f"{name}.{suffix}").read_bytes()
        return snapshotbin.decode(data) if suffix == "bin" else parse_snapshot(data)

    for (later_s, name), source in zip(schedule, ("snap", "snap3", "snap")):
        again, before = read(name), read(source)
        assert again.time == started + timedelta(seconds=later_s)
        assert snapshotbin.encode(
            again.model_copy(update={"time": before.time})
        ) == snapshotbin.encode(before)
    assert snapshotbin.encode(read("snap")) != snapshotbin.encode(
        read("snap3").model_copy(update={"time": read("snap").time})
    )
