"""The collector benchmark's quick mode runs end to end (its numbers mean nothing)."""

from __future__ import annotations

import os

import pytest

from cosample.cli import main
from cosample.lab.pmacct import sfacctd_available


@pytest.mark.slow
@pytest.mark.skipif(sfacctd_available() is not None or len(os.sched_getaffinity(0)) < 2,
                    reason="needs sfacctd and two cores")
def test_quick_benchmark_runs_both_collectors(tmp_path, capsys):
    assert main(["experiment", "collector", "--quick", "--csv", str(tmp_path / "b.csv")]) == 0
    out = capsys.readouterr().out
    assert "cosample collector: highest offered rate" in out and "pmacct sfacctd" in out
    assert "bytes per tracked server" in out and (tmp_path / "b.csv").stat().st_size > 100
