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
(``collector.intervals.packets_interval``: Garwood's gamma interval of ``q**2 / V`` scaled by
``V / q``), which stays sensible with a handful of failing connections where the normal
approximation does not (simulated in the docs). With nothing of the rarer side seen
(``V = 0``, or every connection seen with the same rate), the interval is Wilson's for a sample of ``k / (1 - s)`` units, ``k`` the
connections seen: each unseen connection might fail as a whole.
"""

from __future__ import annotations

from cosample.collector.intervals import Z95, packets_interval


def success_interval(ok: int, final: int, sums: tuple[int, int, int] | None, connections: int,
                     share: float) -> list[float] | None:
    """``[low, high]`` for the window's success rate over all connections, from ``ok`` of
    ``final`` final responses on ``connections`` connections selected at ``share``; ``sums`` is
    (``sum(n_i**2)``, ``sum(ok_i*n_i)``, ``sum(ok_i**2)``). None without final responses, or
    when ``sums`` is unknown (compact records name no connection) and ``share`` < 1."""
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
    residuals = max(0.0, ok_squares - 2 * rate * products + rate * rate * squares)
    variance = (1 - share) * residuals / final**2
    rare = min(rate, 1 - rate)
    if variance <= 0 or rare <= 0:  # every connection seen alike: Wilson, a unit each
        low, high = _wilson(rare, max(connections, 1) / (1 - share))
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
