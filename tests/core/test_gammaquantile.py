"""The collector's own gamma quantile against scipy's (the library it replaces on the intervals'
path): any shape from 1e-3 to 1e12, the 2.5 % tails the intervals ask for and any other level."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.special import gammainc, gammaincc
from scipy.special import gammaincinv as scipy_gammaincinv

from cosample.gammaquantile import TEMME_MIN_A, _classic, _temme, gammaincinv
from cosample.intervals import ZERO_COUNT_UPPER, packets_interval

RELATIVE = 1e-9
shapes = st.floats(min_value=-3.0, max_value=12.0).map(lambda e: 10.0**e)


def close(mine: float, theirs: float) -> bool:
    if theirs < 1e-290:  # subnormal or zero: both underflow
        return mine < 1e-290
    return abs(mine - theirs) <= RELATIVE * theirs


@settings(max_examples=400, deadline=None)
@given(shapes, st.sampled_from([0.025, 0.975]))
def test_the_interval_tails_match_scipy_at_any_shape(a, q):
    assert close(gammaincinv(a, q), float(scipy_gammaincinv(a, q)))


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=-3.0, max_value=5.0).map(lambda e: 10.0**e),
    st.floats(min_value=1e-6, max_value=1 - 1e-6),
)
def test_any_level_matches_scipy(a, q):
    assert close(gammaincinv(a, q), float(scipy_gammaincinv(a, q)))


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=TEMME_MIN_A, max_value=1e7), st.floats(min_value=-8.0, max_value=8.0))
def test_the_uniform_expansion_agrees_with_the_series_and_the_fraction(a, z):
    """Two independent ways to P and Q where the expansion is used (large shapes, away from
    the middle); and scipy's where scipy is exact (out to 3 standard deviations: beyond, at
    a ~ 1e6, scipy's own tail is off by 4e-6 relative while these two agree to 1e-14)."""
    x = a + z * math.sqrt(a)
    assume(x > 0.0)
    expansion = _temme(a, x)
    assume(expansion is not None)
    lower, upper, density = expansion
    series = _classic(a, x)
    for mine, exact in zip((lower, upper, density), series):
        assert abs(mine - exact) <= 1e-300 + 1e-12 * exact
    if abs(z) <= 3.0:
        assert abs(lower - gammainc(a, x)) <= 1e-11 * gammainc(a, x)
        assert abs(upper - gammaincc(a, x)) <= 1e-11 * gammaincc(a, x)


def test_bad_arguments_are_refused():
    for a, q in ((0.0, 0.5), (-1.0, 0.5), (1.0, 0.0), (1.0, 1.0), (math.nan, 0.5)):
        with pytest.raises(ValueError, match="gammaincinv needs"):
            gammaincinv(a, q)


@pytest.mark.parametrize(
    "estimate, variance", [(5.0, 5.0), (300.0, 30_000.0), (2.5e6, 1.6e8), (0.3, 0.9), (1e11, 1e12)]
)
def test_packets_interval_is_garwoods_from_scipy(estimate, variance):
    scale = estimate / variance
    count = estimate * scale
    low, high = packets_interval(estimate, variance)
    assert close(low, float(scipy_gammaincinv(count, 0.025)) / scale)
    assert close(high, float(scipy_gammaincinv(count + 1, 0.975)) / scale)


def test_the_zero_count_bound_is_chi_square_of_two_degrees():
    assert close(ZERO_COUNT_UPPER, gammaincinv(1.0, 0.975))
