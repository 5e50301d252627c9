"""The cost-law fit against data with a known answer, its diagnostics, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from cosample.costmodel.data import (
    read_measurements,
    validate_measurements,
    write_json,
    write_measurements,
)
from cosample.costmodel.errors import DataError, FitError
from cosample.costmodel.fit import CostModelFit
from cosample.costmodel.model import PAPER_COEFFICIENTS, coefficient_from_drop, simulate, throughput


def test_law_and_its_inverse():
    assert throughput(0.0, 1000.0, 1.54) == pytest.approx(1000.0)
    assert throughput(1.0, 1000.0, 1.0) == pytest.approx(500.0)
    # the paper: mirroring at 100% cut TCP throughput by about 30%, i.e. a ~ 0.46
    assert coefficient_from_drop(1.0, 1 / 1.46) == pytest.approx(0.46)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_known_coefficients_from_noisy_data(seed):
    truth = {"sflow": 0.30, "mirror": 0.12}
    data = simulate(truth, 250_000, repetitions=4, noise=0.01, seed=seed)
    model = CostModelFit(n_bootstrap=300, random_state=seed).fit(data)
    for mechanism, coefficient in truth.items():
        fit = model.results_[mechanism]
        # 1% noise on 24 points: SE of a is ~0.006; 0.03 absolute is 5 SE
        assert fit.coefficient == pytest.approx(coefficient, abs=0.03)
        assert fit.capacity_pps == pytest.approx(250_000, rel=0.02)
        low, high = fit.coefficient_ci
        assert low < fit.coefficient < high and high - low < 0.1
        assert fit.r_squared > 0.9 and fit.n_points == 24 and not fit.warnings
    assert model.alpha_ == model.results_["sflow"].coefficient
    assert model.beta_ == model.results_["mirror"].coefficient


def test_recovers_the_papers_four_coefficients():
    data = simulate(PAPER_COEFFICIENTS, 1e5, repetitions=3, noise=0.005, seed=7)
    model = CostModelFit(n_bootstrap=300).fit(data)
    for mechanism, coefficient in PAPER_COEFFICIENTS.items():
        fit = model.results_[mechanism]
        assert fit.coefficient == pytest.approx(coefficient, rel=0.03)  # within 3%
        assert fit.coefficient_ci[1] - fit.coefficient_ci[0] < 0.1 * coefficient
        assert fit.r_squared > 0.99
    # exact curves give the exact answer
    exact = simulate(PAPER_COEFFICIENTS, 1e5, repetitions=1, noise=0.0)
    model = CostModelFit(n_bootstrap=50).fit(exact)
    for mechanism, coefficient in PAPER_COEFFICIENTS.items():
        assert model.results_[mechanism].coefficient == pytest.approx(coefficient, rel=1e-6)


def test_confidence_interval_covers_truth_most_of_the_time():
    truth, hits, runs = 0.5, 0, 40
    for seed in range(runs):
        data = simulate(
            {"sflow": truth},
            1e5,
            rates=(0, 0.25, 0.5, 0.75, 1),
            repetitions=2,
            noise=0.02,
            seed=100 + seed,
        )
        low, high = (
            CostModelFit(n_bootstrap=200, random_state=seed)
            .fit(data)
            .results_["sflow"]
            .coefficient_ci
        )
        hits += low <= truth <= high
    assert hits >= 32  # nominal 95%: 38 of 40; bootstrap intervals on 10 points run a bit narrow


def test_warns_when_data_show_no_cost():
    data = simulate({"sflow": 0.0}, 1e5, repetitions=3, noise=0.02, seed=3)
    fit = CostModelFit(n_bootstrap=200).fit(data).results_["sflow"]
    text = " ".join(fit.warnings)
    assert "not distinguishable from 0" in text and "R^2" in text


def test_warns_on_non_monotone_data():
    rates = [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    pps = [100, 60, 95, 55, 90, 50]
    data = pd.DataFrame(
        {
            "mechanism": "mirror",
            "rate": np.repeat(rates, 2),
            "throughput_pps": np.repeat(pps, 2) * np.tile([0.99, 1.01], 6),
        }
    )
    fit = CostModelFit(n_bootstrap=100).fit(data).results_["mirror"]
    assert any("non-monotone" in w and "from rate 0.2 to 0.4" in w for w in fit.warnings)


def test_summary_is_json_safe_and_has_planner_keys(tmp_path):
    data = simulate({"sflow": 0.4, "mirror": 0.1, "mirror_vxlan": 0.2}, 5e4, seed=4)
    calibration = CostModelFit(n_bootstrap=100).fit(data, metadata={"host": "test"}).calibration_
    document = json.loads(json.dumps(calibration.to_dict(), allow_nan=False))
    assert document["alpha"] == pytest.approx(0.4, abs=0.05)
    assert document["beta"] == pytest.approx(0.1, abs=0.05)
    assert document["capacity_pps"] == pytest.approx(5e4, rel=0.02)
    entry = document["mechanisms"]["mirror_vxlan"]
    assert len(entry["coefficient_ci"]) == 2 and entry["n_points"] == 18
    assert "mirror" in calibration.report() and "capacity_pps" in calibration.report()
    with pytest.raises(TypeError):
        calibration.fits["sflow"] = None  # immutable
    write_json(document, tmp_path / "c.json")
    assert json.loads((tmp_path / "c.json").read_text()) == document


def test_predict_before_fit_is_a_clear_error():
    with pytest.raises(FitError, match="not fitted"):
        CostModelFit().predict("sflow", 0.5)


@pytest.mark.parametrize(
    "frame, message",
    [
        (pd.DataFrame(columns=["mechanism", "rate", "throughput_pps"]), "no measurements"),
        (
            pd.DataFrame({"mechanism": ["sflow"], "rate": [-0.1], "throughput_pps": [1.0]}),
            "rate must be >= 0",
        ),
        (
            pd.DataFrame({"mechanism": ["sflow"], "rate": [1.5], "throughput_pps": [1.0]}),
            "rate must be <= 1",
        ),
        (pd.DataFrame({"mechanism": ["sflow"], "throughput_pps": [1.0]}), "missing column 'rate'"),
        (
            pd.DataFrame({"mechanism": ["sflow"], "rate": ["x"], "throughput_pps": [1.0]}),
            "finite number",
        ),
        (
            pd.DataFrame({"mechanism": ["sflow"], "rate": [0.1], "throughput_pps": [-1.0]}),
            "throughput_pps must be >= 0",
        ),
        (
            pd.DataFrame({"mechanism": [""], "rate": [0.1], "throughput_pps": [1.0]}),
            "mechanism is empty",
        ),
    ],
)
def test_bad_data_is_rejected(frame, message):
    with pytest.raises(DataError, match=message):
        CostModelFit().fit(frame)


def test_a_stall_is_data_but_all_zeros_is_an_error():
    data = simulate({"sflow": 0.5}, 1e5, repetitions=3, noise=0.01, seed=1)
    data.loc[5, "throughput_pps"] = 0.0
    assert CostModelFit(n_bootstrap=100).fit(data).results_["sflow"].coefficient > 0
    with pytest.raises(FitError, match="every measurement is 0 pps"):
        CostModelFit().fit(data.assign(throughput_pps=0.0))


def test_too_few_points_is_a_fit_error():
    single = pd.DataFrame({"mechanism": ["sflow"], "rate": [0.5], "throughput_pps": [1e5]})
    with pytest.raises(FitError, match="'sflow': 1 measurement.*at least 3"):
        CostModelFit().fit(single)
    one_rate = pd.DataFrame({"mechanism": "sflow", "rate": [0.5] * 4, "throughput_pps": [1e5] * 4})
    with pytest.raises(FitError, match="1 distinct rate"):
        CostModelFit().fit(one_rate)


def test_mixed_protocols_are_refused():
    data = simulate({"sflow": 0.4}, 5e4, seed=4).assign(protocol=["tcp", "udp"] * 9)
    with pytest.raises(FitError, match="mix protocols tcp, udp"):
        CostModelFit().fit(data)


def test_csv_round_trip_and_line_numbers(tmp_path):
    data = simulate({"sflow": 0.4}, 5e4, seed=4)
    path = write_measurements(data, tmp_path / "m.csv")
    assert read_measurements(path)["throughput_pps"].to_numpy() == pytest.approx(
        data["throughput_pps"].to_numpy(), rel=1e-5
    )
    bad = tmp_path / "bad.csv"
    bad.write_text("mechanism,rate,throughput_pps\nsflow,0.5,100\nsflow,1.2,90\n")
    with pytest.raises(DataError, match=r"bad.csv: line 3: rate must be <= 1"):
        read_measurements(bad)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="empty file"):
        read_measurements(tmp_path / "empty.csv")
    with pytest.raises(DataError, match="no such file"):
        read_measurements(tmp_path / "absent.csv")


def test_failed_write_leaves_nothing_behind(tmp_path):
    data = simulate({"sflow": 0.4}, 5e4, seed=4)
    data.loc[3, "rate"] = math.nan
    with pytest.raises(DataError):
        write_measurements(data, tmp_path / "m.csv")
    assert list(tmp_path.iterdir()) == []
    assert validate_measurements(simulate({"x": 0.1}, 1e3, seed=1))["mechanism"].iloc[0] == "x"


def _drifting(truth, blocks=12, seed=0):
    """Each block (one run alternating rate 0 and rate s) sees its own capacity: slow drift of
    the host's background load, the dominant noise on a shared machine."""
    rng = np.random.default_rng(seed)
    rows = []
    for block in range(blocks):
        capacity = 1e5 * rng.uniform(0.4, 1.6)
        rate = [0.25, 0.5, 1.0][block % 3]
        for phase, s in enumerate([0.0, rate, 0.0, rate]):
            rows.append(
                {
                    "mechanism": "sflow",
                    "rate": s,
                    "block": block,
                    "phase": phase,
                    "throughput_pps": throughput(s, capacity, truth)
                    * (1 + 0.01 * rng.standard_normal()),
                }
            )
    return pd.DataFrame(rows)


def test_blocks_cancel_drift_that_swamps_a_plain_fit():
    data = _drifting(0.3, seed=11)
    blocked = CostModelFit(n_bootstrap=200).fit(data).results_["sflow"]  # block column: used
    assert blocked.n_blocks == 12 and blocked.coefficient == pytest.approx(0.3, abs=0.03)
    assert blocked.coefficient_ci[0] < 0.3 < blocked.coefficient_ci[1]
    assert blocked.r_squared > 0.9 and not blocked.warnings
    plain = CostModelFit(n_bootstrap=200, blocks=False).fit(data).results_["sflow"]
    assert plain.n_blocks == 1 and plain.r_squared < 0.5
    assert plain.coefficient_ci[1] - plain.coefficient_ci[0] > 5 * (
        blocked.coefficient_ci[1] - blocked.coefficient_ci[0]
    )
    with pytest.raises(FitError, match="no 'block' column"):
        CostModelFit(blocks=True).fit(data.drop(columns="block"))
