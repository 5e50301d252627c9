"""The switch-thread refit of cpu-method calibrations (experiments/costmodel_bottleneck.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosample.costmodel.data import read_measurements
from cosample.experiments.costmodel_bottleneck import main, rows, switch_cost
from cosample.experiments.errors import ExperimentError

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "sidebyside" / "none"
SFLOW = DATA / "sflow-default-s201.json"


def test_the_switch_cost_is_its_threads_time_per_packet_on_one_cpu():
    data = read_measurements(DATA / "sflow-default-s201.csv")
    switch = switch_cost(data)
    assert switch["cost_ns_per_packet"].to_numpy() == pytest.approx(
        (data["cpu_ovs"] * 1e9 / data["forwarded_pps"]).to_numpy())
    assert (switch["budget_cpus"] == 1.0).all()
    assert switch["throughput_pps"].to_numpy() == pytest.approx(
        (1e9 / switch["cost_ns_per_packet"]).to_numpy())
    assert (switch["cost_ns_per_packet"] < data["cost_ns_per_packet"]).all()  # a part of the cgroup


def test_rows_without_the_switch_time_are_refused_by_row():
    data = read_measurements(DATA / "sflow-default-s201.csv")
    data.loc[3, "cpu_ovs"] = 0.0
    with pytest.raises(ExperimentError, match="here: row 5: cpu_ovs must be > 0"):
        switch_cost(data, "here")
    with pytest.raises(ExperimentError, match="no cpu_ovs column"):
        switch_cost(data.drop(columns="cpu_ovs"))


def test_sflow_weighs_more_on_the_switch_than_on_the_whole_cgroup(capsys):
    """sFlow's work lands in ovs-vswitchd, a part of the cgroup: the same extra time is a larger
    share of the switch's cost, so its coefficient must be larger there."""
    (row,) = rows(SFLOW)
    reported = json.loads(SFLOW.read_text())["mechanisms"]["sflow"]
    assert row["a"] == reported["coefficient"]
    assert row["a_switch"] > 1.5 * row["a"]
    assert row["ci_switch"][0] < row["a_switch"] < row["ci_switch"][1]
    assert main([str(SFLOW)]) == 0
    assert "| sflow-default-s201.json | sflow |" in capsys.readouterr().out
    assert main([str(DATA / "nothing.json")]) == 2
