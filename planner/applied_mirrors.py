"""For fixed local rates, the mirror shares that collect most, in few pairs (an LP).

With every server's rate t fixed (``fleet``'s space), a copy of i's traffic taken by k is
worth ``w_i (1 - t_i) t_k`` and costs i beta_i and k ``beta_k + alpha_k t_k``: the shares are an
LP over the pairs (scipy's HiGHS). Its value depends only on what each sender sends to
receivers of each rate and what each of them takes, so the pairs are then re-drawn per rate at
a vertex of the transportation problem without a server mirroring to itself: at most senders +
receivers - 1 pairs (tunnels) per rate.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from cosample.planner.fleet import Fleet


def mirror_lp(fleet: Fleet, rate: np.ndarray, sample: np.ndarray):
    """For fixed rates, the mirror shares that collect most (an LP, HiGHS): (src, dst, pps,
    weighted distinct own packets collected)."""
    full = np.where(sample, fleet.full_sample, fleet.full)
    local = np.where(rate > 0, full * rate, 0.0)
    left = np.maximum(fleet.spare - local, 0.0)
    fixed = float((fleet.weight * fleet.own * rate).sum())
    senders = np.flatnonzero((fleet.limit > 0) & (left > 0) & (rate < 1))
    receivers = np.flatnonzero((rate > 0) & ~sample & (left > 0))
    src = np.repeat(senders, receivers.size)
    dst = np.tile(receivers, senders.size)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    value = fleet.weight[src] * (1 - rate[src]) * rate[dst]
    keep = value > 0
    src, dst, value = src[keep], dst[keep], value[keep]
    if src.size == 0:
        return src, dst, np.zeros(0), fixed
    k = src.size
    n = fleet.size
    cols = np.arange(k)
    rows = np.concatenate((src, dst, n + src))
    vals = np.concatenate((fleet.beta[src], (fleet.beta + fleet.alpha * rate)[dst], np.ones(k)))
    matrix = sparse.csr_matrix((vals, (rows, np.concatenate((cols, cols, cols)))), shape=(2 * n, k))
    result = linprog(
        -value,
        A_ub=matrix,
        b_ub=np.concatenate((left, fleet.limit)),
        bounds=(0, None),
        method="highs",
    )
    if result.status != 0:
        return src[:0], dst[:0], np.zeros(0), fixed
    pps = np.maximum(result.x, 0.0)
    used = pps > 0
    src, dst, pps, value = src[used], dst[used], pps[used], value[used]
    total = fixed + float(value @ pps)
    return (*_few_pairs(src, dst, pps, rate), total)


def _few_pairs(src: np.ndarray, dst: np.ndarray, pps: np.ndarray, rate: np.ndarray):
    """The same copies in fewer pairs: only what each sender sends to receivers of one rate and
    what each of them takes matter (value and costs), so per rate the pairs are a vertex of
    the transportation problem without a server mirroring to itself: at most senders +
    receivers - 1 of them (dual simplex on a feasibility LP); as they were if that fails."""
    out: tuple[list, list, list] = ([], [], [])
    for t in np.unique(rate[dst]):
        at = rate[dst] == t
        senders, send = np.unique(src[at], return_inverse=True)
        takers, take = np.unique(dst[at], return_inverse=True)
        supply = np.bincount(send, weights=pps[at])
        demand = np.bincount(take, weights=pps[at])
        demand *= supply.sum() / demand.sum()
        grid_i, grid_k = np.meshgrid(np.arange(senders.size), np.arange(takers.size), indexing="ij")
        i, k = grid_i.ravel(), grid_k.ravel()
        keep = senders[i] != takers[k]
        i, k = i[keep], k[keep]
        rows = np.concatenate((i, senders.size + k))
        cols = np.concatenate((np.arange(i.size), np.arange(i.size)))
        matrix = sparse.csr_matrix(
            (np.ones(2 * i.size), (rows, cols)), shape=(senders.size + takers.size, i.size)
        )
        result = linprog(
            np.zeros(i.size),
            A_eq=matrix,
            b_eq=np.concatenate((supply, demand)),
            bounds=(0, None),
            method="highs-ds",
        )
        if result.status == 0:
            x = result.x
            nonzero = x > 1e-9 * supply.sum()
            parts = (senders[i[nonzero]], takers[k[nonzero]], x[nonzero])
        else:
            parts = (src[at], dst[at], pps[at])
        for whole, part in zip(out, parts):
            whole.append(part)
    if not out[0]:
        return src, dst, pps
    return tuple(np.concatenate(part) for part in out)
