"""From a continuous optimum to what switches can do: sFlow's 1-in-N and the capacity it frees.

sFlow samples 1 in N packets, N an integer, so a local rate r becomes N = ceil(1/r) and the
applied rate 1/N <= r: rounding never exceeds a capacity. The sender's capacity freed by rounding
down is not simply lost: the sender mirrors the coverage it lost, ``(r - 1/N) * U``, through the
pairs it already has (no new tunnels), as far as those receivers have room left. Mirroring costs
the sender beta < alpha, so its own constraint still holds. What cannot be placed is reported as
headroom. Pure functions over arrays.

A bridge's sFlow and the tc mirror chain pick packets independently, so a sender that samples a
share l locally and mirrors m collects ``l + m - l*m`` distinct packets, not ``l + m`` (measured
on the testbed, docs/testbed.md). ``distinct_pps`` predicts that; the LP, like the paper, counts
``l + m``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosample.planner.datacentre import DataCentre
from cosample.planner.solution import Solution

#: LP solvers return rates a few ulps below a round 1/N; this much relative slack maps them to N.
RATE_TOLERANCE = 1e-9
#: sFlow's sampling rate is a 32-bit field; a rate below 1/MAX_INTERVAL is no sampling at all.
MAX_INTERVAL = 2**32 - 1


@dataclass(frozen=True)
class Realised:
    """Rates as they will be configured, and the load they predict per server."""

    local_rate: np.ndarray       # planned (continuous) fraction sampled locally
    sflow_sampling: np.ndarray   # N per server, 0 meaning no local sampling
    local_pps: np.ndarray        # U / N
    mirror_src: np.ndarray
    mirror_dst: np.ndarray
    mirror_pps: np.ndarray       # after the top-up
    load_pps: np.ndarray
    collected_pps: float
    distinct_pps: float          # expected distinct packets when sFlow and mirrors pick independently


def sampling_interval(rate: np.ndarray) -> np.ndarray:
    """Smallest integer N with 1/N <= rate (within RATE_TOLERANCE); 0 (off) where none fits."""
    rate = np.clip(rate, 0.0, 1.0)
    with np.errstate(divide="ignore"):
        interval = np.ceil((1.0 - RATE_TOLERANCE) / rate)
    interval[(rate <= 0) | (interval > MAX_INTERVAL)] = 0
    return interval.astype(np.int64)


def predicted_load(dc: DataCentre, local_pps: np.ndarray, mirror_src: np.ndarray,
                   mirror_dst: np.ndarray, mirror_pps: np.ndarray) -> np.ndarray:
    """Each server's cost in pps units: forwarding + sampling + mirroring out + receiving."""
    n = dc.size
    out = np.bincount(mirror_src, weights=mirror_pps, minlength=n)
    received = np.bincount(mirror_dst, weights=mirror_pps, minlength=n)
    return (dc.forwarding_pps + dc.alpha * local_pps + dc.beta * out
            + (dc.alpha + dc.beta) * received)


def realise(dc: DataCentre, solution: Solution, receivers: np.ndarray) -> Realised:
    """Round local rates to 1-in-N and spend the freed capacity on existing mirror pairs.

    ``receivers`` marks the servers that sample all their own traffic (P); they sample 1-in-1 so
    that every mirrored packet they receive is sampled too.
    """
    own = dc.own_pps
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(own > 0, solution.local_pps / own, 0.0)
    received = solution.received_pps
    rate = np.where(receivers & ((own > 0) | (received > 0)), 1.0, np.clip(rate, 0.0, 1.0))
    rate = np.where(rate * MAX_INTERVAL < 1.0, 0.0, rate)  # below sFlow's range: exactly off
    interval = sampling_interval(rate)
    with np.errstate(divide="ignore"):
        local_pps = np.where(interval > 0, own / np.maximum(interval, 1), 0.0)
    mirror_pps = solution.mirror_pps.astype(float).copy()
    src, dst = solution.mirror_src, solution.mirror_dst
    if mirror_pps.size:
        lost = np.maximum(solution.local_pps - local_pps, 0.0)
        offload = np.bincount(src, weights=mirror_pps, minlength=dc.size)
        wanted = lost[src] * mirror_pps / offload[src]
        load = predicted_load(dc, local_pps, src, dst, mirror_pps)
        room = np.maximum(dc.capacity_pps - load, 0.0) / (dc.alpha + dc.beta)
        demand = np.bincount(dst, weights=wanted, minlength=dc.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(demand > 0, np.minimum(1.0, room / demand), 0.0)
        mirror_pps = mirror_pps + wanted * scale[dst]
    load = predicted_load(dc, local_pps, src, dst, mirror_pps)
    mirrored = np.bincount(src, weights=mirror_pps, minlength=dc.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        overlap = np.where(own > 0, local_pps * mirrored / own, 0.0)
    return Realised(rate, interval, local_pps, src, dst, mirror_pps, load,
                    float(local_pps.sum() + mirror_pps.sum()),
                    float((local_pps + mirrored - overlap).sum()))
