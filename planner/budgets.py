"""The fleet-wide budget on samples sent to the collector, applied to a plan by trimming it.

Every sampled packet reaches the collector: samples/s = sum over bridges of rate x bridge input
+ the mirrored copies (receivers sample them 1-in-1). Trimming a share of a plan only lowers
loads, so it never breaks a capacity or a mirror cap. The trim removes the samples worth least
first (weight x distinct packets per sample: an overlapped local sample of a sender that also
mirrors is worth ``1 - m``, a sample of inbound traffic nothing of the server's own), and a
receiver's own sampling only once nothing is mirrored to it any more (it must sample 1-in-1 to
take mirrors). With equal weights and no overlap or inbound sampling every sample is one distinct
packet, so any plan at the cap is optimal and so is this one; otherwise it is a greedy step and
the plan states its gap to the bound (``samples_bound``).
"""

from __future__ import annotations

import numpy as np

from cosample.planner.problem import Problem


def samples_pps(
    problem: Problem, local_pps: np.ndarray, offload_pps: np.ndarray, received_pps: np.ndarray
) -> float:
    """Samples/s the collector receives from a continuous plan (before 1-in-N rounding)."""
    return float(
        (sampling_rates(problem, local_pps, received_pps) * problem.bridge_pps).sum()
        + offload_pps.sum()
    )


def sampling_rates(problem: Problem, local_pps: np.ndarray, received_pps: np.ndarray) -> np.ndarray:
    """Each bridge's sFlow rate: its local share, 1 where it takes mirrors."""
    own = problem.own_pps
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(own > 0, local_pps / own, 0.0)
    return np.where(received_pps > 0, 1.0, np.clip(rate, 0.0, 1.0))


def samples_bound(problem: Problem, limit: float) -> float:
    """No plan collects more weighted distinct packets than the ``limit`` best-weighted packets.

    Each distinct packet costs at least one sample, so a plan under the cap collects at most the
    cap's worth of packets, at best the most valuable ones.
    """
    if not np.isfinite(limit):
        return np.inf
    order = np.argsort(-problem.weight, kind="stable")
    own = problem.own_pps[order]
    ends = np.cumsum(own)
    taken = np.minimum(own, np.maximum(limit - (ends - own), 0.0))
    return float((problem.weight[order] * taken).sum())


def trim_to_collector_cap(
    problem: Problem, local_pps: np.ndarray, offload_pps: np.ndarray, received_pps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(local, offload) with at most ``problem.collector_cap_pps`` samples/s, least value cut first.

    ``received_pps`` (per server, from the plan's pairing) says which bridges sample 1-in-1.
    """
    limit = problem.collector_cap_pps
    own, bridge, weight = problem.own_pps, problem.bridge_pps, problem.weight
    local, offload = local_pps.astype(float).copy(), offload_pps.astype(float).copy()
    excess = samples_pps(problem, local, offload, received_pps) - limit
    if not np.isfinite(limit) or excess <= 0:
        return local, offload
    with np.errstate(divide="ignore", invalid="ignore"):
        share_mirrored = np.where(own > 0, offload / own, 0.0)
        share_local = np.where(own > 0, local / own, 0.0)
        per_local_sample = np.where(bridge > 0, weight * (1 - share_mirrored) * own / bridge, 0.0)
    sender = ~problem.receiver & (own > 0)
    # phase 1: senders' local and mirrored samples; phase 2: receivers' own, once none receives
    kinds = [
        ("local", np.flatnonzero(sender & (local > 0)), per_local_sample),
        ("mirror", np.flatnonzero(offload > 0), weight * (1 - share_local)),
    ]
    excess = _cut(kinds, excess, local, offload, own, bridge)
    if excess > 0:
        # nothing is mirrored any more: receivers' bridges (own traffic or inbound) may slow down
        receivers = np.flatnonzero(problem.receiver & (own > 0) & (local > 0))
        _cut([("local", receivers, per_local_sample)], excess, local, offload, own, bridge)
    return local, offload


def _cut(
    kinds,
    excess: float,
    local: np.ndarray,
    offload: np.ndarray,
    own: np.ndarray,
    bridge: np.ndarray,
) -> float:
    """Remove ``excess`` samples from the listed blocks, cheapest value per sample first.

    Vectorised: one sort of all blocks, a cumulative sum, and one block cut partway.
    """
    servers = np.concatenate([s for _, s, _ in kinds])
    is_local = np.concatenate([np.full(s.size, kind == "local") for kind, s, _ in kinds])
    value = np.concatenate([v[s] for _, s, v in kinds])
    samples = np.where(
        is_local,
        local[servers] / np.where(own[servers] > 0, own[servers], 1.0) * bridge[servers],
        offload[servers],
    )
    order = np.lexsort((is_local, servers, value))
    servers, is_local, samples = servers[order], is_local[order], samples[order]
    before = np.cumsum(samples) - samples
    cut = np.clip(excess - before, 0.0, samples)
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(samples > 0, 1 - cut / samples, 1.0)
    np.multiply.at(local, servers[is_local], keep[is_local])
    np.multiply.at(offload, servers[~is_local], keep[~is_local])
    return float(excess - cut.sum())
