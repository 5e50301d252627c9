"""The collector benchmark's quick mode runs end to end (its numbers mean nothing)."""

from __future__ import annotations

import os

import pytest

from cosample.cli import main
from cosample.lab.pmacct import sfacctd_available


@pytest.mark.slow
@pytest.mark.skipif(
    sfacctd_available() is not None or len(os.sched_getaffinity(0)) < 2,
    reason="needs sfacctd and two cores",
)
def test_quick_benchmark_runs_both_collectors(tmp_path, capsys):
    assert main(["experiment", "collector", "--quick", "--csv", str(tmp_path / "b.csv")]) == 0
    out = capsys.readouterr().out
    assert "cosample collector: highest offered rate" in out and "pmacct sfacctd" in out
    assert "bytes per tracked server" in out and (tmp_path / "b.csv").stat().st_size > 100
    assert "sfacctd pcap_savefile (command)" in out and "replay() in process" in out
    assert "ratio to sfacctd" in out


@pytest.mark.slow
def test_flood_from_unknown_agents_reads_the_daemons_memory():
    """The flood experiment end to end at a small size: the daemon processed what was sent,
    refused every datagram as an unplanned agent's, and its memory was read at each step."""
    from research.collector_flood import flood

    rows = flood(2_000, 4_000, steps=2, log=lambda line: None)
    assert [row["sent"] for row in rows] == [0, 1_000, 2_000]
    assert all(row["rss_mb"] > 10 for row in rows)
    assert rows[-1]["processed"] > 0
    assert rows[-1]["unplanned_agent_datagrams"] == rows[-1]["processed"]


@pytest.mark.slow
@pytest.mark.skipif(sfacctd_available() is not None, reason="needs sfacctd")
def test_replay_side_by_side_with_the_python_decoder_counts_alike():
    """``--baseline``: every arm of ours, compiled scan on and off, counts the same samples."""
    from cosample.experiments.bench_collector import replay_side_by_side

    table = replay_side_by_side(3_000, 1, log=lambda line: None, baseline=True)
    ours = table[table["what"] != "sfacctd pcap_savefile (command)"]
    assert len(ours) == 6 and ours["what"].str.contains("Python decoder").sum() == 3
    assert ours["samples"].nunique() == 1 and ours["samples"].iloc[0] > 0
