"""Where each method's CPU goes, per task (research/costmodel_tasks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosample.costmodel.data import read_measurements
from cosample.experiments.errors import ExperimentError
from research.costmodel_tasks import breakdown, main, medians

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "sidebyside"
CPU = DATA / "none" / "sflow-default-s201.json"
THROUGHPUT = DATA / "throughput-sflow-s260.json"


def test_medians_are_over_phases_per_forwarded_packet():
    data = read_measurements(DATA / "none" / "sflow-default-s201.csv")
    zero = data[data["rate"] == 0]
    m = medians(zero)
    assert m["ns_ovs"] == pytest.approx((zero["cpu_ovs"] / zero["forwarded_pps"] * 1e9).median())
    assert m["cpu_counted"] == pytest.approx(zero["cpu_counted"].median())
    assert m["outside"] == pytest.approx((zero["cpu_host_busy"] - zero["cpu_counted"]).median())


def test_breakdown_needs_cpu_columns_and_both_rates():
    data = read_measurements(DATA / "throughput-sflow-s260.csv")
    s, zero, high = breakdown(data, "sflow")
    assert s == 1.0 and high["forwarded_pps"] < zero["forwarded_pps"]  # sampling slows the flood
    with pytest.raises(ExperimentError, match="here: no CPU columns \\(cpu_ovs\\)"):
        breakdown(data.drop(columns="cpu_ovs"), "sflow", "here")
    with pytest.raises(ExperimentError, match="sflow needs phases at rate 0"):
        breakdown(data[data["rate"] > 0], "sflow")


def test_the_table_says_where_a_sample_lands_and_what_the_flood_loses(capsys):
    assert main([str(CPU), str(THROUGHPUT)]) == 0
    lines = capsys.readouterr().out.splitlines()
    cpu_copy, flood_copy = (line.split(" | ") for line in lines if "per copy" in line)
    columns = lines[0].split(" | ")
    ns_ovs, ns_sender = columns.index("ovs", 9), columns.index("sender", 9)

    # sFlow's work lands in the switch's threads, not in the sender's context
    def ns(cell: str) -> float:
        return float(cell.replace(",", ""))

    assert ns(cpu_copy[ns_ovs]) > 5 * abs(ns(cpu_copy[ns_sender]))
    assert cpu_copy[-1] == "- |"  # the cpu method has no forwarded-rate coefficient
    data = read_measurements(DATA / "throughput-sflow-s260.csv")
    rate = data.groupby("rate")["forwarded_pps"].median()
    assert float(flood_copy[-1].rstrip(" |")) == pytest.approx(rate[0.0] / rate[1.0] - 1, abs=6e-4)
    assert main([str(DATA / "nothing.json")]) == 2
