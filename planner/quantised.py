"""The plan the switches apply: each sender's sFlow 1-in-N (or off) chosen with its mirror share.

A sender (outside P, see ``Problem.receiver``) with spare capacity S, full-rate sampling cost
``A = alpha x bridge input`` and mirror limit ``c = min(U, mirror cap)`` that samples 1-in-N
(``t = 1/N``, ``t = 0`` off) may mirror ``y <= y(t) = min(c, (S - A t)/beta)`` pps and collects
``w (U t + y (1 - t))`` distinct packets (local and mirrored draws are independent). For fixed N
this is linear in y; the fleet shares the receivers' room R. So every optimum has all senders but
one at a *vertex* (``y = 0`` with the smallest affordable N, ``N_min``, or ``y = y(1/N)`` for some
N), one possibly partial; the choice is a multiple-choice knapsack.

The vertices ``(y(1/N), value)`` for ``N_min <= N < N_c`` lie on the continuous value curve
``f(y) = y + (S - beta y)(U - y)/A`` (the local rate that exactly spends the capacity), which is
convex; from ``N_c`` (the first N whose vertex reaches the mirror limit c) on, the vertices sit at
``y = c`` with values falling in N. Hence:

- alone, a sender's best is one of four points: ``N_min`` saturated, ``N_c - 1``, ``N_c`` at the
  limit, or off (the limit of the convex curve when no cap binds);
- the concave hull of those points and ``(0, U/N_min)`` covers every 1-in-N plan of the sender
  (intermediate vertices lie below the chord of a convex curve, the segments below the curve):
  a fractional knapsack over the hulls is an upper bound on every applied plan
  (``Hulls.bound``).

``choose_applied`` is exact when every sender's best fits in R (proved), solves the knapsack with
a lazy MILP (``quantised_milp``) when few senders compete, and otherwise takes whole hull steps
in slope order, first-fit, and the best partial sender, reporting the gap to the bound.

A sender that may use the ``sample`` mechanism (OVS's OpenFlow ``sample`` action, probability
K/65535, ``Problem.can_sample``) has a second *ladder* of rates (``ladders``): level L stands for
K = 65536 - L, rate K/65535, at its own full-rate cost ``alpha_sample x bridge input``. Levels
play the part of N (a higher level, a lower rate), so the same four points, the same convex
curve and the same MILP items hold on either ladder. The sender's candidates are then both
ladders' points (eight, ``merged``), its hull covers every plan of either mechanism, and the
knapsack chooses the mechanism with the rate (``Applied.sample``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosample.planner.ladders import Points, Senders, ladders_of
from cosample.planner.problem import Problem
from cosample.planner.solution import EXACT_TOLERANCE

#: Up to this many competing senders the knapsack is solved exactly (MILP), above it greedily.
MILP_UP_TO = 16
#: First-fit passes over the remaining hull steps after the slope-ordered prefix.
FIRST_FIT_ROUNDS = 32


def points_of(senders: Senders) -> Points:
    """The four candidate points of every sender (module docstring: why these four)."""
    t_min = senders.rate(senders.n_min)
    below_cap = np.where(
        np.isfinite(senders.n_cap) & (senders.n_cap - 1 > senders.n_min),
        senders.n_cap - 1,
        senders.n_min,
    )
    # N_c at the limit; off when no N reaches it or when the limit is all own traffic (same value)
    last = np.where(senders.limit >= senders.own * (1 - 1e-12), np.inf, senders.n_cap)
    rate = [t_min, t_min, senders.rate(below_cap), senders.rate(last)]
    mirrored = [np.zeros_like(t_min)] + [senders.most_mirrored(t) for t in rate[1:]]
    value = [senders.value(t, y) for t, y in zip(rate, mirrored)]
    return Points(rate, mirrored, value, [senders.grid] * 4)


def merged(flow: Points, sample: Points, able: np.ndarray) -> Points:
    """Both ladders' points of every sender: sFlow's four, then the sample ladder's three
    beyond its point 0 (``sample``: of the senders at ``able`` only), the better point 0 first
    and the other last; a sender without the sample ladder has copies of its point 0 there
    (nothing ahead of it). Not sorted by mirrored pps: ``hulls_of`` does not need it for eight."""
    swap = np.zeros(flow.value[0].size, dtype=bool)
    swap[able] = sample.value[0] > flow.value[0][able]
    columns = []
    for ours, theirs in (
        (flow.rate, sample.rate),
        (flow.mirrored, sample.mirrored),
        (flow.value, sample.value),
        (flow.grid, sample.grid),
    ):
        first, last = ours[0].copy(), ours[0].copy()
        first[able], last[able] = (
            np.where(swap[able], theirs[0], ours[0][able]),
            np.where(swap[able], ours[0][able], theirs[0]),
        )
        extra = []
        for j in (1, 2, 3):
            column = ours[0].copy()
            column[able] = theirs[j]
            extra.append(column)
        columns.append([first, *ours[1:], *extra, last])
    return Points(*columns)


@dataclass(frozen=True)
class Hulls:
    """Every sender's concave hull from its point 0 as steps (room, gain, target point), listed
    sender by sender in hull order; ``key`` is each step's slope made non-increasing within its
    sender (round-off), the order greedy and bound take steps in (``order``, highest first)."""

    sender: np.ndarray  # position among the senders
    room: np.ndarray
    gain: np.ndarray
    target: np.ndarray  # point 1..3 (1..7 on two ladders)
    order: np.ndarray  # steps by key, highest first (stable: a sender's steps stay in order)
    size: int  # number of senders
    competing: np.ndarray  # senders with at least one step, ascending

    def final(self) -> np.ndarray:
        """Each sender's last hull point: its best alone (ties: least room)."""
        last = np.zeros(self.size, dtype=np.int64)
        ends = np.concatenate((self.sender[1:] != self.sender[:-1], [True]))[: self.sender.size]
        last[self.sender[ends]] = self.target[ends]  # steps are in hull order per sender
        return last

    def price(self, room: float) -> float:
        """What one more pps of room is worth to the fleet: the slope of the hull step the
        room runs out in (0 when every step fits)."""
        if self.order.size == 0:
            return 0.0
        ends = np.cumsum(self.room[self.order])
        at = int(np.searchsorted(ends, room, side="right"))
        if at >= self.order.size:
            return 0.0
        return float(self.gain[self.order[at]] / self.room[self.order[at]])

    def bound(self, room: float) -> float:
        """Fractional knapsack over all steps: no 1-in-N plan gains more over the points 0."""
        if self.order.size == 0 or room <= 0:
            return 0.0
        dy, dv = self.room[self.order], self.gain[self.order]
        ends = np.cumsum(dy)
        whole = int(np.searchsorted(ends, room, side="right"))
        value = float(dv[:whole].sum())
        if whole < dy.size:
            value += float(dv[whole] * (room - (ends[whole - 1] if whole else 0.0)) / dy[whole])
        return value


def hulls_of(points: Points, able: np.ndarray | None = None) -> Hulls:
    """Upper concave hull from point 0 (steps with positive gain and room), column by column;
    each step looks only at the senders that moved in the one before. ``able``: the senders
    with both ladders' points (``merged``); the others' are the first four columns."""
    k = points.mirrored[0].size
    last = len(points.mirrored) - 1  # 3 on one ladder, 7 on two
    room, gain = np.zeros((k, last)), np.zeros((k, last))
    target, key = np.full((k, last), -1, dtype=np.int64), np.zeros((k, last))
    y, v = points.mirrored, points.value
    current = np.zeros(k, dtype=np.int64)
    cur_y, cur_v = y[0].copy(), v[0].copy()

    def climb(active: np.ndarray, columns: int, ordered: bool) -> None:
        """Steps of the senders ``active`` over columns 0..``columns``; ``ordered``: sorted by
        mirrored pps (one ladder), else any point farther and higher may come next."""
        farthest = None if ordered else np.maximum.reduce([c[active] for c in y])
        positions = np.arange(active.size)
        for step in range(columns):
            if active.size == 0:
                break
            at, at_y, at_v = current[active], cur_y[active], cur_v[active]
            best, pick = np.full(active.size, -np.inf), np.full(active.size, -1, dtype=np.int64)
            step_y, step_v = np.zeros(active.size), np.zeros(active.size)
            for j in range(1, columns + 1):
                dy, dv = y[j][active] - at_y, v[j][active] - at_v
                ahead = (dy > 1e-12 * np.maximum(at_y, 1.0)) & (dv > 0)
                if ordered:
                    ahead &= at < j
                with np.errstate(divide="ignore", invalid="ignore"):
                    slope = np.where(ahead, dv / dy, -np.inf)
                # equal slopes: the farther point (fewer steps)
                better = ahead & (
                    (slope >= best) if ordered else (slope > best) | (slope == best) & (dy > step_y)
                )
                best, pick = np.where(better, slope, best), np.where(better, j, pick)
                step_y, step_v = np.where(better, dy, step_y), np.where(better, dv, step_v)
            moved = pick >= 0
            active, pick, best = active[moved], pick[moved], best[moved]
            step_y, step_v, positions = step_y[moved], step_v[moved], positions[moved]
            room[active, step], gain[active, step], target[active, step] = step_y, step_v, pick
            # a sender's later slope never above its earlier one (round-off): sorting keeps order
            key[active, step] = best if step == 0 else np.minimum(best, key[active, step - 1])
            current[active] = pick
            cur_y[active] += step_y
            cur_v[active] += step_v
            if ordered:
                keep = pick < columns
                active, positions = active[keep], positions[keep]
            else:  # no point beyond the one reached
                assert farthest is not None  # (computed when not ordered)
                beyond = (
                    cur_y[active] + 1e-12 * np.maximum(cur_y[active], 1.0) < farthest[positions]
                )
                active, positions = active[beyond], positions[beyond]

    if able is None:
        climb(np.arange(k), last, last == 3)
    else:
        one = np.ones(k, dtype=bool)
        one[able] = False
        climb(np.flatnonzero(one), 3, True)
        climb(able, last, False)
    real = (target >= 0).ravel()  # sender by sender, in hull order: no sort needed
    sender = np.flatnonzero(real) // last
    room, gain = room.ravel()[real], gain.ravel()[real]
    target, key = target.ravel()[real], key.ravel()[real]
    order = np.argsort(-key, kind="stable")
    first_steps = np.concatenate(([True], sender[1:] != sender[:-1])) if sender.size else real[:0]
    return Hulls(sender, room, gain, target, order, k, sender[first_steps])


@dataclass(frozen=True)
class Applied:
    """Each sender's choice (rate, mirrored pps, mechanism) and the fleet's weighted objective
    and bound."""

    senders: Senders
    rate: np.ndarray
    mirrored: np.ndarray
    objective: float  # weighted distinct packets, receivers' own included
    bound: float  # no 1-in-N (or K/65535) plan collects more (weighted)
    method: str  # "no room", "all fit", "MILP", "greedy"
    proved: bool
    #: what one pps of the receivers' room is worth (the hull step it runs out in)
    room_price: float
    #: per sender, True where it samples by the sample action (None: no sender may)
    sample: np.ndarray | None = None

    @property
    def optimal(self) -> bool:
        return self.proved or self.objective >= self.bound * (1 - EXACT_TOLERANCE)


def choose_applied(problem: Problem) -> Applied:
    """Each sender's 1-in-N (or K/65535 by the sample action) and mirrored pps maximising the
    weighted distinct packets as applied."""
    ladders = ladders_of(problem)
    senders = ladders[0]
    points = points_of(senders)
    subset = None
    if len(ladders) > 1:  # the senders that may sample, on the sample ladder only
        able = np.flatnonzero(ladders[1].grid)
        subset = (able, ladders[1].take(able))
        points = merged(points, points_of(subset[1]), able)
    hulls = hulls_of(points, None if len(ladders) == 1 else able)
    room = float(problem.room_pps.sum())
    receivers = problem.receiver & (problem.own_pps > 0)
    fixed = float((problem.weight * problem.own_pps)[receivers].sum())
    base = fixed + float(points.value[0].sum())
    bound = base + hulls.bound(room)

    def applied(rate, mirrored, value, sample, total_bound, method, proved) -> Applied:
        total = fixed + float(value.sum())
        chosen = None if len(ladders) == 1 else sample & (rate > 0)
        return Applied(
            senders,
            rate,
            mirrored,
            total,
            total if total_bound is None else max(total_bound, total),
            method,
            proved,
            hulls.price(room),
            chosen,
        )

    if room <= 0:  # nothing to share: every sender samples what it can afford alone
        at = np.zeros(hulls.size, dtype=np.int64)
        return applied(*points.at(at), points.sample_at(at), None, "no room", True)
    if float(hulls.room.sum()) <= room:
        at = hulls.final()
        return applied(*points.at(at), points.sample_at(at), bound, "all fit", True)
    competing = hulls.competing
    if competing.size <= MILP_UP_TO:
        # scipy's MILP (scipy.optimize, scipy.sparse: a second or more to import) only when
        # few senders compete
        from cosample.planner.quantised_milp import solve_knapsack

        found = solve_knapsack(ladders, points, competing, room)
        if found is not None:
            return applied(*found, None, "MILP", True)
    return applied(*_greedy(senders, subset, points, hulls, room), bound, "greedy", False)


def _greedy(
    senders: Senders,
    subset: tuple[np.ndarray, Senders] | None,
    points: Points,
    hulls: Hulls,
    room: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Whole hull steps by slope while they fit, first-fit over the next steps, one partial
    (``subset``: the positions of the senders that may sample and their sample ladder)."""
    k = hulls.size
    order = hulls.order
    ends = np.cumsum(hulls.room[order])
    whole = int(np.searchsorted(ends, room * (1 + 1e-12), side="right"))
    # the prefix keeps each sender's steps in order: its level is how many it took
    level = np.bincount(hulls.sender[order[:whole]], minlength=k)
    left = max(room - (float(ends[whole - 1]) if whole else 0.0), 0.0)
    first = np.searchsorted(hulls.sender, np.arange(k))  # a sender's first step
    rest = order[whole:]  # still in slope order: first-fit needs no further sort
    rest = rest[hulls.room[rest] <= left]
    for _ in range(FIRST_FIT_ROUNDS):
        # a step may be taken only after the sender's earlier ones (its level)
        rest = rest[
            (rest - first[hulls.sender[rest]] >= level[hulls.sender[rest]])
            & (hulls.room[rest] <= left)
        ]
        nexts = rest[rest - first[hulls.sender[rest]] == level[hulls.sender[rest]]]
        if nexts.size == 0:
            break
        taken = nexts[np.cumsum(hulls.room[nexts]) <= left * (1 + 1e-12)]
        level[hulls.sender[taken]] += 1
        left = max(left - float(hulls.room[taken].sum()), 0.0)
    at = np.zeros(k, dtype=np.int64)
    reached = np.flatnonzero(level > 0)
    at[reached] = hulls.target[first[reached] + level[reached] - 1]
    rate, mirrored, value = (a.copy() for a in points.at(at))
    sample = points.sample_at(at).copy()
    if left > 0 and k:
        _partial(senders, subset, rate, mirrored, value, sample, left)
    return rate, mirrored, value, sample


def _partial(
    flow: Senders,
    subset: tuple[np.ndarray, Senders] | None,
    rate: np.ndarray,
    mirrored: np.ndarray,
    value: np.ndarray,
    sample: np.ndarray,
    left: float,
) -> None:
    """Give the room left to the one sender that gains most from it, in place: on either
    ladder, the best plan mirroring all of ``mirrored + left``, or the vertex just below it
    (one N fewer, saturated)."""
    k = rate.size
    options: list[tuple[np.ndarray, ...]] = []  # (rate, mirrored, value, grid) arrays
    ladders: list[tuple[Senders, np.ndarray | None]] = [(flow, None)]
    if subset is not None:
        ladders.append((subset[1], subset[0]))
    for senders, able in ladders:
        if able is not None:  # the sample ladder: only where it differs from sFlow's
            k = able.size
            mirrored_at = mirrored[able]
        else:
            mirrored_at = mirrored
        wider = np.minimum(mirrored_at + left, senders.most_mirrored(np.zeros(k)))
        wide_rate, wide_value = senders.best_at(wider)
        below_n = senders.interval_for(wider) - 1
        below_n = np.where(below_n >= senders.n_min, below_n, senders.n_min)
        below_rate = senders.rate(below_n)
        below = np.minimum(senders.most_mirrored(below_rate), wider)
        below_value = np.where(
            np.isfinite(senders.n_min), senders.value(below_rate, below), -np.inf
        )
        use_below = below_value > wide_value
        option = (
            np.where(use_below, below_rate, wide_rate),
            np.where(use_below, below, wider),
            np.maximum(below_value, wide_value),
            senders.grid,
        )
        if able is not None:  # the better ladder per sender (sFlow's on ties)
            other = option[2] > options[0][2][able]
            for whole, part in zip(options[0], option):
                whole[able] = np.where(other, part, whole[able])
            continue
        options.append(tuple(np.array(a, copy=True) for a in option))
    new_rate, new_mirrored, new_value, new_grid = options[0]
    gain = new_value - value
    best = int(np.argmax(gain))
    if gain[best] > 0:
        rate[best], mirrored[best], value[best] = (
            new_rate[best],
            new_mirrored[best],
            gain[best] + value[best],
        )
        sample[best] = new_grid[best]
