"""Renormalising what a hash-sampled share of connections shows (docs/planner.md,
"Application monitoring").

Under overload the plan monitors a share ``s`` of a service's connections, chosen by a hash of
the 5-tuple, so each connection is in or out with all its requests and responses: Bernoulli
sampling of connections, each with probability ``s``. Per window the analyser has, for each
sampled connection i, its requests ``n_i`` and successful responses ``k_i``. Then (Horvitz-
Thompson, the sampling unit being the connection):

* load: ``N = sum(n_i) / s``, variance estimated by ``(1 - s) / s**2 * sum(n_i**2)``;
* success rate: ``p = sum(k_i) / sum(n_i)`` (the share cancels); its interval is Fieller's: the
  rates q for which ``sum(k_i - q n_i)`` is within ``z`` standard deviations of zero, the
  variance ``(1 - s) * sum((k_i - q n_i)**2)`` taken at q itself (a quadratic in q). The plain
  linearised interval around p covered the truth 76 % of the time at 95 % nominal with share 0.1
  when failures cluster on a few connections (tests/planner/test_connshare.py).

Both are zero at ``s = 1`` (every connection seen: the window is counted, not estimated), and
connections with many requests widen the intervals as they should (the requests of one
connection come and go together). Intervals are normal, clipped to what is possible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from cosample.planner.errors import PlannerError


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


def renormalise(
    requests: np.ndarray, successes: np.ndarray, share: float, confidence: float = 0.95
) -> tuple[Estimate, Estimate]:
    """(requests in the window, success rate) from the sampled connections' counts."""
    n = np.asarray(requests, dtype=float)
    k = np.asarray(successes, dtype=float)
    if not 0 < share <= 1:
        raise PlannerError(f"share: expected 0 < share <= 1, got {share!r}")
    if n.shape != k.shape or np.any(n < 0) or np.any(k < 0) or np.any(k > n):
        raise PlannerError(
            "requests and successes: one count per connection, 0 <= successes <= requests"
        )
    z = float(norm.ppf(0.5 + confidence / 2))
    seen = float(n.sum())
    total = seen / share
    spread = z * np.sqrt((1 - share) / share**2 * float(np.sum(n**2)))
    load = Estimate(total, max(seen, total - spread), total + spread)
    if seen == 0:
        return load, Estimate(float("nan"), 0.0, 1.0)
    rate = float(k.sum()) / seen
    c = z * z * (1 - share)
    big_k = float(k.sum())
    a = seen**2 - c * float(np.sum(n * n))
    b = big_k * seen - c * float(np.sum(n * k))
    d = big_k**2 - c * float(np.sum(k * k))
    root = b * b - a * d
    if a <= 0 or root < 0:  # too few connections to bound the rate
        return load, Estimate(rate, 0.0, 1.0)
    low, high = (b - np.sqrt(root)) / a, (b + np.sqrt(root)) / a
    return load, Estimate(rate, max(0.0, min(low, rate)), min(1.0, max(high, rate)))
