"""The exact solver: the LP's optimum in closed form, O(n log n), per-server alpha and beta.

Why it is exact (docs/planner.md, "Why the closed form is exact"; the model in docs/model.md):
- Receivers P are the servers that can sample all their own traffic (spare >= alpha*U); only they
  take mirrors, and they sample all their own (the paper's reduction rule). Each can absorb
  ``room_k = (spare_k - alpha_k U_k) / (alpha_k + beta_k)`` pps of mirrored traffic; with a full
  mesh only the total room R matters.
- A sender i in Q that mirrors y pps samples ``(spare_i - beta_i y) / alpha_i`` locally, so it
  collects ``spare_i/alpha_i + g_i y`` with marginal value ``g_i = 1 - beta_i/alpha_i``, until
  ``y*_i = min((alpha_i U_i - spare_i)/(alpha_i - beta_i), spare_i/beta_i)`` (all covered, or all
  capacity spent on mirroring). Senders with ``g_i <= 0`` never mirror.
- The rest is a fractional knapsack: fill R with the senders of highest g first.

Ties (senders with equal g competing for a scarce R) are broken by max-min coverage: the marginal
group is water-filled so the least-covered senders rise together. Senders are then paired with
receivers by ``pairing.pair_offloads`` to keep the number of tunnels small.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cosample.planner.choices import EXACT
from cosample.planner.datacentre import DataCentre
from cosample.planner.pairing import pair_offloads
from cosample.planner.solution import Solution


@dataclass(frozen=True)
class Split:
    """The structure of the optimum: who receives, who sends, how much room and demand."""

    receiver: np.ndarray      # bool per server: in P
    room_pps: np.ndarray      # mirrored pps each receiver can absorb (0 outside P)
    base_pps: np.ndarray      # what each sender collects alone: spare/alpha (0 outside Q)
    gain: np.ndarray          # marginal value of offloading, 1 - beta/alpha (0 outside Q)
    useful_pps: np.ndarray    # y*: offload beyond which a sender collects nothing more


def split(dc: DataCentre) -> Split:
    """Partition into receivers and senders and compute each one's terms (vectorised)."""
    dc.check_feasible()
    own, spare, alpha, beta = dc.own_pps, dc.spare_pps, dc.alpha, dc.beta
    receiver = spare - alpha * own >= 0
    sender = ~receiver
    room = np.where(receiver, (spare - alpha * own) / (alpha + beta), 0.0)
    gain = np.where(sender, 1.0 - beta / alpha, 0.0)
    mirrors = sender & (gain > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        useful = np.minimum((alpha * own - spare) / (alpha - beta), spare / beta)
    useful = np.where(mirrors, np.maximum(useful, 0.0), 0.0)
    base = np.where(sender, spare / alpha, 0.0)
    return Split(receiver, room, base, gain, useful)


def allocate_offload(dc: DataCentre, parts: Split) -> np.ndarray:
    """Offload y_i per sender: highest gain first, the marginal gain group water-filled."""
    offload = np.zeros(dc.size)
    budget = float(parts.room_pps.sum())
    candidates = np.flatnonzero(parts.useful_pps > 0)
    if candidates.size == 0 or budget <= 0:
        return offload
    if parts.useful_pps[candidates].sum() <= budget:
        offload[candidates] = parts.useful_pps[candidates]
        return offload
    gain = parts.gain[candidates]
    if np.all(gain == gain[0]):  # one set of coefficients: a single group, no sort needed
        gains, group = -gain[:1], np.zeros(candidates.size, dtype=np.int64)
    else:
        gains, group = np.unique(-gain, return_inverse=True)  # best gain first
    group_demand = np.bincount(group, weights=parts.useful_pps[candidates])
    demand_before = np.concatenate(([0.0], np.cumsum(group_demand)[:-1]))
    marginal = int(np.searchsorted(np.cumsum(group_demand), budget, side="right"))
    full = candidates[group < marginal]
    offload[full] = parts.useful_pps[full]
    members = candidates[group == marginal]
    offload[members] = water_fill(
        parts.base_pps[members], parts.useful_pps[members], dc.own_pps[members],
        -gains[marginal], budget - demand_before[marginal])
    return offload


def water_fill(base: np.ndarray, cap: np.ndarray, own: np.ndarray, gain: float,
               budget: float) -> np.ndarray:
    """Offloads summing to ``budget`` that maximise the minimum coverage (base + gain*y)/own.

    Each sender's offload as a function of the common coverage level c is
    ``clip((c*own - base)/gain, 0, cap)``: piecewise linear with breakpoints where it starts and
    where it saturates, so the total is piecewise linear in c and its inverse at ``budget`` is
    found exactly from the sorted breakpoints.
    """
    start = base / own
    stop = (base + gain * cap) / own
    slope = own / gain
    points = np.concatenate((start, stop))
    change = np.concatenate((slope, -slope))
    order = np.argsort(points)  # ties between breakpoints do not change the result
    points, change = points[order], change[order]
    slope_after = np.cumsum(change)
    total_at = np.concatenate(([0.0], np.cumsum(slope_after[:-1] * np.diff(points))))
    j = int(np.searchsorted(total_at, budget, side="right")) - 1
    level = points[j] + ((budget - total_at[j]) / slope_after[j] if slope_after[j] > 0 else 0.0)
    offload = np.clip((level * own - base) / gain, 0.0, cap)
    total = offload.sum()
    if total > 0:  # remove the last ulps of drift so the receivers' room is met exactly
        offload = np.minimum(offload * (budget / total), cap)
    return offload


def optimum_pps(dc: DataCentre) -> float:
    """The LP's optimal collected volume, without building a plan (fast path for grids)."""
    parts = split(dc)
    demand = float(parts.useful_pps.sum())
    budget = float(parts.room_pps.sum())
    collected = dc.own_pps[parts.receiver].sum() + parts.base_pps.sum()
    if demand <= budget:
        return float(collected + (parts.gain * parts.useful_pps).sum())
    return float(collected + (parts.gain * allocate_offload(dc, parts)).sum())


def solve_exact(dc: DataCentre) -> Solution:
    """The optimal plan: local sampling, offloads, and sender-receiver pairs."""
    started = time.perf_counter()
    parts = split(dc)
    offload = allocate_offload(dc, parts)
    local = np.where(parts.receiver, dc.own_pps, (dc.spare_pps - dc.beta * offload) / dc.alpha)
    local = np.clip(local, 0.0, dc.own_pps)
    src, dst, pps = pair_offloads(offload, parts.room_pps)
    collected = float(local.sum() + offload.sum())
    return Solution(EXACT, collected, local, src, dst, pps,
                    seconds=time.perf_counter() - started)
