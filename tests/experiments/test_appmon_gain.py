"""The appmon-gain grid: collaboration never monitors less, shares are shares, infeasible blank."""

from __future__ import annotations

import numpy as np

from cosample.experiments.appmon_gain import gain_grid, report
from cosample.experiments.heatmap import HeatmapSetup


def test_collaboration_never_monitors_less():
    frame = gain_grid(HeatmapSetup(servers=4), [0.3, 0.7, 1.0], [0.1, 0.4, 0.9])
    ok = frame[frame["feasible"]]
    assert len(ok) > 0 and (~frame["feasible"]).any()
    assert np.all(ok["monitored_collaborative"] >= ok["monitored_onsite"] - 1e-9)
    assert np.all((ok["monitored_onsite"] >= 0) & (ok["monitored_collaborative"] <= 1 + 1e-9))
    assert np.all(ok["bound_collaborative"] >= ok["monitored_collaborative"] - 1e-9)
    assert frame.loc[~frame["feasible"], "gain"].isna().all()
    assert "feasible cells" in report(frame)


def test_one_idle_host_takes_the_analysis():
    """p small: one host carries nearly everything and cannot analyse it; the others can."""
    frame = gain_grid(HeatmapSetup(servers=4), [0.05], [0.2])
    row = frame.iloc[0]
    assert row["feasible"] and row["monitored_collaborative"] > row["monitored_onsite"]
    assert row["analysis_hosts"] >= 1


def test_the_documented_run_is_the_table():
    """docs/results/appmon.md quotes docs/data/appmon_gain.csv's headline numbers."""
    from pathlib import Path

    import pandas as pd

    docs = Path(__file__).resolve().parents[2] / "docs"
    frame = pd.read_csv(docs / "data" / "appmon_gain.csv")
    ok = frame[frame["feasible"]]
    text = (docs / "results" / "appmon.md").read_text()
    assert f"{len(ok)} feasible cells of {len(frame)}" in text
    assert f"{ok['monitored_onsite'].mean():.1%} without" in text.replace(" %", "%")
    assert f"{ok['monitored_collaborative'].mean():.1%} with" in text.replace(" %", "%")
    assert np.all(ok["monitored_collaborative"] >= ok["monitored_onsite"] - 1e-9)
    assert (docs / "figures" / "appmon_gain.png").exists()
