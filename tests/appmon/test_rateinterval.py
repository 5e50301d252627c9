"""The renormalised request count's interval (``appmon.rateinterval``): exact at share 1, and on
simulated hash-sampled connections its 95 % interval covers the window's true requests about
95 % of the time, where a Poisson interval on the requests seen does not (keep-alive
connections carry their requests together). Populations and seeds come from hypothesis; each
example is a seeded simulation of many windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon.rateinterval import rate_interval, request_interval
from cosample.intervals import packets_interval

TRIALS = 400


def population(rng, connections: int, mean_requests: float) -> np.ndarray:
    """Requests per connection in one window: geometric (keep-alive), a few heavy ones."""
    requests = rng.geometric(1 / mean_requests, connections)
    heavy = rng.random(connections) < 0.05
    return np.where(heavy, requests * 5, requests)


def coverage(requests: np.ndarray, share: float, rng, poisson: bool = False) -> float:
    truth = int(requests.sum())
    covered = 0
    for _ in range(TRIALS):
        kept = requests[rng.random(requests.size) < share]
        seen, squares = int(kept.sum()), int((kept**2).sum())
        if poisson:  # the naive choice: the requests seen as a Poisson count, scaled
            low, high = packets_interval(seen / share, seen / share**2, share)
        else:
            low, high = request_interval(seen, squares, share)
        covered += low <= truth <= high
    return covered / TRIALS


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    connections=st.integers(500, 2000),
    mean_requests=st.floats(1.0, 40.0),
    share=st.sampled_from([0.1, 0.25, 0.5, 0.9]),
)
def test_the_interval_covers_the_windows_requests(seed, connections, mean_requests, share):
    """From 50 connections seen on; with 30 (300 at share 0.1) it read 0.92-0.93."""
    rng = np.random.default_rng(seed)
    requests = population(rng, connections, mean_requests)
    # 400 trials: a true 95 % coverage reads below 0.915 with probability under 1e-3
    assert 0.915 <= coverage(requests, share, rng) <= 0.985


@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), mean_requests=st.floats(15.0, 40.0))
def test_a_poisson_interval_on_requests_is_too_narrow(seed, mean_requests):
    """Why the interval is connection-level (docs/appmon-mechanisms.md)."""
    rng = np.random.default_rng(seed)
    requests = population(rng, 1000, mean_requests)
    assert coverage(requests, 0.25, rng, poisson=True) < 0.6


@given(requests=st.integers(0, 10**6))
def test_share_one_is_a_count(requests):
    assert request_interval(requests, None, 1.0) == [requests, requests]
    assert rate_interval(requests, None, 1.0, 10.0) == [requests / 10, requests / 10]


def test_nothing_seen_and_unknown_connections():
    low, high = request_interval(0, 0, 0.25)
    assert low == 0 and high == pytest.approx(3.6888794541139363 / 0.25)
    assert request_interval(40, None, 0.5) is None  # compact records: no connections
    with pytest.raises(ValueError, match="share"):
        request_interval(1, 1, 0.0)
