"""The saturation benchmark's sender as pure logic: tcpreplay's argv, the loops a step takes,
its report read, the missing tool named; and the benchmark's count check (the real runs:
test_bench_appmon_saturation.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from research import bench_appmon_records as records
from research import bench_appmon_saturation as bench
from research import bench_appmon_sender as sender

REPORT = """File Cache is enabled
Actual: 270280 packets (65279825 bytes) sent in 1.80 seconds
Rated: 36224428.3 Bps, 289.79 Mbps, 149981.07 pps
Flows: 36 flows, 19.97 fps, 54056 unique flow packets, 0 unique non-flow packets
Statistics for network device: sat1a
\tSuccessful packets:        270277
\tFailed packets:            3
\tTruncated packets:         0
\tRetried packets (ENOBUFS): 0
\tRetried packets (EAGAIN):  0
"""


def test_argv_offers_the_file_at_the_rate_looped_from_memory():
    argv = sender.sender_argv("sat1a", Path("/tmp/x/web.pcap"), 150000.4, 7)
    assert argv == [
        "tcpreplay",
        "--intf1=sat1a",
        "--preload-pcap",
        "--pps=150000",
        "--loop=7",
        "/tmp/x/web.pcap",
    ]


@pytest.mark.parametrize(("rate", "loops"), [(0.5, 1), (1000, 0)])
def test_argv_refuses_no_rate_or_no_loop(rate, loops):
    with pytest.raises(ValueError, match="sender_argv"):
        sender.sender_argv("sat1a", Path("web.pcap"), rate, loops)


@pytest.mark.parametrize(
    ("rate", "seconds", "recording", "loops"),
    [
        (100_000, 4, 50_000, 8),
        (100_000, 4, 30_000, 13),  # 13.3 passes: the nearest whole number
        (5_000, 1, 30_000, 1),  # less than one pass: one
        (200_000, 10, 54_056, 37),
    ],
)
def test_whole_passes_closest_to_the_step(rate, seconds, recording, loops):
    assert sender.loops_for(rate, seconds, recording) == loops


def test_loops_refuse_an_empty_recording():
    with pytest.raises(ValueError, match="recording 0"):
        sender.loops_for(1000, 4, 0)


def test_report_read():
    assert sender.sent(REPORT) == (270280, 1.8, 3)


def test_report_without_totals_is_an_error():
    with pytest.raises(ValueError, match="Actual"):
        sender.sent("tcpreplay: Fatal Error: failed to open device\n")


def test_missing_sender_named(monkeypatch):
    monkeypatch.setattr(sender.shutil, "which", lambda name: None)
    assert "Debian package tcpreplay" in sender.sender_missing()
    monkeypatch.setattr(sender.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert sender.sender_missing() is None


def row(path="compiled", drops=0, right=True, responses=10, expected=10):
    return {
        "path": path,
        "offered": 100_000.0,
        "kernel_drops": drops,
        "counts_right": right,
        "responses": responses,
        "expected_responses": expected,
    }


def test_counts_right_needs_live_replay_and_recording_to_agree():
    assert bench.counts_right((30, 27), (30, 27), (30, 27))
    assert not bench.counts_right((30, 26), (30, 27), (30, 27))  # the live analyser missed one
    assert not bench.counts_right((30, 27), (30, 27), (33, 30))  # a loop counted short


def test_wrong_counts_named_only_in_steps_without_drops():
    assert bench.counts_wrong([row(), row(drops=5, right=False, responses=7)]) is None
    line = bench.counts_wrong([row(), row(path="python", right=False, responses=9)])
    assert line.startswith("bench_appmon_saturation: counts differ")
    assert "python at 100,000/s (9 responses, 10 expected)" in line


def test_counts_of_windows_and_snapshots():
    windows = [
        {"services": [{"requests": 3, "responses": 2}, {"requests": 1, "responses": 1}]},
        {"services": []},
    ]
    assert bench.counts(windows) == (4, 3)


def test_counts_column_says_lower_bound_under_drops_and_wrong_without():
    assert bench.verdict(row()) == "right"
    assert bench.verdict(row(drops=5, right=False)) == "lower"
    assert bench.verdict(row(right=False)) == "WRONG"


def test_favour_moves_a_session_leader_and_its_group_only():
    """A process in our session is refused (its group is ours: raising it would raise every
    process of the session); one that leads its own gets the nice value, its group too."""
    ours = subprocess.Popen(["sleep", "30"])
    own = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with pytest.raises(ValueError, match="does not lead a session"):
            records.favour(ours.pid, 5)
        records.favour(own.pid, 5)  # a lower priority: allowed to anyone
        assert os.getpriority(os.PRIO_PROCESS, own.pid) == 5
        group = Path(f"/proc/{own.pid}/autogroup")
        if group.exists():
            assert group.read_text().split()[-1] == "5"
        assert os.getpriority(os.PRIO_PROCESS, ours.pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        for process in (ours, own):
            process.kill()
            process.wait()
