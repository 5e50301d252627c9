"""95 % intervals for renormalised sample counts (pure; see docs/collector.md, "Intervals").

An estimate ``X`` (packets in a window) with estimated variance ``V`` behaves like a Poisson
count ``c = X^2 / V`` scaled by ``w = X / V``: for a single 1-in-N stream, ``c`` is the number of
samples and ``1/w = N - 1``. The interval is Garwood's exact Poisson interval for ``c``, divided by
``w``; it stays sensible for a handful of samples, where the normal approximation does not.
With no sample, the upper bound is that of a zero count at the planned sampling intensity.
"""

from __future__ import annotations

import math

# chi2.ppf(q, 2k) / 2 == gammaincinv(k, q); scipy's, to 1e-12, without scipy's 0.2 s import
from cosample.gammaquantile import gammaincinv

Z95 = 1.959963984540054
#: Garwood's upper bound for an observed count of zero, chi2(0.975, 2) / 2.
ZERO_COUNT_UPPER = 3.6888794541139363


def packets_interval(estimate: float, variance: float, intensity: float = 0.0) -> list[float]:
    """``[low, high]`` for a non-negative count estimate with ``variance``.

    ``intensity`` (expected samples per packet, from the plan) bounds the zero-sample case.
    """
    if variance <= 0.0:
        if estimate > 0.0:
            return [estimate, estimate]  # sampled 1-in-1: exact
        return [0.0, ZERO_COUNT_UPPER / intensity if intensity > 0 else 0.0]
    scale = estimate / variance
    count = estimate * scale
    low = gammaincinv(count, 0.025) if count > 0 else 0.0
    high = gammaincinv(count + 1, 0.975)
    return [max(0.0, low / scale), high / scale]


def normal_interval(estimate: float, variance: float) -> list[float]:
    """``estimate +/- 1.96 sqrt(variance)``, clipped at 0 (bytes: sizes are not Poisson)."""
    half = Z95 * math.sqrt(max(variance, 0.0))
    return [max(0.0, estimate - half), estimate + half]


def stochastic_round(value: float, uniform: float) -> int:
    """``floor(value)`` or ``ceil(value)`` with the probability that makes it unbiased.

    ``uniform`` is a draw from [0, 1); the mean over draws is exactly ``value``.
    """
    whole = math.floor(value)
    return int(whole) + (1 if uniform < value - whole else 0)
