"""The drift analysis: the random-effects estimator on data with a known answer, and the
experiment on committed calibrations (its rows are the JSON's own numbers)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from research.costmodel_drift import calibration_rows, cross_day_rows, main, random_effects

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"


def studies(k, mean=0.4, tau=0.08, slope=0.0, seed=0):
    """``k`` calibrations: true a = mean + slope * (x - 1) + N(0, tau), reported with its se."""
    rng = np.random.default_rng(seed)
    se = rng.uniform(0.01, 0.03, k)
    x = rng.uniform(0.5, 2.0, k)
    true = mean + slope * (x - 1) + rng.normal(0, tau, k)
    return true + rng.normal(0, se), se**2, x, true


def test_known_tau_and_mean_are_recovered():
    y, v, _, _ = studies(600, tau=0.08)
    fit = random_effects(y, v)
    assert fit.tau == pytest.approx(0.08, rel=0.1)
    assert fit.coef[0] == pytest.approx(0.4, abs=0.01)
    low, high = fit.interval()
    assert low < 0.4 < high


def test_without_heterogeneity_tau_is_near_zero():
    y, v, _, _ = studies(600, tau=0.0)
    assert random_effects(y, v).tau < 0.006  # the se are 0.01-0.03: no spread beyond them


def test_intercept_only_is_the_classic_dersimonian_laird():
    y, v, _, _ = studies(12, seed=3)
    w = 1 / v
    mean_fe = w @ y / w.sum()
    q = w @ (y - mean_fe) ** 2
    classic = max(0.0, (q - 11) / (w.sum() - (w**2).sum() / w.sum()))
    assert random_effects(y, v).tau2 == pytest.approx(classic, rel=1e-9)


def test_known_slope_is_recovered_and_explains_tau():
    y, v, x, _ = studies(500, tau=0.03, slope=-0.18, seed=1)
    plain, fit = random_effects(y, v), random_effects(y, v, x)
    assert fit.coef[1] == pytest.approx(-0.18, abs=0.015)
    low, high = fit.interval(1)
    assert low < -0.18 < high
    assert fit.tau == pytest.approx(0.03, rel=0.2)
    assert 1 - fit.tau2 / plain.tau2 > 0.75  # the state explains most of the spread


def test_small_meta_analyses_keep_their_coverage():
    """Eight calibrations at a time: the pooled mean's interval and the prediction interval for
    the next calibration's true a cover about 95% (a normal interval without tau would not)."""
    draws, covered, predicted, naive = 400, 0, 0, 0
    for seed in range(draws):
        y, v, _, _ = studies(9, tau=0.06, seed=seed)
        _, _, _, next_true = studies(1, tau=0.06, seed=10_000 + seed)
        fit = random_effects(y[:8], v[:8])
        low, high = fit.interval()
        covered += low <= 0.4 <= high
        low, high = fit.prediction_interval()
        predicted += low <= next_true[0] <= high
        w = 1 / v[:8]
        fixed, half = w @ y[:8] / w.sum(), 1.96 / math.sqrt(w.sum())
        naive += fixed - half <= 0.4 <= fixed + half
    assert covered / draws >= 0.92
    assert predicted / draws >= 0.92
    assert naive / draws < 0.6  # the reported se alone is far too narrow across calibrations


def test_too_few_calibrations_are_refused():
    with pytest.raises(ValueError, match="more than 2"):
        random_effects([0.3, 0.4], [0.01, 0.01], [1.0, 2.0])


COMMITTED = [
    "cpu-sflow-6s-seed36.json",
    "cpu-sflow-old12s-seed39.json",
    "cpu-mirror_vxlan-4s-seed21.json",
]


def test_committed_calibrations_give_their_own_numbers(capsys):
    paths = [DATA / name for name in COMMITTED]
    frame, skipped = calibration_rows(paths)
    assert len(frame) == 3 and not skipped
    for path in paths:
        document = json.loads(path.read_text())
        ((mechanism, fit),) = document["mechanisms"].items()
        row = frame[frame["data"] == path.name].iloc[0]
        low, high = fit["coefficient_ci"]
        assert row["mechanism"] == mechanism
        assert row["a"] == fit["coefficient"] and row["se"] == fit["coefficient_se"]
        assert row["half_width"] == pytest.approx((high - low) / 2)
        assert row["runs"] == fit["n_blocks"]
        assert row["started"] == document["metadata"]["started"][11:16]
        assert row["extra_ns"] == pytest.approx(row["a"] * row["c0_ns"])
        assert 0 <= row["host_busy"] <= document["metadata"]["cpus"]
    assert main([str(p) for p in paths]) == 0
    out = capsys.readouterr().out
    assert (
        "| cpu-sflow-6s-seed36.json | sflow | 2026-11-25 | 10:35 | none | 12 | 0.156 | 0.015 |"
        in out
    )
    # two sFlow calibrations on one day: the spread table has them, too few for a regression
    assert "| sflow | 2026-11-25 | a | 2 |" in out


def test_bootstrap_intervals_are_skipped_by_name():
    frame, skipped = calibration_rows(
        [DATA / "cpu-sflow-morning.json", DATA / "cpu-sflow-6s-seed36.json"]
    )
    assert list(frame["data"]) == ["cpu-sflow-6s-seed36.json"]
    assert skipped == [
        "cpu-sflow-morning.json sflow: interval by residual bootstrap, "
        "1000 resamples, percentile, not cluster-robust"
    ]


def test_bad_input_is_one_error_naming_the_file(tmp_path, capsys):
    assert main([str(tmp_path / "absent.json")]) == 2
    assert "absent.json: cannot read calibration" in capsys.readouterr().err
    moved = tmp_path / "cpu.json"
    shutil.copy(DATA / "cpu-sflow-6s-seed36.json", moved)  # without its CSV
    assert main([str(moved)]) == 2
    assert "cpu-sflow-6s-seed36.csv: no such file" in capsys.readouterr().err
    broken = json.loads(moved.read_text())
    broken["mechanisms"]["sflow"]["coefficient_se"] = "small"
    moved.write_text(json.dumps(broken))
    assert main([str(moved)]) == 2
    assert "mechanisms.sflow.coefficient_se" in capsys.readouterr().err


def test_prediction_needs_three_calibrations():
    fit = random_effects([0.3, 0.4], [0.0004, 0.0004])
    assert all(map(math.isnan, fit.prediction_interval()))
    low, high = fit.interval()  # Student's t on one dof: honest, and very wide
    assert high - low > 12 * 2 * fit.se()


def test_a_state_model_fitted_on_one_day_predicts_another():
    """Two days with the same dependence on the host's state, busier on the second: the model
    of either day predicts the other far better than the day's pooled mean."""
    rng = np.random.default_rng(5)
    frames = []
    for day, (low, high) in (("d1", (0.5, 1.2)), ("d2", (1.3, 2.0))):
        busy = rng.uniform(low, high, 15)
        a = 0.6 - 0.18 * busy + rng.normal(0, 0.03, 15) + rng.normal(0, 0.005, 15)
        frames.append(
            pd.DataFrame({"mechanism": "m", "day": day, "a": a, "se": 0.005, "host_busy": busy})
        )
    first, second = cross_day_rows(pd.concat(frames, ignore_index=True), "a", "host_busy", 5)
    assert (first["train"], first["test"], first["n_test"]) == ("d1", "d2", 15)
    for row in (first, second):
        assert row["rms_state"] < row["rms_plain"] / 2
        assert row["inside_state"] >= 0.8 and row["inside_plain"] < 0.5


def test_min_runs_leaves_out_short_calibrations(capsys):
    assert (
        main([str(DATA / "cpu-sflow-first.json"), str(DATA / "cpu-sflow.json"), "--min-runs", "6"])
        == 0
    )
    out = capsys.readouterr().out
    assert "skipped: cpu-sflow-first.json sflow: 3 runs < --min-runs" in out
    assert "| cpu-sflow.json | sflow |" in out and "| cpu-sflow-first.json |" not in out
