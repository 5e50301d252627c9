"""The committed tables behind docs/results/paper.md and planner.md load with the documented columns, are
reproducible by the code, and the page quotes them correctly (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cosample.experiments import bench_planner, sensitivity
from cosample.experiments.files import read_csv
from cosample.experiments.heatmap import COLUMNS, HeatmapSetup, gain_cell, summarise

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAPER = (DOCS / "results" / "paper.md").read_text()
PLANNER = (DOCS / "results" / "planner.md").read_text()


def test_heatmap_table_is_reproducible_and_quoted():
    frame = read_csv(DOCS / "data" / "gain_heatmap.csv", required=COLUMNS)
    assert set(frame["servers"]) == {10} and len(frame) == 100 * 100
    sample = frame.sample(25, random_state=0)
    setup = HeatmapSetup(servers=10, alpha=frame["alpha"].iloc[0], beta=frame["beta"].iloc[0])
    for row in sample.itertuples():
        again = gain_cell(setup, row.p, row.load)
        assert again["feasible"] == row.feasible
        if np.isnan(row.gain):
            assert np.isnan(again["gain"])
        else:
            assert again["gain"] == pytest.approx(row.gain, rel=1e-8, abs=1e-12)
    numbers = summarise(frame)
    assert f"**max gain {numbers.max_gain * 100:.1f} %**" in PAPER
    assert f"**mean gain {numbers.mean_gain * 100:.1f} %**" in PAPER


def test_sensitivity_summary_matches_its_cells():
    cells = pd.read_csv(DOCS / "data" / "sensitivity.csv")
    table = pd.read_csv(DOCS / "data" / "sensitivity_summary.csv")
    again = sensitivity.summary(cells)
    assert list(again["scenario"]) == list(table["scenario"])
    assert again["max_gain"].to_numpy() == pytest.approx(table["max_gain"].to_numpy())
    for row in table.itertuples():
        assert f"| {row.scenario} | {row.feasible_cells:,} |" in PAPER


def test_planner_scaling_table_agrees_and_is_quoted():
    table = read_csv(DOCS / "data" / "planner_scaling.csv", required=bench_planner.COLUMNS)
    checked = bench_planner.with_agreement(table[list(bench_planner.COLUMNS[:-2])])
    assert checked["agrees"].all()
    assert {"exact", "full LP (glpk)", "full LP (highs)"} <= set(table["solver_label"])
    ratio = bench_planner.speedup(table, bench_planner.REFERENCE_N)
    assert f"at n = 200: {ratio:,.0f} times faster" in PLANNER
    for name in (
        "gain_heatmap",
        "sensitivity",
        "planner_scaling",
        "costcurves_paper",
        "costcurves_tcp",
    ):
        assert (
            f"figures/{name}.png" in PAPER + PLANNER and (DOCS / "figures" / f"{name}.png").exists()
        )
