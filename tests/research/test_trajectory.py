"""The run-by-run refit of committed calibrations (research/costmodel_trajectory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosample.costmodel.ancova import MIN_STOPPING_BLOCKS
from cosample.costmodel.calibration_file import read_calibration_file
from cosample.experiments.errors import ExperimentError
from research.costmodel_trajectory import main, trajectory

BUDGET = Path(__file__).resolve().parents[2] / "docs" / "data" / "budget"


@pytest.mark.parametrize("seed", [400, 401, 402])
def test_the_last_step_is_the_calibration_and_the_rule_stops_where_the_harness_did(seed):
    """Refitted on all its runs, the calibration's own estimate and interval come back; and the
    first narrow-enough interval from the stopping rule's first check on is the run at which
    ``cosample calibrate --target-ci`` stopped (these calibrations met their target)."""
    path = BUDGET / f"sflow-default-s{seed}.json"
    reported = read_calibration_file(path)
    fit = reported.mechanisms["sflow"]
    (row,) = trajectory(path, first=MIN_STOPPING_BLOCKS)
    last = row["steps"][-1]
    assert last["runs"] == row["runs"] == fit.n_blocks
    assert last["a"] == pytest.approx(fit.coefficient, abs=1e-6)
    low, high = fit.coefficient_ci
    assert last["half_width"] == pytest.approx((high - low) / 2, abs=1e-6)
    assert reported.metadata.target_met == {"sflow": True}
    assert row["met_at"] == row["runs"]
    assert row["met_seconds"] == pytest.approx(reported.metadata.seconds["sflow"])


def test_earlier_steps_are_wider_on_this_data():
    (row,) = trajectory(BUDGET / "sflow-default-s401.json")
    widths = {s["runs"]: s["half_width"] for s in row["steps"]}
    assert widths[9] > widths[row["runs"]] and widths[3] > widths[9]


def test_too_few_runs_for_the_first_refit_is_one_error():
    with pytest.raises(ExperimentError, match="13 runs; the fit needs 20"):
        trajectory(BUDGET / "sflow-default-s402.json", first=20)


def test_main_prints_a_row_per_calibration(capsys):
    assert main([str(BUDGET / "sflow-default-s402.json"), "--at", "9"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| data | mechanism | runs | after 9 runs (needed) |")
    assert out[2].startswith("| sflow-default-s402.json | sflow | 13 | ")
    assert out[2].endswith("| 13 runs | 162 |")
    assert main([str(BUDGET / "absent.json")]) == 2
