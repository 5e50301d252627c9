"""From a continuous plan to what switches do: sFlow's 1-in-N, the capacity it frees, what it collects.

sFlow samples 1 in N packets, N an integer, so a local rate r becomes N = ceil(1/r) and the
applied rate 1/N <= r: rounding never exceeds a capacity. The sender's capacity freed by rounding
down is not simply lost: the sender mirrors the coverage it lost, ``(r - 1/N) * U``, through the
pairs it already has (no new tunnels), as far as those receivers have room left within their
planned capacity. Mirroring costs the sender beta < alpha, so its own constraint still holds, and
it adds at most the samples the rounding removed. What cannot be placed is reported as headroom.

What the applied plan collects, given how the data plane draws: a bridge's sFlow and the tc
mirror chain pick packets independently, so a sender with applied local share l and mirrored
share m collects ``U (l + m - l m)`` distinct own packets (the overlap ``U l m`` is sampled
twice). A bridge that also takes inbound tenant traffic samples it at its rate: those samples
are packets of other servers' flows, new with probability ``1 - c`` (c: the source's coverage).
Pure functions over arrays.
"""

from __future__ import annotations

import numpy as np

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.planner.applied import Realised
from cosample.planner.problem import Problem, distinct_pps

#: LP solvers return rates a few ulps below a round 1/N; this much relative slack maps them to N.
RATE_TOLERANCE = 1e-9
#: sFlow's sampling rate is a 32-bit field; a rate below 1/MAX_INTERVAL is no sampling at all.
MAX_INTERVAL = 2**32 - 1


def sampling_interval(rate: np.ndarray) -> np.ndarray:
    """Smallest integer N with 1/N <= rate (within RATE_TOLERANCE); 0 (off) where none fits."""
    rate = np.clip(rate, 0.0, 1.0)
    with np.errstate(divide="ignore"):
        interval = np.ceil((1.0 - RATE_TOLERANCE) / rate)
    interval[(rate <= 0) | (interval > MAX_INTERVAL)] = 0
    return interval.astype(np.int64)


def predicted_load(
    problem: Problem,
    rate: np.ndarray,
    mirror_src: np.ndarray,
    mirror_dst: np.ndarray,
    mirror_pps: np.ndarray,
    sample_hosts: np.ndarray | None = None,
) -> np.ndarray:
    """Each server's cost in pps units: forwarding + sampling its bridge + mirroring + taking in
    copies (beta each) and sampling them at its rate (``sample_hosts`` sample at
    ``alpha_sample`` per sample)."""
    n = problem.size
    out = np.bincount(mirror_src, weights=mirror_pps, minlength=n)
    received = np.bincount(mirror_dst, weights=mirror_pps, minlength=n)
    if sample_hosts is None:
        alpha = problem.alpha
    else:
        assert problem.alpha_sample is not None  # (no host samples without its cost)
        alpha = np.where(sample_hosts, problem.alpha_sample, problem.alpha)
    return (
        problem.forwarding_pps
        + alpha * rate * problem.bridge_pps
        + problem.beta * out
        + (problem.alpha * rate + problem.beta) * received
    )


def realise(solution) -> Realised:
    """Round ``solution``'s local rates to 1-in-N, spend the freed capacity on existing pairs,
    count packets (``solution.Solution.applied`` calls it; this module is below that one).

    In a continuous plan servers that receive sample 1-in-1, so that every mirrored packet they
    take is sampled; a solution with applied rates (``Solution.rates``) keeps them, its
    receivers sampling copies at their own rate (nothing to round, nothing freed).
    Servers the solution has sample by the sample action (``Solution.sample_hosts``) take
    K = floor(65535 r) instead: K/65535 <= r, never over capacity either.
    """
    problem = solution.problem
    own = problem.own_pps
    with np.errstate(divide="ignore", invalid="ignore"):
        planned = np.where(own > 0, solution.local_pps / own, 0.0)
    planned = np.clip(planned, 0.0, 1.0)
    received = solution.received_pps
    chosen = solution.rates is not None
    rate = solution.rates if chosen else np.where(received > 0, 1.0, planned)
    rate = np.where(rate * MAX_INTERVAL < 1.0, 0.0, rate)  # below sFlow's range: exactly off
    planned = np.where(planned * MAX_INTERVAL < 1.0, 0.0, planned)
    interval = sampling_interval(rate)
    applied = np.where(interval > 0, 1.0 / np.maximum(interval, 1), 0.0)
    sample = solution.sample_hosts
    probability = None
    if sample is not None:
        sample = sample & (received <= 0)  # a receiver samples with sFlow
        probability = np.where(sample, sample_probability(planned), 0)
        interval = np.where(sample, 0, interval)
        applied = np.where(sample, probability / SAMPLE_PROBABILITY_SCALE, applied)
        sample = sample & (probability > 0)
    local_pps = own * applied
    mirror_pps = solution.mirror_pps.astype(float).copy()
    src, dst = solution.mirror_src, solution.mirror_dst
    if mirror_pps.size and not chosen:
        lost = np.maximum(solution.local_pps - local_pps, 0.0)
        offload = np.bincount(src, weights=mirror_pps, minlength=problem.size)
        headroom = np.minimum(own - offload, problem.mirror_cap_pps - offload)  # shares, mirror cap
        wanted = np.minimum(lost[src], headroom[src]) * mirror_pps / offload[src]
        wanted = np.maximum(wanted, 0.0)
        load = predicted_load(problem, applied, src, dst, mirror_pps, sample)
        room = np.maximum(problem.usable_pps - load, 0.0) / (problem.alpha + problem.beta)
        demand = np.bincount(dst, weights=wanted, minlength=problem.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(demand > 0, np.minimum(1.0, room / demand), 0.0)
        mirror_pps = mirror_pps + wanted * scale[dst]
    load = predicted_load(problem, applied, src, dst, mirror_pps, sample)
    sampled = mirror_pps * applied[dst]  # copies sampled at their receivers
    distinct = distinct_pps(own, local_pps, np.bincount(src, weights=sampled, minlength=own.size))
    samples = float((applied * problem.bridge_pps).sum() + sampled.sum())
    return Realised(
        planned,
        applied,
        interval,
        local_pps,
        src,
        dst,
        mirror_pps,
        solution.mirror_pps.astype(float),
        load,
        distinct,
        _inbound_distinct(problem, applied, distinct),
        samples,
        probability,
    )


def sample_probability(rate: np.ndarray) -> np.ndarray:
    """Largest K with K/65535 <= rate (within RATE_TOLERANCE): the sample action's share."""
    k = np.floor(np.clip(rate, 0.0, 1.0) * SAMPLE_PROBABILITY_SCALE * (1 + RATE_TOLERANCE))
    return np.minimum(k, SAMPLE_PROBABILITY_SCALE).astype(np.int64)


def _inbound_distinct(problem: Problem, rate: np.ndarray, distinct: np.ndarray) -> float:
    """Packets of other servers' flows that a bridge sampling its inbound traffic adds."""
    takes_inbound = problem.bridge_pps > problem.own_pps
    if not takes_inbound.any():
        return 0.0
    dc = problem.dc
    own = problem.own_pps
    with np.errstate(divide="ignore", invalid="ignore"):
        coverage = np.where(own > 0, distinct / own, 1.0)
    flows = (dc.traffic_src != dc.traffic_dst) & takes_inbound[dc.traffic_dst]
    src, dst, pps = dc.traffic_src[flows], dc.traffic_dst[flows], dc.traffic_pps[flows]
    return float((pps * rate[dst] * (1 - coverage[src])).sum())
