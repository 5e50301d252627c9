"""A 95 % interval for a service's request count seen through a hash-sampled share of its
connections (pure; docs/appmon-mechanisms.md, "The renormalised rate's interval").

A plan that monitors a share ``s`` of a service's connections (a hash of the client's port, so
each connection is in or out with all its requests) makes the analyser see the requests of a
Bernoulli(``s``) sample of connections. The requests of one connection come and go together,
so a Poisson interval on the requests seen is not honest: with keep-alive connections carrying
tens of requests in a window it is several times too narrow (tests/appmon/test_rateinterval.py
measures how often it misses). The sampling unit is the connection: the window's total is
estimated by Horvitz-Thompson, ``X = sum(n_i) / s``, with the unbiased variance estimate
``V = (1 - s) / s**2 * sum(n_i**2)`` over the sampled connections' request counts ``n_i``
(``planner.connshare`` uses the same estimate). The interval's shape is the collector's
(``cosample.intervals.packets_interval``): ``X`` behaves like a Poisson count ``X**2 / V``
scaled by ``X / V``, and Garwood's gamma interval of that count is scaled back; it stays
sensible with a handful of connections, where the normal approximation does not. At ``s = 1``
the window is counted, not estimated: the interval is the count itself. With no request seen,
the upper bound is that of a zero count of connections at the share, one request each (the
collector's zero-sample bound; it cannot know how many requests an unseen connection carries).

What is covered is the window's requests (what an access log counts), not a long-run rate:
only the connection sampling is random here.
"""

from __future__ import annotations

from cosample.intervals import packets_interval


def request_interval(requests: int, squares: int | None, share: float) -> list[float] | None:
    """``[low, high]`` for the window's requests over all connections, from ``requests`` seen on
    a share ``share`` of connections whose counts' squares sum to ``squares``; None when the
    squares are unknown (compact records carry no connection) and ``share`` < 1."""
    if not 0 < share <= 1:
        raise ValueError(f"share: expected 0 < share <= 1, got {share!r}")
    estimate = requests / share
    if share >= 1:
        return [float(requests), float(requests)]
    if squares is None:
        return None
    variance = (1 - share) / share**2 * squares
    return packets_interval(estimate, variance, intensity=share)


def rate_interval(
    requests: int, squares: int | None, share: float, window_s: float
) -> list[float] | None:
    """``request_interval`` per second of a window ``window_s`` long."""
    counts = request_interval(requests, squares, share)
    return None if counts is None else [counts[0] / window_s, counts[1] / window_s]
