"""The run-length analysis splits the per-run spread into its parts (synthetic, known parts)."""

import math

import numpy as np
import pandas as pd
import pytest

from research.costmodel_runlength import components, predicted_half_width, run_cost


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
            rows.append(
                {
                    "block": b,
                    "phase": k,
                    "rate": 1.0 if on else 0.0,
                    "cost_ns_per_packet": math.exp(log_cost),
                }
            )
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
    # only within-run noise: the time counted, not the split, decides
    _, long_runs = predicted_half_width(0.0, 0.05**2 * 12, *run_cost(12, 40, 0.0, 0.0, 0.0), 120)
    _, short_runs = predicted_half_width(0.0, 0.05**2 * 12, *run_cost(4, 14, 0.0, 0.0, 0.0), 120)
    assert short_runs < long_runs  # more runs, a smaller t quantile
    # a big overhead per run makes short runs worse
    _, short_costly = predicted_half_width(0.0, 0.05**2 * 12, *run_cost(2, 8, 0.0, 6.0, 0.0), 120)
    assert short_costly > long_runs
    assert predicted_half_width(0.0, 0.01, *run_cost(50, 40, 0.0, 0.0, 0.0), 120)[1] == math.inf


def test_per_phase_costs_favour_fewer_phases():
    """Switching and reading cost time in every phase; the guard is not counted."""
    counted, wall = run_cost(12, 40, 0.05, 0.4, 0.05)
    assert counted == pytest.approx(10.0) and wall == pytest.approx(14.4)
    between, within = 0.02**2, 0.03**2 * 10
    many = predicted_half_width(between, within, *run_cost(12, 40, 0.05, 0.4, 0.05), 116)
    few = predicted_half_width(between, within, *run_cost(12, 20, 0.05, 0.4, 0.05), 116)
    assert few[0] >= many[0] and few[1] < many[1]  # more counted, as many runs or more


def test_lag1_sees_a_drifting_effect():
    drifting = synthetic(runs=60, between=0.0)
    drift = np.repeat(np.linspace(-0.3, 0.3, 60), 20)  # the effect's log grows over the runs
    on = drifting["rate"].to_numpy() > 0
    drifting["cost_ns_per_packet"] *= np.exp(np.where(on, drift, 0.0))
    assert components(drifting)["lag1"] > 0.5
    assert abs(components(synthetic(runs=60))["lag1"]) < 0.35
