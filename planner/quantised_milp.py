"""The exact 1-in-N knapsack for few competing senders: a MILP over N, refined lazily.

Each sender picks one item (binary) and a mirrored amount (continuous):

- *segment* N (an explicit interval): mirrors ``q <= y(1/N)``, collects ``w (U/N + (1 - 1/N) q)``;
- *off*: mirrors ``q <= min(c, S/beta)``, collects ``w q``;
- *gap* between explicit N_a < N_b (not adjacent; N_b may be off): stands for every N between
  them. Between their vertices the value of any plan with such an N is at most the convex curve
  the vertices lie on, hence at most the chord: the gap item mirrors ``y_a + d``,
  ``0 <= d <= y_b - y_a``, and collects ``v_a + d x chord slope``. Below ``y_a`` N_a does better.

Solved with scipy's ``milp`` (HiGHS, no PuLP round trip). The gap items relax the explicit ones, so the MILP's optimum bounds every 1-in-N plan. When it
picks a gap strictly inside, the interval of the segment it landed in (and the one before) become
explicit and the MILP is solved again; when it picks none, its solution is a plan the switches
can apply and the bound is met: proved optimal (to the MILP's relative gap, 1e-9). N_min,
N_c - 1, N_c and off start explicit (``quantised.points_of``).

A sender that may use the sample action has items on both ladders (``ladders.ladders_of``;
a level there is a probability K/65535), all in its one choose-at-most-one group: the MILP
chooses the mechanism with the rate.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from cosample.planner.ladders import Points, Senders, on_ladders

#: Refinements before giving up (the caller then falls back to the greedy and its gap).
MAX_ROUNDS = 40
MIP_GAP = 1e-9
#: All MILP rounds together; past it the caller falls back to the greedy and its gap.
TIME_LIMIT_S = 10.0
#: Explicit from the start: N_min and the next DENSE - 1, then N_min x 2, x 4, ... (LADDER - 1).
DENSE, LADDER = 6, 12
#: A gap item picked this close (relative to its width) to an end is that end's vertex.
END_TOLERANCE = 1e-7


def solve_knapsack(
    ladders: tuple[Senders, ...], points: Points, competing: np.ndarray, room: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(rate, mirrored, value, sample) per sender, optimal over every 1-in-N (and K/65535)
    plan; None if unsolved. ``ladders``: the senders on sFlow's ladder, and on the sample
    action's (``ladders.ladders_of``).

    Senders outside ``competing`` keep their point 0 (they cannot gain from room).
    """
    k = ladders[0].index.size
    rate, mirrored = points.rate[0].copy(), np.zeros(k)
    sample = points.grid[0].copy()
    explicit = {
        int(i): {
            (j, n)
            for j, senders in enumerate(ladders)
            if j == 0 or senders.grid[i]
            for n in _initial(senders, int(i))
        }
        for i in competing
    }
    deadline = time.monotonic() + TIME_LIMIT_S
    for _ in range(MAX_ROUNDS):
        left = deadline - time.monotonic()
        picks = _solve(ladders, explicit, room, left) if left > 0 else None
        if picks is None:
            return None
        refined = False
        for i, (j, kind, n_a, n_b, amount) in picks.items():
            senders = ladders[j]
            if kind == "gap":
                extra = _split(senders, i, n_a, n_b, amount)
                if extra:
                    explicit[i] |= {(j, n) for n in extra}
                    refined = True
                    continue
                y_a, y_b = _vertex(senders, i, n_a)[0], _vertex(senders, i, n_b)[0]
                n_a = n_a if amount <= (y_a + y_b) / 2 else n_b
                amount = min(amount, y_a if n_a != n_b else y_b)
            rate[i], mirrored[i] = float(_one(senders, i).rate(np.array([n_a]))[0]), amount
            sample[i] = bool(senders.grid[i])
        if not refined:
            excess = float(mirrored.sum()) - room
            if excess > 0:  # the MILP's feasibility tolerance: trim the largest share
                j = int(np.argmax(mirrored))
                mirrored[j] = max(mirrored[j] - excess, 0.0)
            chosen = on_ladders(ladders, sample)
            cap = chosen.most_mirrored(rate)
            mirrored = np.minimum(mirrored, cap)
            return rate, mirrored, chosen.value(rate, mirrored), sample
    return None


def _initial(senders: Senders, i: int) -> set[float]:
    """N_min, N_c - 1, N_c (the finite ones), off, and a few N between them (the first
    ``DENSE`` after N_min, then doubling) so that fewer refinements are needed."""
    n_min, n_cap = float(senders.n_min[i]), float(senders.n_cap[i])
    chosen = {np.inf}
    if np.isfinite(n_min):
        top = min(n_cap - 1, float(np.max(_one(senders, i).top_level)))
        chosen |= {n for n in n_min + np.arange(DENSE) if n <= top}
        chosen |= {n for n in n_min * 2.0 ** np.arange(1, LADDER) if n <= top}
    if np.isfinite(n_cap):
        chosen |= {n_cap, max(n_cap - 1, n_min)}
    return chosen


def _vertex(senders: Senders, i: int, n: float) -> tuple[float, float]:
    """(mirrored, value) of sender i at 1-in-n (level n) saturated (n = inf: off)."""
    sub = _one(senders, i)
    t = sub.rate(np.array([n]))
    y = sub.most_mirrored(t)
    return float(y[0]), float(sub.value(t, y)[0])


def _one(senders: Senders, i: int) -> Senders:
    return Senders(*(getattr(senders, f)[i : i + 1] for f in senders.__dataclass_fields__))


def _items(senders: Senders, i: int, explicit: set[float]):
    """(kind, n_a, n_b, room_fixed, room_max, value_fixed, slope) for sender i."""
    n_cap = float(senders.n_cap[i])
    ordered = sorted(explicit)
    items = []
    for n in ordered:
        y, _ = _vertex(senders, i, n)
        t = float(_one(senders, i).rate(np.array([n]))[0])
        w, own = float(senders.weight[i]), float(senders.own[i])
        items.append(("segment", n, n, 0.0, y, w * own * t, w * (1 - t)))
    for n_a, n_b in zip(ordered, ordered[1:]):
        if n_b == n_a + 1 or n_a >= n_cap - 1:  # adjacent, or past the convex part
            continue
        y_a, v_a = _vertex(senders, i, n_a)
        y_b, v_b = _vertex(senders, i, n_b)
        if y_b <= y_a:
            continue
        items.append(("gap", n_a, n_b, y_a, y_b - y_a, v_a, (v_b - v_a) / (y_b - y_a)))
    return items


def _solve(
    ladders: tuple[Senders, ...],
    explicit: dict[int, set[tuple[int, float]]],
    room: float,
    seconds: float,
):
    """One MILP (scipy's HiGHS); {sender: (ladder, kind, n_a, n_b, mirrored)} it picked, None
    if unsolved."""
    rows = [
        (i, (j, *item))
        for i, ns in explicit.items()
        for j, senders in enumerate(ladders)
        for item in _items(senders, i, {n for at, n in ns if at == j})
        if ns
    ]
    m = len(rows)
    if m == 0:
        return {}
    ladder = [item[0] for _, item in rows]
    kind = [item[1] for _, item in rows]
    n_a = np.array([item[2] for _, item in rows])
    n_b = np.array([item[3] for _, item in rows])
    fixed, width, value, slope = (np.array([item[j] for _, item in rows]) for j in (4, 5, 6, 7))
    owner = np.array([i for i, _ in rows])
    senders_listed, group = np.unique(owner, return_inverse=True)
    # variables: z (m binaries), then q (m amounts)
    cost = -np.concatenate((value, slope))
    eye = sparse.identity(m, format="csr")
    link = sparse.hstack((-sparse.diags(width), eye))  # q - width z <= 0
    one = sparse.hstack(
        (
            sparse.csr_matrix((np.ones(m), (group, np.arange(m))), shape=(senders_listed.size, m)),
            sparse.csr_matrix((senders_listed.size, m)),
        )
    )  # sum z <= 1
    used = sparse.csr_matrix(np.concatenate((fixed, np.ones(m)))[None, :])  # room
    constraints = [
        LinearConstraint(link, -np.inf, 0.0),
        LinearConstraint(one, -np.inf, 1.0),
        LinearConstraint(used, -np.inf, room),
    ]
    result = milp(
        cost,
        constraints=constraints,
        integrality=np.concatenate((np.ones(m), np.zeros(m))),
        bounds=Bounds(np.zeros(2 * m), np.concatenate((np.ones(m), width))),
        options={"mip_rel_gap": MIP_GAP, "time_limit": seconds},
    )
    if result.status != 0 or result.x is None:
        return None
    z, q = result.x[:m], np.maximum(result.x[m:], 0.0)
    picks = {}
    for j in np.flatnonzero(z > 0.5).tolist():
        picks[int(owner[j])] = (
            ladder[j],
            kind[j],
            float(n_a[j]),
            float(n_b[j]),
            float(fixed[j] + q[j]),
        )
    flow = ladders[0]
    for i in explicit:
        picks.setdefault(i, (0, "segment", float(flow.n_min[i]), float(flow.n_min[i]), 0.0))
    return picks


def _split(senders: Senders, i: int, n_a: float, n_b: float, amount: float) -> set[float]:
    """New explicit intervals where a gap item landed strictly inside, else empty."""
    y_a, _ = _vertex(senders, i, n_a)
    y_b, _ = _vertex(senders, i, n_b)
    width = y_b - y_a
    if amount <= y_a + END_TOLERANCE * width or amount >= y_b - END_TOLERANCE * width:
        return set()
    n = float(_one(senders, i).interval_for(np.array([amount]))[0])
    new = {m for m in (n - 1, n) if n_a < m < n_b and np.isfinite(m)}
    if not new and np.isfinite(n_b):
        new = {min(max(n_a + 1, n - 1), n_b - 1)}
    elif not new:
        new = {n_a + 1} if n_a + 1 < n_b else set()
    return new
