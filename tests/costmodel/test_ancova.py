"""The cpu method's estimator (costmodel/ancova.py): a covariate that shares the contention noise
narrows the interval without moving the estimate; one the mechanism moves is refused; the
cluster-robust interval covers the true value as often as it says. Pure: synthetic data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cosample.costmodel.ancova import (
    cluster_variance,
    covariate_shift,
    covariate_values,
    fit_contrast,
    fit_with_covariate,
)
from cosample.costmodel.errors import FitError
from cosample.costmodel.fit import CostModelFit

BUDGET = 2.0


def synthetic(
    a=0.05,
    runs=8,
    phases=40,
    common=0.10,
    own=0.03,
    run_spread=0.05,
    covariate_shift_per_rate=0.0,
    effect_spread=0.0,
    ar=0.5,
    seed=0,
) -> pd.DataFrame:
    """Paired runs (alternating rate 0 and 1, coin-tossed start) of a pipeline whose cost per
    packet is ``c0_run (1 + a s)`` times a contention factor common to all its parts (AR(1)
    within a run, like the host's) and a little noise of its own; the covariate (the receiver's
    CPU per packet) shares the contention factor and, unless told, not the rate."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in range(runs):
        first = rng.random() < 0.5
        c0 = 25e-6 * np.exp(run_spread * rng.standard_normal())
        a_run = a + effect_spread * rng.standard_normal()
        contention = 0.0
        for phase in range(phases):
            contention = ar * contention + np.sqrt(1 - ar**2) * common * rng.standard_normal()
            s = 1.0 if (phase % 2 == 0) == first else 0.0
            cost = c0 * (1 + a_run * s) * np.exp(contention + own * rng.standard_normal())
            receiver = (
                4e-6
                * (1 + covariate_shift_per_rate * s)
                * np.exp(contention + own * rng.standard_normal())
            )
            pps = 20_000 * (1 + 0.01 * rng.standard_normal())
            rows.append(
                {
                    "mechanism": "sflow",
                    "rate": s,
                    "throughput_pps": BUDGET / cost,
                    "method": "cpu",
                    "block": run,
                    "phase": phase,
                    "forwarded_pps": pps,
                    "cpu_counted": cost * pps,
                    "cpu_receiver": receiver * pps,
                    "cpu_ovs": cost * pps / 2,
                }
            )
    return pd.DataFrame(rows)


def _fit(frame, covariate):
    block = pd.factorize(frame["block"])[0]
    return fit_with_covariate(frame, block, covariate)


def test_the_covariate_recovers_a_with_a_narrower_interval():
    used, ratios = 0, []
    for seed in range(20):
        frame = synthetic(a=0.05, seed=seed)
        plain, _ = _fit(frame, None)
        adjusted, check = _fit(frame, "receiver")
        assert check.coefficient_without == pytest.approx(plain.coefficient)
        if not check.used:  # a valid covariate is refused by chance 5% of the time
            assert "refused" in check.reason
            continue
        used += 1
        assert "not distinguishable" in check.reason and 0.5 < check.gamma < 1.5
        assert adjusted.coefficient == pytest.approx(0.05, abs=0.02)
        ratios.append((adjusted.ci[1] - adjusted.ci[0]) / (plain.ci[1] - plain.ci[0]))
    assert used >= 16
    # the common noise (sd 0.10) dwarfs the own (0.03): the interval is typically half as wide (one run of 8 clusters can be unlucky)
    assert np.median(ratios) < 0.6 and np.mean(ratios) < 0.7


def test_a_covariate_the_mechanism_moves_is_detected_and_refused():
    frame = synthetic(a=0.05, covariate_shift_per_rate=0.10, seed=2)
    plain, _ = _fit(frame, None)
    fit, check = _fit(frame, "receiver")
    assert not check.used and check.reason.startswith("refused: the mechanism moves it")
    assert check.shift_ci[0] > 0  # the shift's interval excludes 0, which is why it was refused
    assert fit.coefficient == pytest.approx(plain.coefficient) and fit.ci == plain.ci
    # had it been used, a would have been biased down by about gamma * shift
    biased = fit_contrast(
        frame["rate"],
        frame["throughput_pps"],
        pd.factorize(frame["block"])[0],
        covariate_values(frame, "receiver"),
    )
    assert biased.coefficient < 0.05 - 0.04


def test_a_covariate_not_recorded_falls_back_with_a_reason():
    frame = synthetic(seed=3).drop(columns=["cpu_receiver"])
    fit, check = _fit(frame, "receiver")
    assert not check.used and "not recorded" in check.reason
    frame = synthetic(seed=3)
    frame.loc[0, "cpu_receiver"] = 0.0  # log of 0: unusable, not an error
    assert covariate_values(frame, "receiver") is None
    with pytest.raises(FitError, match="unknown covariate"):
        covariate_values(frame, "vcpu")


def test_the_cluster_interval_covers_as_often_as_it_says():
    """Coverage of the 95% interval over simulated calibrations whose noise is what the host
    showed (common contention, AR(1) 0.5 within a run, the effect varying between runs), with
    and without the covariate: within binomial noise of 95% (400 draws: sd 1.1%)."""
    hits = {None: 0, "receiver": 0}
    draws = 400
    for seed in range(draws):
        frame = synthetic(a=0.05, runs=6, phases=20, effect_spread=0.01, seed=1000 + seed)
        for covariate in hits:
            fit, _ = _fit(frame, covariate)
            hits[covariate] += fit.ci[0] <= 0.05 <= fit.ci[1]
    for covariate, count in hits.items():
        assert 0.92 <= count / draws <= 0.985, (covariate, count / draws)


def test_the_shift_of_an_untouched_covariate_is_centred_on_zero():
    frame = synthetic(seed=4)
    delta, (low, high) = covariate_shift(
        frame["rate"], covariate_values(frame, "receiver"), pd.factorize(frame["block"])[0]
    )
    assert low <= 0 <= high and abs(delta) < 0.03


def test_too_few_runs_or_one_rate_are_errors():
    frame = synthetic(runs=2)
    with pytest.raises(FitError, match="at least 3"):
        _fit(frame, None)
    frame = synthetic(runs=4)
    frame["rate"] = 1.0
    with pytest.raises(FitError, match="single rate"):
        _fit(frame, None)


def test_cost_model_fit_uses_the_cluster_interval_for_cpu_data_and_records_the_covariate():
    frame = synthetic(a=0.05, seed=5)
    frame["mechanism"] = "mirror"
    fit = CostModelFit(n_bootstrap=50).fit(frame)
    result = fit.results_["mirror"]
    assert result.ci_method.startswith("cluster-robust (CR2, Bell-McCaffrey) over 8 runs")
    assert result.covariate["used"] and result.covariate["name"] == "receiver"
    document = fit.calibration_.to_dict()
    assert document["beta"] == pytest.approx(result.coefficient)
    assert "cluster-robust" in document["ci_method"]
    assert document["mechanisms"]["mirror"]["covariate"]["shift_ci"][0] <= 0
    # the capacity is budget / c0, the mean of the runs' c0 around 25 us: about 80 kpps
    assert 70_000 < result.capacity_pps < 90_000
    off = CostModelFit(n_bootstrap=50, covariates={"mirror": None}).fit(frame).results_["mirror"]
    assert off.covariate is None and off.coefficient_ci != result.coefficient_ci
    old = CostModelFit(n_bootstrap=50, interval="cluster-cr1").fit(frame).results_["mirror"]
    assert old.ci_method.startswith("cluster-robust (CR1) over 8 runs, Student t (7 dof)")
    boot = CostModelFit(n_bootstrap=50, interval="bootstrap").fit(frame).results_["mirror"]
    assert boot.ci_method == "residual bootstrap"
    with pytest.raises(FitError, match="interval must be"):
        CostModelFit(interval="wide").fit(frame)


# CR2 / Bell-McCaffrey ---------------------------------------------------------------------
def _unbalanced_design(seed=0):
    """Four runs of unequal length whose trial rates differ (1, 0.25, 0.5, 0.25), a covariate,
    per-run baselines: the design the leverage correction is for."""
    rng = np.random.default_rng(seed)
    rates, lengths = (1.0, 0.25, 0.5, 0.25), (6, 10, 8, 6)
    block = np.repeat(np.arange(4), lengths)
    rate = np.concatenate([np.where(np.arange(n) % 2 == 0, s, 0.0) for s, n in zip(rates, lengths)])
    design = np.zeros((len(rate), 2 + 4))
    design[:, 0], design[:, 1] = rate, rng.standard_normal(len(rate))
    design[np.arange(len(rate)), 2 + block] = 1.0
    return design, block


def _residual_maker(design):
    return np.eye(len(design)) - design @ np.linalg.pinv(design.T @ design) @ design.T


def test_cr2_is_exactly_unbiased_under_iid_errors_and_cr1_is_not():
    """CR2's defining property (Bell and McCaffrey 2002): with iid errors of variance 1 its
    expectation is the true variance ``(X'X)^-1``. The variance is a quadratic form in the
    errors, so its expectation is the sum over unit errors, computed exactly here."""
    design, block = _unbalanced_design()
    truth = np.linalg.inv(design.T @ design)[0, 0]
    residual_maker = _residual_maker(design)
    expected = {
        kind: sum(
            cluster_variance(design, residual_maker[:, i], block, 4, kind)[0]
            for i in range(len(design))
        )
        for kind in ("cr1", "cr2")
    }
    assert expected["cr2"] == pytest.approx(truth, rel=1e-9)
    assert abs(expected["cr1"] / truth - 1) > 0.05  # the check can fail: CR1 misses it here


def test_cr2_with_one_observation_per_cluster_is_hc2():
    """Without run baselines and with singleton clusters CR2 is the textbook HC2:
    ``sum_i w_i^2 e_i^2 / (1 - h_ii)``."""
    rng = np.random.default_rng(1)
    design = np.column_stack([rng.standard_normal(15), np.ones(15)])
    y = 0.3 * design[:, 0] + rng.standard_normal(15) * (1 + np.abs(design[:, 0]))
    bread = np.linalg.inv(design.T @ design)
    residuals = y - design @ (bread @ design.T @ y)
    leverage = np.einsum("ij,jk,ik->i", design, bread, design)
    weights = design @ bread[:, 0]
    hc2 = float(np.sum(weights**2 * residuals**2 / (1 - leverage)))
    variance, _ = cluster_variance(design, residuals, np.arange(15), 15, "cr2")
    assert variance == pytest.approx(hc2, rel=1e-9)


def test_the_satterthwaite_dof_matches_the_simulated_distribution_of_the_variance():
    """Under iid normal errors the CR2 variance is a quadratic form; Satterthwaite's dof is
    2 E[V]^2 / Var[V]. Simulated, it must come out as the formula says (and far below B - 1 = 3
    for this unbalanced design)."""
    design, block = _unbalanced_design()
    residual_maker = _residual_maker(design)
    _, dof = cluster_variance(design, residual_maker[:, 0], block, 4, "cr2")
    rng = np.random.default_rng(2)
    draws = np.array(
        [
            cluster_variance(
                design, residual_maker @ rng.standard_normal(len(design)), block, 4, "cr2"
            )[0]
            for _ in range(6000)
        ]
    )
    simulated = 2 * draws.mean() ** 2 / draws.var()
    assert simulated == pytest.approx(dof, rel=0.12)
    assert dof < 2.5


def test_balanced_paired_runs_without_covariate_give_cr1_exactly():
    """With rates 0 and s alternating equally in every run, each run's leverage is 1/B, so CR2's
    adjustment is CR1's B/(B-1) and the Satterthwaite dof is B - 1: the default design loses
    nothing to the correction."""
    frame = synthetic(a=0.05, runs=6, phases=20, seed=7)
    block = pd.factorize(frame["block"])[0]
    cr1, _ = fit_with_covariate(frame, block, None, small_sample="cr1")
    cr2, _ = fit_with_covariate(frame, block, None, small_sample="cr2")
    assert cr2.ci == pytest.approx(cr1.ci, rel=1e-9) and cr2.dof == pytest.approx(5.0)
    assert cr2.describe().startswith("cluster-robust (CR2, Bell-McCaffrey) over 6 runs")
    with pytest.raises(FitError, match="small-sample correction"):
        fit_with_covariate(frame, block, None, small_sample="cr3")


def test_cr2_covers_where_cr1_does_not_when_the_runs_trial_rates_differ():
    """Six runs, two at rate 1 and four at 0.25 (``--rates 0,0.25,1``): the runs' leverage
    differs fourfold. CR1 with B - 1 dof then under-covers (about 88%); CR2 with the
    Satterthwaite dof does not. 400 simulated calibrations (binomial sd about 1.1%)."""
    hits = {"cr1": 0, "cr2": 0}
    for seed in range(400):
        rng = np.random.default_rng(5000 + seed)
        rate, cost, block = [], [], []
        for run, s in enumerate((1.0, 0.25, 0.25, 0.25, 1.0, 0.25)):
            first, contention = rng.random() < 0.5, 0.0
            for phase in range(20):
                contention = 0.5 * contention + np.sqrt(0.75) * 0.1 * rng.standard_normal()
                r = s if (phase % 2 == 0) == first else 0.0
                rate.append(r)
                block.append(run)
                cost.append(25e-6 * (1 + 0.3 * r) * np.exp(contention))
        for kind in hits:
            fit = fit_contrast(
                np.array(rate), BUDGET / np.array(cost), np.array(block), small_sample=kind
            )
            hits[kind] += fit.ci[0] <= 0.3 <= fit.ci[1]
    assert hits["cr2"] / 400 >= 0.93, hits
    assert hits["cr1"] / 400 <= 0.92, hits
