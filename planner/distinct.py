"""Distinct packets: how much of the receivers' room each sender gets, when draws overlap.

A sender's bridge sFlow (share l of its own traffic U) and its tc mirror chain (share m) draw
independently, so it collects ``U (l + m - l m)`` distinct packets. Mirroring ``y = m U`` pps
costs it ``beta y`` and leaves ``x = (spare - beta y) / A`` pps of local sampling (A: the cost of
one own packet sampled by the cheaper mechanism the server may use, ``Problem.local_cost``), so with the best local share its distinct
volume is

    f(y) = x(y) + y - x(y) y / U,     0 <= y <= Y = min(U, spare/beta, mirror cap),

a quadratic with positive leading coefficient ``beta / (A U)``: **convex** in y. The fleet
maximises ``sum_i w_i f_i(y_i)`` subject to ``sum_i y_i <= R`` (the receivers' total room). A
convex function is maximised over a polytope at a vertex, and a vertex of
``{0 <= y_i <= Y_i, sum y_i <= R}`` has every ``y_i`` at 0 or ``Y_i`` except at most one, which
then takes what is left of R. So a sender either mirrors all it usefully can or nothing, and the
problem is a 0/1 knapsack (value ``w_i (f_i(Y_i) - f_i(0))``, weight ``Y_i``) plus one partial
item. This module solves it exactly when all candidates fit or when there are few enough to
enumerate every vertex, and otherwise greedily by value density with first-fit; in every case it
returns the concave-envelope bound (each ``f_i`` replaced by its chord, a fractional knapsack)
that no plan can beat, so the plan can state its gap.

A sender that mirrors all of its traffic (y = U) samples nothing locally: local samples would
duplicate mirrored ones (no avoidable overlap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosample.planner.problem import Problem
from cosample.planner.solution import EXACT_TOLERANCE

#: Up to this many competing senders every vertex is enumerated (2^k x k values, k = 14: 0.2 M).
ENUMERATE_UP_TO = 14
#: First-fit passes over the remaining senders after the density-ordered prefix.
FIRST_FIT_ROUNDS = 32


@dataclass(frozen=True)
class Senders:
    """The servers that cannot sample all their own traffic, with their value terms."""

    index: np.ndarray  # server positions
    own: np.ndarray  # U
    spare: np.ndarray  # spare capacity
    cost: np.ndarray  # A: cost of one own packet sampled locally
    beta: np.ndarray
    weight: np.ndarray
    top: np.ndarray  # Y: the most it may usefully mirror
    gain: np.ndarray  # w (f(Y) - f(0)): what mirroring Y adds (weighted)

    def local_pps(self, mirrored: np.ndarray) -> np.ndarray:
        """Best local sampling next to ``mirrored`` pps: all capacity left, none if all mirrored."""
        local = np.maximum(self.spare - self.beta * mirrored, 0.0) / self.cost
        return np.where(mirrored >= self.own * (1 - 1e-12), 0.0, np.minimum(local, self.own))

    def distinct_pps(self, mirrored: np.ndarray) -> np.ndarray:
        """f(y): distinct packets collected of its own traffic."""
        local = self.local_pps(mirrored)
        return local + mirrored - local * mirrored / self.own


@dataclass(frozen=True)
class Choice:
    """Offloads per server, how they were found and the bound they are measured against."""

    offload_pps: np.ndarray  # y per server (0 outside the senders)
    objective: float  # weighted distinct packets: receivers' own + sum of w f(y)
    envelope: float  # concave-envelope bound on that sum
    method: str  # "all fit", "enumerated", "greedy"

    @property
    def optimal(self) -> bool:
        return self.method in ("all fit", "enumerated") or self.objective >= self.envelope * (
            1 - EXACT_TOLERANCE
        )


def senders_of(problem: Problem) -> Senders:
    """The senders (own traffic, outside P) and their terms, vectorised."""
    index = np.flatnonzero(~problem.receiver & (problem.own_pps > 0))
    own = problem.own_pps[index]
    spare = problem.spare_pps[index]
    beta = problem.beta[index]
    top = np.minimum(np.minimum(own, spare / beta), problem.mirror_cap_pps[index])
    partial = Senders(
        index,
        own,
        spare,
        problem.local_cost[index],
        beta,
        problem.weight[index],
        top,
        np.zeros(index.size),
    )
    gain = partial.weight * (partial.distinct_pps(top) - partial.distinct_pps(np.zeros(index.size)))
    return Senders(index, own, spare, partial.cost, beta, partial.weight, top, gain)


def choose(problem: Problem, senders: Senders | None = None) -> Choice:
    """The offloads: exact when all fit or few compete, else greedy; with the envelope bound."""
    senders = senders or senders_of(problem)
    room = float(problem.room_pps.sum())
    receivers = problem.receiver & (problem.own_pps > 0)
    base = float(
        (senders.weight * senders.distinct_pps(np.zeros(senders.index.size))).sum()
        + (problem.weight * problem.own_pps)[receivers].sum()
    )
    useful = (senders.gain > 0) & (senders.top > 0)
    candidates = np.flatnonzero(useful)
    mirrored = np.zeros(senders.index.size)
    order = _order(senders, candidates)
    envelope = base + _envelope(senders.gain[candidates], senders.top[candidates], room, order)
    if candidates.size == 0 or room <= 0:
        method = "all fit"
    elif senders.top[candidates].sum() <= room:
        mirrored[candidates] = senders.top[candidates]
        method = "all fit"
    elif candidates.size <= ENUMERATE_UP_TO:
        mirrored[candidates] = _enumerate(senders, candidates, room)
        method = "enumerated"
    else:
        mirrored[candidates] = _greedy(senders, candidates, room, order)
        method = "greedy"
    value = float(
        (senders.weight * senders.distinct_pps(mirrored)).sum()
        + (problem.weight * problem.own_pps)[receivers].sum()
    )
    offload = np.zeros(problem.size)
    offload[senders.index] = mirrored
    return Choice(offload, value, max(envelope, value), method)


def continuous_envelope(problem: Problem, senders: Senders | None = None) -> float:
    """``choose(problem).envelope`` without choosing: the continuous optimum's bound alone."""
    senders = senders or senders_of(problem)
    receivers = problem.receiver & (problem.own_pps > 0)
    base = float(
        (senders.weight * senders.distinct_pps(np.zeros(senders.index.size))).sum()
        + (problem.weight * problem.own_pps)[receivers].sum()
    )
    candidates = np.flatnonzero((senders.gain > 0) & (senders.top > 0))
    # a fractional knapsack's value does not depend on how ties are ordered: one sort
    order = np.argsort(-(senders.gain[candidates] / senders.top[candidates]), kind="stable")
    return base + _envelope(
        senders.gain[candidates], senders.top[candidates], float(problem.room_pps.sum()), order
    )


def _order(senders: Senders, candidates: np.ndarray) -> np.ndarray:
    """Candidates by value density, highest first; ties: least covered by local sampling first.

    Positions into ``candidates``. Two cheap sorts instead of a lexsort: by coverage, then a
    stable sort by density (one sort when all densities are equal).
    """
    top, gain = senders.top[candidates], senders.gain[candidates]
    density = gain / top
    coverage_alone = (
        np.minimum(senders.spare[candidates] / senders.cost[candidates], senders.own[candidates])
        / senders.own[candidates]
    )
    by_coverage = np.argsort(coverage_alone)
    if density.size == 0 or np.all(density == density[0]):
        return by_coverage
    return by_coverage[np.argsort(-density[by_coverage], kind="stable")]


def _envelope(gain: np.ndarray, top: np.ndarray, room: float, order: np.ndarray) -> float:
    """Fractional knapsack over the chords: the best any plan can add to the local-only volume."""
    if gain.size == 0 or room <= 0:
        return 0.0
    ends = np.cumsum(top[order])
    whole = int(np.searchsorted(ends, room, side="right"))
    value = float(gain[order[:whole]].sum())
    if whole < order.size:
        used = ends[whole - 1] if whole else 0.0
        j = order[whole]
        value += float(gain[j] * (room - used) / top[j])
    return value


def _partial_gain(senders: Senders, items: np.ndarray, amount: np.ndarray) -> np.ndarray:
    """w (f(amount) - f(0)) for senders ``items``; ``amount`` broadcasts against ``items``."""
    own, spare, cost, beta = (
        senders.own[items],
        senders.spare[items],
        senders.cost[items],
        senders.beta[items],
    )
    amount = np.minimum(amount, senders.top[items])
    local = np.minimum(np.maximum(spare - beta * amount, 0.0) / cost, own)
    local = np.where(amount >= own * (1 - 1e-12), 0.0, local)
    alone = np.minimum(spare / cost, own)
    return senders.weight[items] * (local + amount - local * amount / own - alone)


def _enumerate(senders: Senders, candidates: np.ndarray, room: float) -> np.ndarray:
    """Every vertex: each subset mirrored fully, plus the best partial sender for the rest.

    Among equal values (relative 1e-12) the vertex with the least overlap, then the first subset
    in binary order, is chosen, so the plan is reproducible.
    """
    k = candidates.size
    masks = ((np.arange(2**k)[:, None] >> np.arange(k)) & 1).astype(bool)
    top, gain = senders.top[candidates], senders.gain[candidates]
    used = masks @ top
    fits = used <= room * (1 + 1e-12)
    masks, used = masks[fits], used[fits]
    residual = np.maximum(room - used, 0.0)
    partial = _partial_gain(senders, candidates[None, :], residual[:, None])
    partial = np.where(masks | (partial <= 0), 0.0, partial)
    which = np.argmax(partial, axis=1)
    best_partial = partial[np.arange(masks.shape[0]), which]
    total = masks @ gain + best_partial
    amount = np.where(best_partial > 0, np.minimum(residual, top[which]), 0.0)
    overlap = np.where(best_partial > 0, amount, 0.0)  # only a partial sender mixes
    near = total >= total.max() - 1e-12 * max(1.0, abs(total.max()))
    pick = int(np.flatnonzero(near)[np.argmin(overlap[near])])
    mirrored = np.where(masks[pick], top, 0.0)
    if best_partial[pick] > 0:
        mirrored[which[pick]] = amount[pick]
    return mirrored


def _greedy(senders: Senders, candidates: np.ndarray, room: float, order: np.ndarray) -> np.ndarray:
    """In ``order`` (see ``_order``) whole senders while they fit, first-fit, one partial sender."""
    top = senders.top[candidates]
    ends = np.cumsum(top[order])
    whole = int(np.searchsorted(ends, room * (1 + 1e-12), side="right"))
    taken = np.zeros(candidates.size, dtype=bool)
    taken[order[:whole]] = True
    left = max(room - (float(ends[whole - 1]) if whole else 0.0), 0.0)
    rest = order[whole:]
    rest = rest[top[rest] <= left]  # left only shrinks: what does not fit now never will
    for _ in range(FIRST_FIT_ROUNDS):
        if rest.size == 0:
            break
        fits = rest[np.cumsum(top[rest]) <= left * (1 + 1e-12)]  # never empty: rest[0] fits
        taken[fits] = True
        left = max(left - float(top[fits].sum()), 0.0)
        rest = rest[~taken[rest]]
        rest = rest[top[rest] <= left]
    mirrored = np.where(taken, top, 0.0)
    rest = np.flatnonzero(~taken)
    if rest.size and left > 0:
        partial = _partial_gain(senders, candidates[rest], np.full(rest.size, left))
        best = int(np.argmax(partial))
        if partial[best] > 0:
            mirrored[rest[best]] = min(left, top[rest[best]])
    return mirrored
