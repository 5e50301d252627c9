"""The success rate's interval (``appmon.successinterval``): exact at share 1, and on simulated
hash-sampled connections its 95 % interval covers the window's true success rate (over all
connections) about 95 % of the time, also when failures are clustered (some connections with
every request failing), where a per-request binomial interval does not. Populations and seeds
come from hypothesis; each example is a seeded simulation of many windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosample.appmon.successinterval import Z95, degrees_of_freedom, student95, success_interval

TRIALS = 400


def population(
    rng, connections: int, mean_requests: float, fail: float, broken: float
) -> tuple[np.ndarray, np.ndarray]:
    """Final responses per connection in one window (geometric, keep-alive, 5 % heavy) and the
    successful ones: each fails independently with ``fail``, and a share ``broken`` of the
    connections fails every request (a bad backend, a client that always errs)."""
    final = rng.geometric(1 / mean_requests, connections)
    final = np.where(rng.random(connections) < 0.05, final * 5, final)
    ok = rng.binomial(final, 1 - fail)
    return final, np.where(rng.random(connections) < broken, 0, ok)


def binomial_interval(ok: int, final: int, share: float) -> list[float]:
    """The naive choice: Wilson on the final responses seen, as independent requests, with the
    finite-population correction."""
    units, rate, z2 = final / (1 - share), ok / final, Z95**2
    centre = (rate + z2 / (2 * units)) / (1 + z2 / units)
    half = Z95 / (1 + z2 / units) * (rate * (1 - rate) / units + z2 / (4 * units**2)) ** 0.5
    return [centre - half, centre + half]


def coverage(
    final: np.ndarray,
    ok: np.ndarray,
    share: float,
    rng,
    binomial: bool = False,
    trials: int = TRIALS,
) -> float:
    truth = ok.sum() / final.sum()
    covered = 0
    for _ in range(trials):
        kept = rng.random(final.size) < share
        n, k = final[kept], ok[kept]
        if not n.sum():
            continue  # no final response seen: no interval (counts as a miss below)
        if binomial:
            low, high = binomial_interval(int(k.sum()), int(n.sum()), share)
        else:
            sums = (int((n * n).sum()), int((k * n).sum()), int((k * k).sum()))
            low, high = success_interval(
                int(k.sum()),
                int(n.sum()),
                sums,
                int(kept.sum()),
                share,
                degrees_of_freedom(zip(n.tolist(), k.tolist())),
            )
        covered += low <= truth <= high
    return covered / trials


#: Populations per example of the coverage test, each sampled TRIALS / POPULATIONS times.
POPULATIONS = 16


def mixed_coverage(seed, connections, mean_requests, fail, broken, share) -> float:
    """Coverage over ``POPULATIONS`` populations drawn with these parameters, as the windows of
    a service whose connections the parameters describe."""
    rng = np.random.default_rng(seed)
    covered = 0.0
    for _ in range(POPULATIONS):
        final, ok = population(rng, connections, mean_requests, fail, broken)
        covered += coverage(final, ok, share, rng, trials=TRIALS // POPULATIONS)
    return covered / POPULATIONS


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    connections=st.integers(1000, 3000),
    mean_requests=st.floats(1.0, 40.0),
    fail=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    broken=st.sampled_from([0.05, 0.1, 0.3]),
    share=st.sampled_from([0.25, 0.5, 0.9]),
)
@example(seed=149, connections=1122, mean_requests=2.0, fail=0.0, broken=0.05, share=0.25)
def test_the_interval_covers_the_windows_success_rate(
    seed, connections, mean_requests, fail, broken, share
):
    """Over populations drawn with each example's parameters (16 populations, 25 windows each),
    measured on 480 points of the domain (1,500 connections, six seeds): 0.91-0.99, and 0.90 at
    least in the weak spot docs/appmon-mechanisms.md states (independent failures of 5-20 % of
    the requests beside 5 % broken connections). One population alone is not enough: its few
    heavy broken connections decide the estimator's skew, and single populations read
    0.85-0.87 now and then outside the weak spot too (seed 149, 1,122 connections of 2
    requests, 5 % broken, share 0.25: 0.865, drawn in a parallel run, whose loaded modules
    change Hypothesis' constants); research/success_coverage.py measures single populations.

    Only a lower bound is asserted, below the measured minimum by about two standard errors of
    the sampling (a broken interval reads far lower: the per-request binomial's median is
    0.39, the next test but one); that the interval is not needlessly wide is the next test's.
    """
    weak_spot = fail >= 0.05 and broken == 0.05
    covered = mixed_coverage(seed, connections, mean_requests, fail, broken, share)
    assert covered >= (0.85 if weak_spot else 0.88)


@pytest.mark.parametrize(
    "seed,mean_requests,fail,broken,share",
    [(1, 5.0, 0.05, 0.1, 0.5), (2, 15.0, 0.01, 0.05, 0.25), (3, 2.0, 0.2, 0.3, 0.9)],
)
def test_the_interval_is_not_needlessly_wide(seed, mean_requests, fail, broken, share):
    """On populations where requests fail both at random and by connection, a 95 % interval
    misses now and then: 400 trials of a true 95 % coverage read above 0.99 with probability
    under 1e-4. These three read 0.94-0.97; an interval twice as wide reads 1.0 on each."""
    rng = np.random.default_rng(seed)
    final, ok = population(rng, 2000, mean_requests, fail, broken)
    assert 0.9 <= coverage(final, ok, share, rng) <= 0.99


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    mean_requests=st.floats(15.0, 40.0),
    broken=st.sampled_from([0.05, 0.1]),
)
def test_a_binomial_interval_on_requests_is_too_narrow_for_clustered_failures(
    seed, mean_requests, broken
):
    """Why the interval is connection-level (docs/appmon-mechanisms.md): whole connections
    failing make the rate seen vary far more than independent requests would."""
    rng = np.random.default_rng(seed)
    final, ok = population(rng, 3000, mean_requests, 0.0, broken)
    assert coverage(final, ok, 0.25, rng, binomial=True) < 0.6
    assert coverage(final, ok, 0.25, rng) >= 0.9  # as above


@given(ok=st.integers(0, 10**4), failed=st.integers(0, 10**4))
def test_share_one_is_the_rate(ok, failed):
    expected = None if ok + failed == 0 else [ok / (ok + failed)] * 2
    assert success_interval(ok, ok + failed, None, 1, 1.0) == expected


@settings(deadline=None)
@given(ok=st.integers(0, 200), failed=st.integers(0, 200), share=st.floats(0.01, 0.99))
def test_the_interval_holds_the_rate_seen(ok, failed, share):
    """Any per-connection split: here every request its own connection."""
    final = ok + failed
    if final == 0:
        assert success_interval(0, 0, (0, 0, 0), 0, share) is None
        return
    low, high = success_interval(ok, final, (final, ok, ok), final, share)
    assert 0 <= low <= ok / final <= high <= 1
    assert low < high  # a share below 1 always leaves something unseen


def test_nothing_failed_seen_and_unknown_connections():
    # 40 connections seen at share 0.5, all successful: Wilson on 80 units
    low, high = success_interval(400, 400, (4000, 4000, 4000), 40, 0.5)
    assert high == 1 and low == pytest.approx(80 / (80 + Z95**2))
    assert success_interval(40, 50, None, 0, 0.5) is None  # compact records: no connections
    with pytest.raises(ValueError, match="share"):
        success_interval(1, 1, (1, 1, 1), 1, 0.0)
    with pytest.raises(ValueError, match="ok"):
        success_interval(2, 1, (1, 1, 1), 1, 0.5)


@settings(deadline=None)  # scipy's first import
@given(df=st.floats(1.0, 1e6))
def test_student_quantile_without_scipy(df):
    from scipy.stats import t

    expected = t.ppf(0.975, int(df))
    assert student95(df) == pytest.approx(expected, rel=1.3e-3)
    assert student95(df) >= t.ppf(0.975, df) * (1 - 1.3e-3)  # floor: never narrower


def test_degrees_of_freedom_count_the_connections_that_carry_the_variance():
    spread = [(10, 9)] * 10 + [(10, 10)] * 20  # one failure on each of 10 connections
    clustered = [(10, 0)] + [(10, 10)] * 29  # all 10 failures on one connection
    assert degrees_of_freedom(spread) > 15 * degrees_of_freedom(clustered)
    assert degrees_of_freedom(clustered) == pytest.approx(1.0, abs=0.1)
    assert degrees_of_freedom([(10, 10)] * 5) is None and degrees_of_freedom([]) is None


def test_connections_all_at_one_rate_are_not_read_as_exact():
    """Three connections of 10 with 9 successes each: the residuals are 0 (but for rounding),
    yet the unseen connections may differ: Wilson on 3 / (1 - s) units, not a point."""
    low, high = success_interval(27, 30, (300, 270, 243), 3, 0.5)
    assert low < 0.6 and 0.9 < high < 1
