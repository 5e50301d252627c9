"""The stopping simulation plays each rule on the same draws (synthetic runs, known noise)."""

import math

import numpy as np
import pandas as pd
import pytest

from cosample.costmodel.adaptive import Target
from research.costmodel_stopping import Rule, simulate


def runs(count=10, phases=8, a=0.3, phase_sd=0.05, seed=3):
    """Paired runs with a known effect and white phase noise (throughput = 1 / cost)."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(count):
        base = rng.normal(10, 0.2)
        for k in range(phases):
            rate = 1.0 if k % 2 == b % 2 else 0.0
            log_cost = base + math.log1p(a * rate) + rng.normal(0, phase_sd)
            rows.append(
                {"block": b, "phase": k, "rate": rate, "throughput_pps": math.exp(-log_cost)}
            )
    return pd.DataFrame(rows)


def test_rules_parse():
    assert Rule.parse("fixed", 20) == Rule("fixed", 20, 1.0)
    assert Rule.parse("6", 20) == Rule("6", 6, 1.0)
    assert Rule.parse("6:0.8", 20) == Rule("6:0.8", 6, 0.8)


@pytest.mark.parametrize("mode", ["placebo", "runs"])
def test_rules_share_draws_and_stop_in_order(mode):
    rules = [Rule.parse(text, 10) for text in ("fixed", "6", "6:0.3")]
    truth, tallies = simulate(
        runs(phase_sd=0.01), None, mode, rules, 10, 12, Target(), np.random.default_rng(0)
    )
    assert truth == pytest.approx(0.3, abs=0.03)
    fixed, early, strict = (tallies[r.name] for r in rules)
    assert fixed.draws == early.draws == strict.draws == 12
    assert fixed.early == 0 and fixed.runs == 12 * 10
    # the noise is small beside 10% of a = 0.03: the lenient rule stops at its first chance
    assert early.early == 12 and early.runs == 12 * 6 and early.met == 12
    # a stricter rule never stops sooner on the same draws
    assert early.runs <= strict.runs <= fixed.runs


def test_noise_too_large_never_stops_early():
    rules = [Rule.parse(text, 8) for text in ("fixed", "6")]
    _, tallies = simulate(
        runs(count=8, phase_sd=0.5),
        None,
        "placebo",
        rules,
        8,
        10,
        Target(),
        np.random.default_rng(1),
    )
    assert tallies["6"].early == 0 and tallies["6"].runs == tallies["fixed"].runs == 80
