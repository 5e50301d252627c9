"""The best plan the switches can apply, for small fleets: a MILP over every server's rate.

The space (``fleet``): every server picks its sFlow 1-in-N (or off, or where it may a K/65535
by the sample action), mirrors shares of its own traffic to any other server and takes copies
from any other server at its own N. For fixed rates the mirror shares are an LP
(``applied_mirrors.mirror_lp``). Here the rates are binaries over *items*, per server:

- an explicit rate (1/N, K/65535 or off): exactly its value and cost;
- an interval between two explicit rates, standing for every rate of the ladder inside it: its
  rate ``tau`` is a variable between the interval's ends (local value and cost exact), the
  credit of the server's copies sampled elsewhere, ``(1 - t) G``, and the sampling of copies it
  takes in, ``t I``, are bounded by McCormick's inequalities, and copies taken in are valued at
  the interval's highest rate: a relaxation, so the MILP bounds every applied plan.

Products of a rate with copies are linear by disaggregation: ``G``, ``I`` and their products
belong to an item and vanish with its binary. Copies are pooled by the rate they are sampled at
(a pool per sFlow N: an item taking copies joins the pool of the largest listed N at most its
own, valued at that pool's rate, and the pools are refined when that is not its own):
``Y_ic`` copies of server i go to pool c; a pool's copies sent equal those taken in, and a
server takes at most what the others send to its pool (``Y_ic + I_ic`` at most the pool), which
is exactly when the pooled flows split into pairs without a server mirroring to itself. With
explicit items only, this is the applied problem itself.

Lazily: an interval the MILP picks is split (its ends, its middle, the levels next to its rate,
levels a factor 4 apart) and the MILP solved again. Every round's dual bound bounds every
applied plan; each round's plan takes the picks' rates (an interval's level next to its rate)
and ``mirror_lp``'s shares. Proved optimal when the best plan meets the least bound within
``PROOF_TOLERANCE`` (relative 1e-6: HiGHS's dual bound is as exact as its feasibility
tolerances, 1e-7 per row in pps, and was seen 1.3e-7 above the brute force's best on a
three-server fleet; the planner's ``optimal`` still asks 1e-9, ``solution.EXACT_TOLERANCE``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE as SCALE
from cosample.planner.applied_mirrors import mirror_lp
from cosample.planner.fleet import Fleet
from cosample.planner.realise import MAX_INTERVAL

MAX_ROUNDS = 40
MIP_GAP = 1e-9
#: Relative: a plan this close to the MILP's dual bound is its optimum (see the module's text).
PROOF_TOLERANCE = 1e-6
#: All rounds together; past it the caller keeps its plan and the bound it has.
TIME_LIMIT_S = 10.0
#: Explicit from the start: the highest affordable rate and the next DENSE - 1, then LADDER - 1
#: halvings; the intervals between them are split only where the MILP picks one. Few: on the
#: 40 fleets of ``python -m research.planner_ladder`` (2, 4) took 0.56 of the CPU of (4, 11)
#: with the same plans (within the proof's tolerance), all proved.
DENSE, LADDER = 2, 4
FLOW, SAMPLE = 0, 1
#: The sFlow Ns copies are pooled by at first: 1..8, then two a factor 2 (refined when needed).
INITIAL_POOLS = tuple(
    float(n)
    for n in sorted({*range(1, 9), *(round(8 * 2 ** (k / 2)) for k in range(1, 60))})
    if n <= MAX_INTERVAL
)
HIGHS_OPTIONS = {
    "mip_rel_gap": MIP_GAP,
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
}


@dataclass(frozen=True)
class Found:
    """A plan of the whole space and what bounds every plan."""

    rate: np.ndarray  # each server's local rate (1/N, K/65535 or 0)
    sample: np.ndarray  # bool: by the sample action
    src: np.ndarray
    dst: np.ndarray
    pps: np.ndarray
    objective: float
    bound: float
    rounds: int

    @property
    def proved(self) -> bool:
        return self.objective >= self.bound * (1 - PROOF_TOLERANCE)


def rate_of(ladder: int, level: float) -> float:
    """sFlow's level N is 1/N (inf: off); the sample ladder's level is K itself."""
    if ladder == SAMPLE:
        return level / SCALE
    return 0.0 if not np.isfinite(level) else 1.0 / level


def initial_levels(
    fleet: Fleet,
    i: int,
    extra: tuple[float, ...] = (),
    start: tuple[int, int] = (DENSE, LADDER),
) -> set[tuple[int, float]]:
    """Server i's explicit levels at first: its highest affordable rate and a few below,
    then halving (``start``: how many of each); ``extra`` sFlow Ns (e.g. where its mirroring
    reaches its limit); off."""
    levels = {(FLOW, np.inf)}
    n_min = float(fleet.n_min[i])
    dense_count, ladder_count = start
    if np.isfinite(n_min):
        dense = n_min + np.arange(dense_count)
        wide = n_min * 2.0 ** np.arange(1, ladder_count)
        chosen = {*dense, *wide, *(float(n) for n in extra if n >= n_min)}
        levels |= {(FLOW, n) for n in chosen if n <= MAX_INTERVAL}
    k_max = float(fleet.k_max[i])
    if k_max >= 1:
        dense = k_max - np.arange(dense_count)
        wide = np.floor(k_max / 2.0 ** np.arange(1, ladder_count))
        levels |= {(SAMPLE, k) for k in (*dense, *wide, 1.0) if 1 <= k <= k_max}
    return levels


def items_of(fleet: Fleet, i: int, levels: set[tuple[int, float]]) -> list[tuple]:
    """(ladder, low level, high level, t_hi, t_lo, explicit) of server i: its explicit levels
    and the intervals between them (levels in rate order, highest rate first)."""
    items = []
    for ladder in (FLOW, SAMPLE):
        listed = sorted(n for at, n in levels if at == ladder)
        if ladder == SAMPLE:
            listed = sorted(listed, reverse=True)  # K falls as N rises
        for n in listed:
            t = rate_of(ladder, n)
            items.append((ladder, n, n, t, t, True))
        for a, b in zip(listed, listed[1:]):
            inner = (a + 1, b - 1) if ladder == FLOW else (a - 1, b + 1)
            if ladder == FLOW and not np.isfinite(b):
                inner = (a + 1, float(MAX_INTERVAL))
            if (inner[0] > inner[1]) if ladder == FLOW else (inner[0] < inner[1]):
                continue
            t_hi, t_lo = rate_of(ladder, inner[0]), rate_of(ladder, inner[1])
            items.append((ladder, inner[0], inner[1], t_hi, t_lo, False))
    return items


def solve_space(
    fleet: Fleet,
    extra: dict[int, tuple[float, ...]] | None = None,
    seconds: float = TIME_LIMIT_S,
    start: tuple[int, int] = (DENSE, LADDER),
) -> Found | None:
    """The best applied plan of ``fleet`` and a bound on every applied plan (None: no MILP
    round finished in time). ``extra``: more explicit sFlow Ns per server from the start;
    ``start``: (DENSE, LADDER) of ``initial_levels``."""
    active = np.flatnonzero((fleet.spare > 0) | (fleet.full <= 0))
    levels = {
        int(i): initial_levels(fleet, int(i), (extra or {}).get(int(i), ()), start) for i in active
    }
    pools = set(INITIAL_POOLS)
    deadline = time.monotonic() + seconds
    best: Found | None = None
    bound = np.inf
    for rounds in range(1, MAX_ROUNDS + 1):
        left = deadline - time.monotonic()
        solved = _solve_milp(fleet, levels, pools, left) if left > 0 else None
        if solved is None:
            break
        dual_bound, picks = solved
        bound = min(bound, dual_bound)
        found = _plan_of(fleet, picks)
        if best is None or found.objective > best.objective:
            best = found
        best = replace(best, bound=bound, rounds=rounds)
        inside = {i: pick for i, pick in picks.items() if not pick[3]}
        pooled = {pick[6] for pick in picks.values() if pick[6] is not None} - pools
        if best.proved or not (inside or pooled):
            break
        for i, (ladder, low, high, _, tau, _, _) in inside.items():
            levels[i] |= {(ladder, n) for n in _split(ladder, low, high, tau)}
        pools |= pooled
    return best


def _near(ladder: int, low: float, high: float, tau: float) -> list[float]:
    """The levels of an interval's ladder next to rate ``tau`` (within the interval), nearest
    first; on sFlow's ladder off too."""
    if ladder == FLOW:
        n = 1.0 / tau if tau > 0 else high
        chosen = [float(np.clip(x, low, high)) for x in (round(n), np.floor(n), np.ceil(n))]
        chosen.append(np.inf)
    else:
        k = tau * SCALE
        chosen = [float(np.clip(x, high, low)) for x in (round(k), np.floor(k), np.ceil(k))]
    return list(dict.fromkeys(chosen))


def _plan_of(fleet: Fleet, picks: dict) -> Found:
    """The plan of a MILP's picks: explicit rates as picked, an interval's level next to its
    rate (each interval server then tries its other neighbours, one at a time), the mirror
    shares by ``mirror_lp``."""
    rate = np.zeros(fleet.size)
    sample = np.zeros(fleet.size, dtype=bool)
    options = {}
    for i, (ladder, low, high, explicit, tau, _, _) in picks.items():
        sample[i] = ladder == SAMPLE
        levels = [low] if explicit else _near(ladder, low, high, tau)
        options[i] = [rate_of(ladder, n) for n in levels]
        rate[i] = options[i][0]
    src, dst, pps, value = mirror_lp(fleet, rate, sample)
    for i, rates in options.items():
        for other in rates[1:]:
            trial = rate.copy()
            trial[i] = other
            found = mirror_lp(fleet, trial, sample)
            if found[3] > value:
                rate, (src, dst, pps, value) = trial, found
    return Found(rate, sample, src, dst, pps, value, np.inf, 0)


def _split(ladder: int, low: float, high: float, tau: float) -> set[float]:
    """Explicit levels for an interval the MILP picked: its ends, its middle (by rate) and,
    when its ends are far apart, levels spaced by a factor 4 between them (an interval
    reaching down to the lowest rates is otherwise halved some 30 times before its optimism,
    about the rate's own value, is below the tolerance)."""
    t_mid = (rate_of(ladder, low) + rate_of(ladder, high)) / 2
    mid = round(1 / t_mid) if ladder == FLOW else round(t_mid * SCALE)
    levels = {low, float(mid), high, *_near(ladder, low, high, tau)[:3]}
    a, b = min(low, high), max(low, high)
    levels |= {float(x) for x in np.floor(a * 4.0 ** np.arange(1, 17)) if a < x < b}
    return levels


class _Rows:
    """A sparse constraint matrix built family by family: ``add`` returns new row ids."""

    def __init__(self, columns: int) -> None:
        self.columns, self.count = columns, 0
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.low: list[np.ndarray] = []
        self.high: list[np.ndarray] = []

    def add(self, count: int, low: float, high) -> np.ndarray:
        ids = np.arange(self.count, self.count + count)
        self.count += count
        self.low.append(np.full(count, low))
        self.high.append(np.broadcast_to(np.asarray(high, dtype=float), (count,)).copy())
        return ids

    def put(self, rows, cols, values) -> None:
        rows, cols = np.asarray(rows), np.asarray(cols)
        values = np.broadcast_to(np.asarray(values, dtype=float), rows.shape)
        self.parts.append((rows, cols, values))

    def constraint(self) -> LinearConstraint:
        r, c, v = (np.concatenate([p[k] for p in self.parts]) for k in range(3))
        matrix = sparse.csr_matrix((v, (r, c)), shape=(self.count, self.columns))
        return LinearConstraint(matrix, np.concatenate(self.low), np.concatenate(self.high))


def _solve_milp(
    fleet: Fleet, levels: dict[int, set[tuple[int, float]]], pools: set[float], seconds: float
):
    """One MILP (scipy's HiGHS): its dual bound and each server's pick
    {i: (ladder, low, high, explicit, rate, takes copies, N to pool by)}; None if unsolved.
    ``pools``: the sFlow Ns copies are pooled by; an item taking copies joins the pool of the
    largest of them at most its N (so its copies are valued at that pool's rate, at least its
    own); the last field of a pick is its own N when it takes copies in a pool of a lower N.

    Per item p: z (chosen), tau (its rate: t_lo z .. t_hi z, so local value and cost are exact
    inside an interval), G (copies of the server's traffic sampled elsewhere), H (what they
    are worth: at most (1 - t_lo) G and (1 - t_hi) G + c (t_hi z - tau), McCormick), I (copies
    taken in) and W (their sampling: at least t_lo I and t_hi I - M (t_hi z - tau)); per
    sender and pool, Y."""
    rows = [(i, item) for i in levels for item in items_of(fleet, i, levels[i])]
    m = len(rows)
    owner = np.array([i for i, _ in rows])
    ladder = np.array([it[0] for _, it in rows])
    t_hi = np.array([it[3] for _, it in rows])
    t_lo = np.array([it[4] for _, it in rows])
    w, u, s = fleet.weight[owner], fleet.own[owner], fleet.spare[owner]
    beta, alpha = fleet.beta[owner], fleet.alpha[owner]
    full = np.where(ladder == SAMPLE, fleet.full_sample[owner], fleet.full[owner])
    # the most an item's server can send: its limit, and what its capacity pays for at t_lo
    limit = np.minimum(fleet.limit[owner], np.maximum(s - full * t_lo, 0.0) / beta)
    takes = (ladder == FLOW) & (t_hi > 0)
    most_in = np.where(takes, np.maximum(s - full * t_lo, 0.0) / (beta + alpha * t_lo), 0.0)
    listed = np.array(sorted(pools))
    with np.errstate(divide="ignore"):
        own_n = np.where(takes, np.round(1.0 / np.where(takes, t_hi, 1.0)), np.inf)
    pool_n = listed[np.maximum(np.searchsorted(listed, own_n * (1 + 1e-12), side="right") - 1, 0)]
    classes, cls = np.unique(np.where(takes, 1.0 / pool_n, 0.0), return_inverse=True)
    servers = np.array(sorted(levels), dtype=np.int64)
    senders = servers[fleet.limit[servers] > 0]
    at = np.searchsorted(servers, owner)
    c_n, k_s = classes.size, senders.size
    n_y = k_s * c_n
    z, tau, g, h, inn, wv, y = (k * m for k in range(7))
    total = 6 * m + n_y
    y_sender = np.repeat(np.arange(k_s), c_n)
    y_class = np.tile(np.arange(c_n), k_s)
    y_owner = senders[y_sender]
    ar, ay = np.arange(m), y + np.arange(n_y)
    cost = np.zeros(total)
    cost[tau + ar] = -(w * u)
    cost[h + ar] = -w
    built = _Rows(total)
    one = built.add(servers.size, 1.0, 1.0)
    built.put(one[at], z + ar, 1.0)
    cap = built.add(servers.size, -np.inf, fleet.spare[servers])
    built.put(cap[at], tau + ar, full)
    built.put(cap[at], inn + ar, beta)
    built.put(cap[at], wv + ar, alpha)
    built.put(cap[np.searchsorted(servers, y_owner)], ay, fleet.beta[y_owner])
    limits = built.add(k_s, -np.inf, fleet.limit[senders])
    built.put(limits[y_sender], ay, 1.0)
    is_sender = np.isin(owner, senders)
    credit = built.add(k_s, -np.inf, 0.0)
    built.put(credit[np.searchsorted(senders, owner[is_sender])], g + ar[is_sender], 1.0)
    built.put(credit[y_sender], ay, -classes[y_class])
    for sign, rate in ((1.0, t_lo), (-1.0, t_hi)):  # t_lo z <= tau <= t_hi z
        r = built.add(m, -np.inf, 0.0)
        built.put(r, z + ar, sign * rate)
        built.put(r, tau + ar, -sign)
    r = built.add(m, -np.inf, 0.0)  # G <= c z
    built.put(r, g + ar, 1.0)
    built.put(r, z + ar, -limit)
    r = built.add(m, -np.inf, 0.0)  # H <= (1 - t_lo) G
    built.put(r, h + ar, 1.0)
    built.put(r, g + ar, -(1 - t_lo))
    r = built.add(m, -np.inf, 0.0)  # H <= (1 - t_hi) G + c t_hi z - c tau
    built.put(r, h + ar, 1.0)
    built.put(r, g + ar, -(1 - t_hi))
    built.put(r, z + ar, -limit * t_hi)
    built.put(r, tau + ar, limit)
    r = built.add(m, -np.inf, 0.0)  # I <= M z
    built.put(r, inn + ar, 1.0)
    built.put(r, z + ar, -most_in)
    r = built.add(m, -np.inf, 0.0)  # W >= t_lo I
    built.put(r, inn + ar, t_lo)
    built.put(r, wv + ar, -1.0)
    r = built.add(m, -np.inf, 0.0)  # W >= t_hi I - M t_hi z + M tau
    built.put(r, inn + ar, t_hi)
    built.put(r, z + ar, -most_in * t_hi)
    built.put(r, tau + ar, most_in)
    built.put(r, wv + ar, -1.0)
    balance = built.add(c_n, 0.0, 0.0)  # a pool's copies sent = taken in
    built.put(balance[y_class], ay, 1.0)
    built.put(balance[cls], inn + ar, -1.0)
    # Y_ic <= the pool's copies taken in by others, where i may take copies in pool c too
    # (elsewhere the balance implies it)
    both = np.flatnonzero(np.isin(y_owner * c_n + y_class, owner[takes] * c_n + cls[takes]))
    noself = built.add(both.size, -np.inf, 0.0)
    built.put(noself, ay[both], 1.0)
    for k in range(c_n):
        mine, cols = np.flatnonzero(y_class[both] == k), np.flatnonzero(cls == k)
        if mine.size and cols.size:
            others = owner[cols][None, :] != y_owner[both[mine]][:, None]
            rr, cc = np.nonzero(others)
            built.put(noself[mine[rr]], inn + cols[cc], -1.0)
    integrality = np.zeros(total)
    integrality[z + ar] = 1
    high = np.full(total, np.inf)
    high[z + ar], high[tau + ar] = 1.0, t_hi
    high[g + ar], high[h + ar] = limit, limit
    high[inn + ar] = most_in
    high[ay] = fleet.limit[y_owner]
    solved = _highs(cost, built.constraint(), integrality, high, seconds)
    if solved is None:
        return None
    dual_bound, x = solved
    picks = {}
    for j in np.flatnonzero(x[z + ar] > 0.5).tolist():
        item = rows[j][1]
        taking = float(x[inn + j]) > 1e-9 * max(float(most_in[j]), 1.0)
        inexact = taking and own_n[j] > pool_n[j]
        picks[int(owner[j])] = (
            *item[:3],
            item[5],
            float(x[tau + j]),
            taking,
            float(own_n[j]) if inexact else None,
        )
    return dual_bound, picks


def _highs(cost, constraint: LinearConstraint, integrality, high, seconds: float):
    """Minimise ``cost`` (a MILP, scipy's HiGHS, the sub-MIP heuristics off: two thirds of the
    time here otherwise; scipy passes options it does not know to HiGHS verbatim, with a
    warning); (-dual bound, x), None if unsolved."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
        result = milp(
            cost,
            constraints=constraint,
            integrality=integrality,
            bounds=Bounds(np.zeros(cost.size), high),
            options={**HIGHS_OPTIONS, "time_limit": max(seconds, 0.01)},
        )
    if result.status != 0 or result.x is None:
        return None
    bound = getattr(result, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        bound = result.fun
    return -float(bound), result.x
