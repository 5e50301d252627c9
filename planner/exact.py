"""The exact solver: distinct packets as the switches apply them, and the bounds around them.

Structure (docs/planner.md, "Why the plan is exact" and "Every plan OVS can apply"): first the
*split plan*, which keeps receivers at 1-in-1 and senders apart: the servers that can afford
sampling their bridge 1-in-1 (P, ``Problem.receiver``) sample all their own traffic and offer
their leftover capacity as room, ``(spare - alpha x bridge input) / (alpha + beta)`` pps; with a
full mesh only the total room R matters, and the others (senders) share it, each choosing its
sFlow 1-in-N (or off) with what it mirrors (``quantised.choose_applied``, O(n log n)). Then a
bound on every plan OVS can apply, where any server takes copies at its own 1-in-N and may send
too (the paper's LP, and ``applied_bound``'s prices); when the split plan does not meet it and
few servers have capacity to spare, the MILP over every applied plan (``applied_milp``) plans
instead (there the price search waits for the MILP: its dual bound is the tighter one, and the
search runs only if the MILP has not proved its plan). "Proved optimal" only where the plan meets the bound. Then the collector budget trims
the plan and ``pairing.pair_offloads`` draws few sender-receiver pairs (the MILP's plan brings
its own pairs).

``solve_continuous`` is the optimum when a local share may be any real number
(``distinct.choose``): the bound ``bounds.envelope`` and the reference of what 1-in-N costs.
``lp_bound`` is the paper's LP optimum (it counts ``l + m``, no overlap) with the same margin,
costs, weights and mirror caps: a fractional knapsack over the senders' gains ``w (1 - beta/A)``,
the reference the LPs are tested against and an upper bound on distinct packets.
"""

from __future__ import annotations

import time

import numpy as np

from cosample.planner.applied_bound import dual, price_bound
from cosample.planner.budgets import samples_bound, trim_to_collector_cap
from cosample.planner.choices import EXACT
from cosample.planner.datacentre import DataCentre
from cosample.planner.distinct import choose, continuous_envelope, senders_of
from cosample.planner.fleet import fleet_of
from cosample.planner.pairing import pair_offloads
from cosample.planner.problem import Problem, build_problem
from cosample.planner.quantised import choose_applied
from cosample.planner.solution import EXACT_TOLERANCE, Bounds, Solution

#: Above this gap to the bound, the greedy is compared with the continuous optimum rounded to
#: 1-in-N (``realise``) and the better plan kept; below it the rounding cannot win by much.
FALLBACK_GAP = 1e-6
#: Up to this many servers with capacity to spare, a plan short of the bound on every applied
#: plan is searched for by the MILP over them (``applied_milp``); above, its gap is reported.
SPACE_MILP_UP_TO = 12
#: Wall-clock seconds the MILP over every applied plan may take in all (then its best plan and
#: bound stand, with the gap).
SPACE_MILP_SECONDS = 10.0
#: The solver name of the continuous optimum (not offered on the command line: not applicable).
CONTINUOUS = "continuous"


def lp_bound(problem: Problem) -> float:
    """The paper's LP optimum (weighted ``l + m``) for ``problem``, without solving an LP.

    A sender i mirroring y pps samples ``(spare_i - beta_i y)/A_i`` locally, gaining
    ``w_i (1 - beta_i/A_i)`` per mirrored pps until ``l + m = 1``, its capacity or its mirror cap
    stops it; receivers collect all their own. The rest is a fractional knapsack over R.
    """
    own, spare, cost, beta, weight = (
        problem.own_pps,
        problem.spare_pps,
        problem.local_cost,
        problem.beta,
        problem.weight,
    )
    receiver = problem.receiver
    sender = ~receiver & (own > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(sender, weight * (1 - beta / cost), 0.0)
        useful = np.minimum(
            np.minimum((cost * own - spare) / (cost - beta), spare / beta), problem.mirror_cap_pps
        )
        base = np.where(sender, np.minimum(spare / cost, own), 0.0)
    useful = np.where(sender & (gain > 0), np.maximum(useful, 0.0), 0.0)
    total = float((weight * own)[receiver].sum() + (weight * base).sum())
    room = float(problem.room_pps.sum())
    candidates = np.flatnonzero(useful > 0)
    if candidates.size == 0 or room <= 0:
        return total
    if np.all(gain[candidates] == gain[candidates[0]]):  # one set of coefficients: any order
        order = candidates
    else:
        order = candidates[np.argsort(-gain[candidates], kind="stable")]
    ends = np.cumsum(useful[order])
    whole = int(np.searchsorted(ends, room, side="right"))
    total += float((gain[order[:whole]] * useful[order[:whole]]).sum())
    if whole < order.size:
        total += float(gain[order[whole]] * (room - (ends[whole - 1] if whole else 0.0)))
    return total


def lp_bounds_applied(problem: Problem) -> bool:
    """Whether the paper's LP bounds every plan OVS can apply, not only those whose receivers
    sample 1-in-1 (docs/model.md). A server k that takes copies at 1-in-N spends at least
    ``alpha_k + beta_k`` of its capacity per copy it samples, each worth at most the heaviest
    sender's weight; the LP spends that capacity on k's own packets instead (k's local share,
    or its 1-in-1 as a receiver), at ``alpha_k B_k / U_k`` each. So the LP is a bound when no
    server's own packets are worth less per unit of capacity than a copy:
    ``w_k U_k (alpha_k + beta_k) >= max w_j alpha_k B_k`` for every server with capacity to
    spare. Equal weights and bridges that sample only their own traffic satisfy it; a heavier
    sender, or a bridge sampling much inbound traffic, may not (the price bound then alone)."""
    heaviest = float(problem.weight[problem.own_pps > 0].max(initial=0.0))
    spare = problem.spare_pps > 0
    own_worth = problem.weight * problem.own_pps * (problem.alpha + problem.beta)
    copy_worth = heaviest * problem.alpha * problem.bridge_pps
    return bool(np.all(own_worth[spare] >= copy_worth[spare]))


def optimum_pps(dc: DataCentre) -> float:
    """The paper's LP optimum as the paper states it: no headroom, point costs (for its figures)."""
    return lp_bound(build_problem(dc, margin=0.0))


def solve_exact(problem: Problem) -> Solution:
    """The plan as the switches apply it, and a bound on every plan they can apply.

    First the plan that keeps senders and receivers apart (receivers sample 1-in-1, senders
    choose their 1-in-N with their mirror share: ``quantised.choose_applied``), then the bound
    on every applied plan (``applied_bound``: any server may take copies at its own 1-in-N and
    may send and take at once; and the paper's LP). When the plan does not meet it and few
    servers have capacity to spare, the MILP over every applied plan (``applied_milp``)
    replaces it. Then the collector budget and the pairing. ``bounds.applied`` bounds every
    applied plan; ``bounds.envelope`` the continuous optimum (receivers 1-in-1), at least it."""
    started = time.perf_counter()
    chosen = choose_applied(problem)
    senders = chosen.senders
    offload = np.zeros(problem.size)
    offload[senders.index] = chosen.mirrored
    local = problem.own_pps.astype(float).copy()
    local[senders.index] = senders.own * chosen.rate
    sample_hosts = None
    if chosen.sample is not None:  # who takes the local share by the sample action
        sample_hosts = np.zeros(problem.size, dtype=bool)
        sample_hosts[senders.index] = chosen.sample
    src, dst, pps = pair_offloads(offload, problem.room_pps)
    method = f"{chosen.method} (receivers 1-in-1)"
    objective = chosen.objective
    capped = np.isfinite(problem.collector_cap_pps)
    cap = samples_bound(problem, problem.collector_cap_pps)
    continuous, rates = None, None
    fleet = fleet_of(problem)
    paper = lp_bound(problem)
    bound = paper if lp_bounds_applied(problem) else np.inf
    milp = not capped and np.count_nonzero(fleet.spare > 0) <= SPACE_MILP_UP_TO
    priced = False
    if objective < bound * (1 - EXACT_TOLERANCE):  # not met by the paper's LP: price copies
        if milp:  # one price first: the MILP's own bound is tight where the search is not
            bound = min(bound, dual(fleet, 0.0, chosen.room_price))
        else:
            bound, priced = min(bound, price_bound(fleet, chosen.room_price)[0]), True
    if milp and objective < bound * (1 - EXACT_TOLERANCE):
        # deferred: scipy.optimize takes a third of a second to import, and most plans
        # meet the bound without the MILP (the embedded example does)
        from cosample.planner.applied_milp import solve_space

        found = solve_space(fleet, _limits(chosen), SPACE_MILP_SECONDS)
        if found is not None:
            bound = min(bound, found.bound)
            if found.objective > objective:
                local, src, dst, pps = (
                    problem.own_pps * found.rate,
                    found.src,
                    found.dst,
                    found.pps,
                )
                sample_hosts = found.sample if sample_hosts is not None else None
                rates, objective, method = found.rate, found.objective, "MILP"
    if not priced and objective < bound * (1 - EXACT_TOLERANCE):  # no proof yet: search prices
        bound = min(bound, price_bound(fleet, chosen.room_price)[0])
    bound = max(bound, objective)
    if (
        rates is None
        and not capped
        and objective < bound * (1 - EXACT_TOLERANCE)
        and chosen.objective < chosen.bound * (1 - FALLBACK_GAP)
    ):
        continuous = solve_continuous(problem)  # the greedy may miss what rounding finds
        rounded = continuous.applied
        if float((problem.weight * rounded.distinct_pps).sum()) > objective:
            keep = rounded.mirror_pps > 0
            local, src, dst, pps = (
                rounded.local_pps,
                rounded.mirror_src[keep],
                rounded.mirror_dst[keep],
                rounded.mirror_pps[keep],
            )
            sample_hosts = continuous.sample_hosts
            method = "continuous optimum rounded (beat the greedy)"
    proved = objective >= bound * (1 - EXACT_TOLERANCE)
    if capped:
        received = np.bincount(dst, weights=pps, minlength=problem.size)
        trimmed_local, trimmed = trim_to_collector_cap(problem, local, offload, received)
        if not (np.array_equal(trimmed_local, local) and np.array_equal(trimmed, offload)):
            local, offload = trimmed_local, trimmed
            src, dst, pps = pair_offloads(offload, problem.room_pps)
            method, proved = method + ", trimmed to the collector budget", False
    bounds = Bounds(
        lp=min(paper, cap),
        envelope=min(max(continuous_envelope(problem), bound), cap),
        method=method,
        optimal=proved,
        applied=min(bound, cap),
    )
    return Solution(
        EXACT,
        local,
        src,
        dst,
        pps,
        problem=problem,
        bounds=bounds,
        seconds=time.perf_counter() - started,
        known_continuous=continuous,
        sample_hosts=sample_hosts,
        rates=rates,
    )


def _limits(chosen) -> dict[int, tuple[float, ...]]:
    """Each sender's N where its mirroring reaches its limit, and the N before it (the split
    plan's candidates: explicit in the MILP from the start)."""
    senders = chosen.senders
    cap = senders.n_cap
    return {
        int(i): tuple(float(n) for n in (cap[k] - 1, cap[k]) if np.isfinite(n))
        for k, i in enumerate(senders.index)
        if not senders.grid[k]
    }


def solve_continuous(problem: Problem) -> Solution:
    """The continuous optimum (local rates any real number): the bound a 1-in-N plan is
    measured against, and what ``solve_exact`` planned before rates were integer intervals.
    A server that may use the sample action and finds it cheaper plans with it
    (``Problem.local_cost``), and its share is rounded on that mechanism's grid."""
    started = time.perf_counter()
    senders = senders_of(problem)
    choice = choose(problem, senders)
    offload = choice.offload_pps
    local = problem.own_pps.astype(float).copy()
    local[senders.index] = senders.local_pps(offload[senders.index])
    src, dst, pps = pair_offloads(offload, problem.room_pps)
    method, optimal = choice.method, choice.optimal
    if np.isfinite(problem.collector_cap_pps):
        received = np.bincount(dst, weights=pps, minlength=problem.size)
        trimmed_local, trimmed = trim_to_collector_cap(problem, local, offload, received)
        if not (np.array_equal(trimmed_local, local) and np.array_equal(trimmed, offload)):
            local, offload = trimmed_local, trimmed
            src, dst, pps = pair_offloads(offload, problem.room_pps)
            method, optimal = method + ", trimmed to the collector budget", False
    bounds = Bounds(
        lp=min(lp_bound(problem), samples_bound(problem, problem.collector_cap_pps)),
        envelope=min(choice.envelope, samples_bound(problem, problem.collector_cap_pps)),
        method=method,
        optimal=optimal,
    )
    return Solution(
        CONTINUOUS,
        local,
        src,
        dst,
        pps,
        problem=problem,
        bounds=bounds,
        seconds=time.perf_counter() - started,
        sample_hosts=None if problem.can_sample is None else problem.cheaper_sample,
    )
