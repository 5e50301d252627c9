"""The run-length analysis splits the per-run spread into its parts (synthetic, known parts)."""

import math

import numpy as np
import pandas as pd
import pytest

from cosample.experiments.costmodel_runlength import components, predicted_half_width


def synthetic(runs=400, phases=20, a=0.4, between=0.05, phase_sd=0.10, seed=1):
    """Paired runs: log cost = run baseline + log(1 + a_b) when on + phase noise, a_b varying
    between runs with sd ``between``."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(runs):
        a_b = a + rng.normal(0, between)
        base = rng.normal(10, 0.2)
        for k in range(phases):
            on = k % 2 == b % 2
            log_cost = base + (math.log1p(a_b) if on else 0.0) + rng.normal(0, phase_sd)
            rows.append({"block": b, "phase": k, "rate": 1.0 if on else 0.0,
                         "cost_ns_per_packet": math.exp(log_cost)})
    return pd.DataFrame(rows)


def test_components_recover_between_and_within():
    c = components(synthetic())
    # within: a run's estimate from 10 on and 10 off phases of sd 0.1 (times 1 + a on the ratio)
    expected_within = 1.4 * 0.10 * math.sqrt(2 / 10)
    assert c["within_sd"] == pytest.approx(expected_within, rel=0.15)
    assert c["between_sd"] == pytest.approx(0.05, rel=0.25)
    assert c["a"] == pytest.approx(0.4, abs=0.01)


def test_without_between_spread_the_between_part_is_small():
    c = components(synthetic(between=0.0))
    assert c["between_sd"] < 0.02


def test_prediction_trades_runs_for_noise():
    # only within-run noise: the time, not the split, decides (longer runs lose only to overhead)
    _, long_runs = predicted_half_width(0.0, 0.05 ** 2, 12, 12, 0.0, 120)
    _, short_runs = predicted_half_width(0.0, 0.05 ** 2, 12, 4, 0.0, 120)
    assert short_runs < long_runs
    # a big overhead makes short runs worse
    _, short_costly = predicted_half_width(0.0, 0.05 ** 2, 12, 2, 6.0, 120)
    assert short_costly > long_runs
    assert predicted_half_width(0.0, 0.01, 12, 50, 0.0, 120)[1] == math.inf
