"""A 95 % interval for a service's success rate seen through a hash-sampled share of its
connections (pure; docs/appmon-mechanisms.md, "The success rate's interval").

What it is an interval OF: the window's success rate over *all* the service's connections
(final responses with a 2xx or 3xx status over all final responses), the finite-population
quantity an access log would give. Only the connection sampling is random, so at share 1 the
rate is counted, and the interval is the rate itself. It is not an interval for a long-run
success probability of the service.

The sampling unit is the connection (a hash of the client's port puts each connection in or out
with all its responses), so the rate seen is a ratio estimator over sampled clusters,
``R = sum(ok_i) / sum(n_i)`` over the selected connections' final responses ``n_i`` and
successful ones ``ok_i``. Its linearised variance under Bernoulli(``s``) selection is
``V = (1 - s) * sum((ok_i - R n_i)**2) / sum(n_i)**2``: the finite-population correction
``(1 - s)`` makes it vanish at share 1, and the residuals make a connection whose requests all
fail weigh as one unit, not as many independent requests (a per-request binomial interval is
several times too narrow then: tests/appmon/test_successinterval.py). The residual sum comes
from three per-window sums, ``sum(n_i**2)``, ``sum(ok_i * n_i)`` and ``sum(ok_i**2)``.

Shape: the rarer side (failures when ``R >= 1/2``) is treated as the collector treats a count
(``cosample.intervals.packets_interval``: Garwood's gamma interval of ``q**2 / V`` scaled by
``V / q``), which stays sensible with a handful of failing connections where the normal
approximation does not. The variance is estimated from the connections that carry the failures,
which may be few; Student's quantile with Satterthwaite's effective degrees of freedom
``sum(e_i**2)**2 / sum(e_i**4)`` (``e_i = ok_i - R n_i``, computed by the analyser, which has the
connections) replaces the normal one, widening the interval when a handful of connections carry
the failures (``experiments/success_coverage.py`` measures both). With nothing of the rarer
side seen (``V = 0``, or every connection seen with the same rate), the interval is Wilson's
for a sample of ``k / (1 - s)`` units, ``k`` the connections seen: each unseen connection might fail
as a whole.
"""

from __future__ import annotations

import math

from cosample.intervals import Z95, packets_interval


def degrees_of_freedom(finals) -> float | None:
    """Satterthwaite's effective degrees of freedom of the variance estimate,
    ``sum(e_i**2)**2 / sum(e_i**4)`` over the residuals ``e_i = ok_i - R n_i`` of the
    ``(n_i, ok_i)`` pairs; None when every residual is 0 (nothing to widen)."""
    pairs = list(finals)
    total = sum(n for n, _ in pairs)
    if not total:
        return None
    rate = sum(ok for _, ok in pairs) / total
    residuals = [(ok - rate * n) ** 2 for n, ok in pairs]
    squares, fourths = sum(residuals), sum(r * r for r in residuals)
    return max(1.0, squares * squares / fourths) if fourths > 0 else None


def success_interval(
    ok: int,
    final: int,
    sums: tuple[int, int, int] | None,
    connections: int,
    share: float,
    df: float | None = None,
) -> list[float] | None:
    """``[low, high]`` for the window's success rate over all connections, from ``ok`` of
    ``final`` final responses on ``connections`` connections selected at ``share``; ``sums`` is
    (``sum(n_i**2)``, ``sum(ok_i*n_i)``, ``sum(ok_i**2)``), ``df`` the variance's degrees of
    freedom (``degrees_of_freedom``; None: the normal quantile). None without final responses,
    or when ``sums`` is unknown (compact records name no connection) and ``share`` < 1."""
    if not 0 < share <= 1:
        raise ValueError(f"share: expected 0 < share <= 1, got {share!r}")
    if not 0 <= ok <= final:
        raise ValueError(f"ok: expected 0 <= ok <= final ({final}), got {ok!r}")
    if final == 0:
        return None
    rate = ok / final
    if share >= 1:
        return [rate, rate]
    if sums is None:
        return None
    squares, products, ok_squares = sums
    residuals = ok_squares - 2 * rate * products + rate * rate * squares
    if residuals <= 1e-9 * squares:  # every connection at the same rate: 0 but for rounding
        residuals = 0.0
    variance = (1 - share) * residuals / final**2
    if df is not None:  # Student's quantile in place of the normal one, as a wider variance
        variance *= (student95(df) / Z95) ** 2
    rare = min(rate, 1 - rate)
    if variance <= 0 or rare <= 0:  # every connection seen alike: Wilson, a unit each
        low, high = _wilson(rare, max(connections, 1) / (1 - share))
        low = 0.0 if rare == 0 else low  # exactly (Wilson's is 0 there, but for rounding)
    else:
        low, high = packets_interval(rare, variance)
    low, high = max(0.0, low), min(1.0, high)
    return [1 - high, 1 - low] if rate >= 0.5 else [low, high]


def _wilson(rate: float, units: float) -> tuple[float, float]:
    """Wilson's 95 % interval for ``rate`` observed on ``units`` independent units."""
    z2 = Z95**2
    centre = (rate + z2 / (2 * units)) / (1 + z2 / units)
    half = Z95 / (1 + z2 / units) * (rate * (1 - rate) / units + z2 / (4 * units**2)) ** 0.5
    return centre - half, centre + half


def student95(df: float) -> float:
    """Student's 0.975 quantile at ``floor(df)`` degrees of freedom (rounding down widens):
    exact at 1 and 2, Cornish-Fisher's expansion to 1/df**4 above (within 0.13 % at 3; the
    analyser's install set has no scipy)."""
    v = math.floor(df)
    if v < 1:
        raise ValueError(f"df: expected >= 1, got {df!r}")
    if v == 1:
        return math.tan(math.pi * 0.475)
    if v == 2:
        return 0.95 / math.sqrt(2 * 0.975 * 0.025)
    z = Z95
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )
