"""research.localsample_costs: per-run costs per sample and their differences from sFlow's,
on phases with a known effect; bad input gives one clear error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cosample.experiments.errors import ExperimentError
from research.localsample_costs import main, per_run, summary

#: Extra ns per sample on the whole forwarding and on the switch's threads, by mechanism.
EFFECT = {"sflow": (1500.0, 1400.0), "sample_action": (4000.0, 3800.0), "tc_sample": (1500.0, 0.0)}


def phases(seed: int = 3, runs: int = 6, per_phase: int = 20) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    block = 0
    for mechanism, (extra, switch_extra) in EFFECT.items():
        for _ in range(runs):
            base = 13000 + rng.normal(0, 500)  # runs differ; the paired phases share it
            for phase in range(per_phase):
                rate = float(phase % 2)
                cost = base + rate * extra + rng.normal(0, 300)
                switch = 6000 + rate * switch_extra + rng.normal(0, 200)
                rows.append(
                    {
                        "mechanism": mechanism,
                        "block": block,
                        "rate": rate,
                        "cost_ns_per_packet": cost,
                        "forwarded_pps": 20000.0,
                        "sent_pps": 20000.0,
                        "duration_s": 0.08,
                        "cpu_ovs": switch * 20000.0 / 1e9,
                        "copies_pps": 20000.0 * rate * (1 + rng.normal(0, 0.01)),
                    }
                )
            block += 1
    return pd.DataFrame(rows)


def test_known_costs_per_sample_are_recovered_with_their_differences_from_sflow():
    table = summary(per_run(phases())).set_index("mechanism")
    for mechanism, (extra, switch_extra) in EFFECT.items():
        row = table.loc[mechanism]
        # within 4 standard errors of a run's mean (phase noise 300 and 200 ns, 10 + 10 phases)
        assert row["sample_ns"] == pytest.approx(extra, abs=4 * 300 * (2 / 10 / 6) ** 0.5)
        assert row["sample_switch_ns"] == pytest.approx(switch_extra, abs=4 * 200 * (2 / 60) ** 0.5)
        assert row["sample_ns_lo"] < row["sample_ns"] < row["sample_ns_hi"]
        assert row["sampled"] == pytest.approx(1.0, abs=0.02)
    action = table.loc["sample_action"]
    assert action["sample_ns_vs_sflow_lo"] > 0  # dearer than sFlow, and the interval says so
    tc = table.loc["tc_sample"]
    assert tc["sample_ns_vs_sflow_lo"] < 0 < tc["sample_ns_vs_sflow_hi"]  # no difference
    assert tc["sample_switch_ns_vs_sflow_hi"] < 0  # the tc copy spares the switch's thread
    assert table.loc["sflow"]["a"] == pytest.approx(1500 / 13000, rel=0.1)


def test_exported_records_are_counted_over_the_whole_run_per_sample():
    frame = phases()
    cached = frame[frame["mechanism"] == "sample_action"].assign(mechanism="sample_action_cached")
    # a cache: 1,000 records a second arrive in every phase, also while not sampling
    cached = cached.assign(copies_pps=1000.0)
    runs = per_run(pd.concat([frame, cached])).set_index(["mechanism", "block"])
    rows = runs.loc["sample_action_cached"]
    # 20 phases of 1,000/s over 10 sampling phases of 20,000 samples/s
    assert rows["exported_per_sample"].to_numpy() == pytest.approx(0.1)
    assert rows["exported_per_s"].to_numpy() == pytest.approx(2000.0)
    assert runs.loc["sample_action"]["exported_per_sample"].to_numpy() == pytest.approx(1, abs=0.02)
    table = summary(per_run(frame.drop(columns=["sent_pps"]))).set_index("mechanism")
    assert table["exported_per_sample"].isna().all()  # not known without the sender's count


def cached_phases(
    seed: int = 5,
    runs: int = 6,
    per_phase: int = 120,
    update_ns: float = 400.0,
    record_ns: float = 4000.0,
    records_pps: float = 2000.0,
) -> pd.DataFrame:
    """A cache whose records leave a second after their samples: their number in a phase does
    not follow the phase's rate, and each costs ``record_ns`` of CPU in the phase it leaves in."""
    rng = np.random.default_rng(seed)
    rows = []
    for block in range(runs):
        base = 13000 + rng.normal(0, 500)
        for phase in range(per_phase):
            rate = float(phase % 2)
            records = max(0.0, rng.normal(records_pps, records_pps / 2))  # bursts
            cost = base + rate * update_ns + records / 20000.0 * record_ns + rng.normal(0, 150)
            rows.append(
                {
                    "mechanism": "sample_action_cached",
                    "block": block,
                    "rate": rate,
                    "cost_ns_per_packet": cost,
                    "forwarded_pps": 20000.0,
                    "sent_pps": 20000.0,
                    "duration_s": 0.08,
                    "cpu_ovs": 0.1,
                    "copies_pps": records,
                }
            )
    return pd.DataFrame(rows)


def test_records_exported_later_are_charged_to_the_samples_that_made_them():
    # 2,000 records a second over 10,000 samples a second (sampling half the time): 0.2 each
    table = summary(per_run(cached_phases())).set_index("mechanism")
    row = table.loc["sample_action_cached"]
    assert row["sample_ns"] == pytest.approx(400, abs=100)  # the paired difference misses them
    assert row["exported_per_sample"] == pytest.approx(0.2, rel=0.05)
    assert row["record_ns"] == pytest.approx(4000, rel=0.15)
    assert row["sample_records_ns"] == pytest.approx(400 + 0.2 * 4000, rel=0.15)
    assert row["sample_records_ns_lo"] < row["sample_records_ns"] < row["sample_records_ns_hi"]
    plain = summary(per_run(phases())).set_index("mechanism")  # records are the samples:
    assert plain["record_ns"].isna().all()  # no cost of their own to tell apart
    assert (plain["sample_records_ns"] == plain["sample_ns"]).all()


def test_the_cli_prints_one_row_per_mechanism(tmp_path, capsys):
    path = tmp_path / "phases.csv"
    phases().to_csv(path, index=False)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith(f"| {m} |") for line in out.splitlines() for m in EFFECT) == 3


def test_a_calibration_without_cpu_columns_is_refused(tmp_path, capsys):
    frame = phases().drop(columns=["cpu_ovs"])
    with pytest.raises(ExperimentError, match="cpu_ovs"):
        per_run(frame)
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    assert main([str(path)]) == 2
    assert "cpu_ovs" in capsys.readouterr().err
