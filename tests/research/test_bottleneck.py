"""The switch-thread refit of cpu-method calibrations (research/costmodel_bottleneck.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosample.costmodel.data import read_measurements
from cosample.experiments.errors import ExperimentError
from research.costmodel_bottleneck import inside, main, references, rows, switch_cost

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "sidebyside" / "none"
SFLOW = DATA / "sflow-default-s201.json"


def test_the_switch_cost_is_its_threads_time_per_packet_on_one_cpu():
    data = read_measurements(DATA / "sflow-default-s201.csv")
    switch = switch_cost(data)
    assert switch["cost_ns_per_packet"].to_numpy() == pytest.approx(
        (data["cpu_ovs"] * 1e9 / data["forwarded_pps"]).to_numpy()
    )
    assert (switch["budget_cpus"] == 1.0).all()
    assert switch["throughput_pps"].to_numpy() == pytest.approx(
        (1e9 / switch["cost_ns_per_packet"]).to_numpy()
    )
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


THROUGHPUT = DATA.parent / "throughput-sflow-s260.json"


def _as_mechanism(tmp_path: Path, mechanism: str, coefficient: float) -> Path:
    """The committed throughput calibration copied under ``tmp_path`` as if of ``mechanism``."""
    document = json.loads(THROUGHPUT.read_text())
    entry = document["mechanisms"].pop("sflow")
    document["mechanisms"][mechanism] = {**entry, "coefficient": coefficient}
    (tmp_path / document["metadata"]["data"]).write_text(
        (THROUGHPUT.parent / document["metadata"]["data"]).read_text()
    )
    path = tmp_path / f"throughput-{mechanism}.json"
    path.write_text(json.dumps(document))
    return path


def test_references_are_matched_by_mechanism(tmp_path):
    mirror = _as_mechanism(tmp_path, "mirror", 0.5)
    by_mechanism = references([THROUGHPUT, mirror, THROUGHPUT])
    assert sorted(by_mechanism) == ["mirror", "sflow"]
    assert [fit.coefficient for _, fit in by_mechanism["mirror"]] == [0.5]
    assert len(by_mechanism["sflow"]) == 2
    assert by_mechanism["sflow"][0][0] == THROUGHPUT.name


def test_inside_counts_the_references_in_the_interval():
    assert inside((0.1, 0.2), [0.05, 0.1, 0.15, 0.2, 0.3]) == "3 of 5"
    assert inside((0.1, 0.2), []) == "-"


def test_each_row_counts_only_its_own_mechanisms_references(tmp_path, capsys):
    """The sFlow row is compared with the sFlow reference and not with a mirror one lying
    inside its interval; a cpu-method calibration is refused as a reference."""
    (row,) = rows(SFLOW)
    mirror = _as_mechanism(tmp_path, "mirror", row["a"])
    assert main([str(SFLOW), "--throughput", str(THROUGHPUT), "--throughput", str(mirror)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("| sflow-default-s201.json"))
    reference = json.loads(THROUGHPUT.read_text())["mechanisms"]["sflow"]["coefficient"]
    low, high = row["ci_switch"]
    expected_switch = "1 of 1" if low <= reference <= high else "0 of 1"
    assert line.endswith(f"| 0 of 1 | {expected_switch} |")  # 0.335 is far above the cgroup's CI
    assert "throughput method, mirror (throughput-mirror.json)" in out
    assert main([str(SFLOW), "--throughput", str(SFLOW)]) == 2
    assert "not a throughput-method calibration" in capsys.readouterr().err
