"""Atomic writers: readable results, and nothing left behind when writing fails."""

from __future__ import annotations

import stat

import pandas as pd
import pytest

from cosample.experiments.errors import ExperimentError
from cosample.experiments.files import (
    output_dir,
    read_calibration,
    read_csv,
    write_atomic,
    write_csv,
)


def test_csv_round_trip_with_empty_missing_values(tmp_path):
    frame = pd.DataFrame({"p": [0.5, 1.0], "gain": [0.25, float("nan")]})
    path = write_csv(frame, tmp_path / "cells.csv")
    assert path.read_text() == "p,gain\n0.5,0.25\n1,\n"
    assert stat.S_IMODE(path.stat().st_mode) & 0o044  # readable by others, like any result file
    assert read_csv(path, required=("p", "gain"))["gain"].isna().tolist() == [False, True]


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "result.csv"
    target.write_text("old\n")

    def explode(stream):
        stream.write("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_atomic(target, explode)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["result.csv"]


def test_missing_columns_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ExperimentError, match="missing column.*gain"):
        read_csv(path, required=("a", "gain"))


def test_output_dir_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ExperimentError, match="cannot create output directory"):
        output_dir(blocker / "sub")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "input should be a valid dictionary"),
        ("{", "not valid JSON"),
        ('{"alpha": 1.0}', "beta: missing: the planner needs it"),
        ('{"alpha": -0.04, "beta": 1}', "alpha = -0.04: the planner needs a value > 0"),
        ('{"alpha": NaN, "beta": 1}', "alpha: input should be a finite number"),
        (
            '{"alpha": 1, "beta": 1, "capacity_pps": true}',
            "capacity_pps: input should be a valid number",
        ),
        (
            '{"alpha": 1, "beta": 1, "mechanisms": {"sflow": {"coefficient": "x"}}}',
            "mechanisms.sflow.coefficient: input should be a valid number",
        ),
    ],
)
def test_calibration_errors(tmp_path, text, message):
    path = tmp_path / "calibration.json"
    path.write_text(text)
    with pytest.raises(ExperimentError, match=message.replace("[", r"\[")):
        read_calibration(path)


def test_calibration_reads_the_planner_keys(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text('{"alpha": 0.2, "beta": 0.1, "capacity_pps": 5e4, "mechanisms": {}}')
    assert read_calibration(path) == {"alpha": 0.2, "beta": 0.1, "capacity_pps": 5e4}
