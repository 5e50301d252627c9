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
    assert "sfacctd pcap_savefile (command)" in out and "Estimator.ingest in process" in out
    assert "collector replay --plan PLAN CAPTURE --json (command)" in out
    assert "many agents (50)" in out and "corpus" in out and "ratio to sfacctd" in out


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
def test_replay_side_by_side_counts_alike_with_and_without_plan_and_compiled_parts():
    """Every arm of ours (commands with and without a plan, in process, the compiled parts on
    and off) counts the same samples as the capture holds: the plan's checks drop nothing a
    real agent sent."""
    from cosample.experiments.bench_replay import SFACCTD, side_by_side

    table = side_by_side(3_000, 3_000, 30, 1, log=lambda line: None, baseline=True)
    for name, part in table.groupby("capture"):
        theirs = part[part["what"] == SFACCTD]
        ours = part[part["what"] != SFACCTD]
        assert len(ours) == 8 and ours["what"].str.contains("Python code").sum() == 4, name
        assert set(ours["samples"]) == set(theirs["samples"]), name
