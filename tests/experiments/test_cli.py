"""Every ``cosample experiment`` path, run through ``cosample.cli.main`` into a temp directory."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cosample.cli import build_parser, main
from cosample.costmodel.model import PAPER_COEFFICIENTS, simulate


def test_parsing_defaults():
    args = build_parser().parse_args(["experiment", "heatmap"])
    assert (args.servers, args.grid, args.alpha, args.cross_fraction) == (10, "100", None, 0.0)
    args = build_parser().parse_args(["experiment", "sensitivity", "--other-servers", "2,7"])
    assert args.other_servers == (2, 7) and args.cross_fractions == (0.2, 0.5)
    args = build_parser().parse_args(["experiment", "scaling", "--quick", "--max-seconds", "5"])
    assert args.quick and args.max_seconds == 5.0


def test_heatmap_writes_tidy_csv_and_figure(tmp_path, capsys, real_png):
    code = main(
        [
            "experiment",
            "heatmap",
            "--servers",
            "4",
            "--grid",
            "12x10",
            "--out",
            str(tmp_path / "data"),
            "--figures",
            str(tmp_path / "figures"),
        ]
    )
    assert code == 0
    frame = pd.read_csv(tmp_path / "data" / "heatmap.csv")
    assert {"p", "load", "gain", "feasible"} <= set(frame.columns) and len(frame) == 120
    assert frame.loc[~frame["feasible"], "gain"].isna().all()  # empty fields in the CSV
    real_png(tmp_path / "figures" / "heatmap.png")
    printed = capsys.readouterr().out
    best = frame["gain"].max()
    assert f"max gain {best:.1%}" in printed and f"mean gain {frame['gain'].mean():.1%}" in printed


def test_heatmap_takes_coefficients_from_a_calibration(tmp_path, capsys):
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"alpha": 0.8, "beta": 0.2, "capacity_pps": 1e5}))
    code = main(
        [
            "experiment",
            "heatmap",
            "--grid",
            "5",
            "--calibration",
            str(calibration),
            "--beta",
            "0.3",
            "--out",
            str(tmp_path),
            "--name",
            "cal",
        ]
    )
    assert code == 0
    frame = pd.read_csv(tmp_path / "cal.csv")
    assert (frame["alpha"] == 0.8).all() and (frame["beta"] == 0.3).all()  # the flag wins
    assert "alpha=0.8, beta=0.3" in capsys.readouterr().out


def test_sensitivity_panels(tmp_path, capsys, real_png):
    first, second = tmp_path / "server-a.json", tmp_path / "server-b.json"
    first.write_text(json.dumps({"alpha": 0.17, "beta": 0.05}))
    second.write_text(json.dumps({"alpha": 0.3, "beta": 0.1, "capacity_pps": 5e4}))
    code = main(
        [
            "experiment",
            "sensitivity",
            "--grid",
            "6",
            "--servers",
            "4",
            "--other-servers",
            "2",
            "--cross-fractions",
            "0.5",
            "--calibration",
            str(first),
            "--calibration",
            str(second),
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    frame = pd.read_csv(tmp_path / "sensitivity.csv")
    table = pd.read_csv(tmp_path / "sensitivity_summary.csv")
    assert frame["scenario"].nunique() == 5 and len(table) == 5
    assert list(table["alpha"]) == [1.54, 1.54, 1.54, 0.17, 0.3]
    assert table.iloc[3]["scenario"].startswith("server-a:")
    real_png(tmp_path / "sensitivity.png")
    assert f"calibrated coefficients from {second}" in capsys.readouterr().out


def test_costcurves_from_measurements(tmp_path, capsys, real_png):
    data = tmp_path / "measurements.csv"
    simulate({"sflow": 1.54, "mirror": 0.46}, 50_000, repetitions=2, seed=3).to_csv(
        data, index=False
    )
    assert (
        main(
            [
                "experiment",
                "costcurves",
                "--data",
                str(data),
                "--bootstrap",
                "100",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    coefficients = pd.read_csv(tmp_path / "costcurves_coefficients.csv").set_index("mechanism")
    for mechanism in ("sflow", "mirror"):
        row = coefficients.loc[mechanism]
        assert row.coefficient == pytest.approx(PAPER_COEFFICIENTS[mechanism], abs=0.06)
        assert row.ci_low < row.coefficient < row.ci_high
    curves = pd.read_csv(tmp_path / "costcurves.csv")
    assert set(curves["mechanism"]) == {"sflow", "mirror"}
    real_png(tmp_path / "costcurves.png")
    assert "sflow" in capsys.readouterr().out


def test_costcurves_synthetic(tmp_path, real_png):
    assert (
        main(
            [
                "experiment",
                "costcurves",
                "--synthetic",
                "--bootstrap",
                "100",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    coefficients = pd.read_csv(tmp_path / "costcurves_coefficients.csv")
    assert set(coefficients["mechanism"]) == set(PAPER_COEFFICIENTS)
    real_png(tmp_path / "costcurves.png")


def test_scaling_quick_then_from_csv(tmp_path, capsys, real_png):
    assert main(["experiment", "scaling", "--quick", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "planner_scaling.csv")
    assert set(table["servers"]) <= {10, 20, 50} and table["agrees"].all()
    real_png(tmp_path / "planner_scaling.png")
    (tmp_path / "planner_scaling.png").unlink()
    capsys.readouterr()
    assert (
        main(
            [
                "experiment",
                "scaling",
                "--from-csv",
                str(tmp_path / "planner_scaling.csv"),
                "--markdown",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "objectives agree" in printed
    assert "| n | exact | exact (budgets) | exact (sample) | reduced LP (highs) |" in printed
    assert "| 50 | " in printed
    real_png(tmp_path / "planner_scaling.png")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["experiment", "heatmap", "--grid", "ten"], "--grid 'ten'"),
        (["experiment", "heatmap", "--servers", "0"], "servers: expected an integer >= 1"),
        (["experiment", "heatmap", "--alpha", "-1"], "alpha: must be finite and > 0"),
        (["experiment", "heatmap", "--calibration", "missing.json"], "cannot read calibration"),
        (["experiment", "costcurves", "--data", "missing.csv"], "missing.csv: no such file"),
        (["experiment", "scaling", "--from-csv", "missing.csv"], "missing.csv: no such file"),
        (["experiment", "scaling", "--quick", "--max-seconds", "0"], "--max-seconds must be > 0"),
    ],
)
def test_bad_input_one_error_exit_2_nothing_written(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results"
    assert main(argv + ["--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("cosample: error:") and message in error and error.count("\n") == 1
    assert not out.exists() or not any(out.iterdir())


def test_bad_calibration_content_names_the_key(tmp_path, capsys):
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"alpha": 1.0, "beta": "high"}))
    assert (
        main(
            [
                "experiment",
                "heatmap",
                "--calibration",
                str(calibration),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "beta: input should be a valid number (got 'high')" in capsys.readouterr().err


def test_measurements_with_bad_column_are_refused(tmp_path, capsys):
    data = tmp_path / "bad.csv"
    data.write_text("mechanism,rate\nsflow,0.5\n")
    assert (
        main(["experiment", "costcurves", "--data", str(data), "--out", str(tmp_path / "o")]) == 2
    )
    assert "throughput_pps" in capsys.readouterr().err
