"""The paper's linear program (Sec. IV-A), full or reduced by its P/Q rule, solved with PuLP.

Per-server coefficients: at server i, sampling its own traffic costs alpha_i, mirroring it costs
beta_i, and receiving another server's mirrored packet costs beta_i + alpha_i (receive, then
sample). The full LP has a variable s[i][k] for every sender i with traffic and every server k;
the reduced LP fixes s[k][k] = 1 for the receivers P and keeps only s[i][i] and s[i][k] for
senders i in Q and receivers k in P.
"""

from __future__ import annotations

import time

import numpy as np
import pulp

from cosample.planner.choices import DEFAULT_LP_BACKEND, FULL, LP_BACKENDS, REDUCED
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import SolverError
from cosample.planner.exact import split
from cosample.planner.pairing import pair_offloads
from cosample.planner.solution import Solution

BACKENDS = LP_BACKENDS


def backend(name: str, time_limit: float | None = None) -> pulp.LpSolver:
    """A PuLP solver by name, checked to be available."""
    if name not in BACKENDS:
        raise SolverError(f"unknown LP backend {name!r} (choose from {', '.join(BACKENDS)})")
    class_name, hint = BACKENDS[name]
    options = {"msg": False}
    if time_limit is not None:
        options["timeLimit"] = time_limit
    solver = getattr(pulp, class_name)(**options)
    if not solver.available():
        raise SolverError(f"LP backend {name!r} is not available: {hint}")
    return solver


def backend_available(name: str) -> str | None:
    """None when the backend can run here, else why not."""
    try:
        backend(name)
    except SolverError as exc:
        return str(exc)
    return None


def solve_lp(dc: DataCentre, reduced: bool = True, lp_backend: str = DEFAULT_LP_BACKEND,
             time_limit: float | None = None) -> Solution:
    """Build and solve the LP; a non-optimal status raises ``SolverError`` with the status.

    The solution is returned in canonical form (see ``canonical``): receivers sample all their
    own traffic, senders mirror only to receivers, pairs drawn to keep tunnels few. The full LP
    is degenerate; when its optimum is not canonical, the plan comes from the reduced LP (the
    full LP restricted to canonical solutions, with the same optimum), while ``collected_pps``
    stays the full LP's objective.
    """
    started = time.perf_counter()
    dc.check_feasible()
    solver = backend(lp_backend, time_limit)
    objective, values, variables = _solve(dc, reduced, solver, lp_backend)
    shape = canonical(dc, values)
    if shape is None:
        _, values, _ = _solve(dc, True, solver, lp_backend)
        shape = canonical(dc, values)
    local, src, dst, pps = shape
    return Solution(REDUCED if reduced else FULL, objective, local, src, dst, pps,
                    seconds=time.perf_counter() - started, variables=variables,
                    lp_backend=lp_backend)


def _solve(dc: DataCentre, reduced: bool, solver: pulp.LpSolver, lp_backend: str
           ) -> tuple[float, dict[tuple[int, int], float], int]:
    """(objective, {(i, k): pps of i's traffic sampled at k}, number of variables)."""
    own, spare, alpha, beta = dc.own_pps, dc.spare_pps, dc.alpha, dc.beta
    senders_mask = own > 0
    if reduced:
        receivers_mask = spare - alpha * own >= 0
        senders_mask &= ~receivers_mask
    else:
        receivers_mask = np.ones(dc.size, dtype=bool)
    senders = np.flatnonzero(senders_mask).tolist()
    receivers = np.flatnonzero(receivers_mask).tolist()
    fixed = np.flatnonzero(receivers_mask & (own > 0)).tolist() if reduced else []

    problem = pulp.LpProblem("collaborative_sampling", pulp.LpMaximize)
    share: dict[tuple[int, int], pulp.LpVariable] = {}
    for i in senders:
        for k in [i] + [k for k in receivers if k != i]:
            share[i, k] = problem.add_variable(f"s_{i}_{k}", lowBound=0, upBound=1)
    problem += pulp.lpSum(own[i] * var for (i, _), var in share.items()) + float(own[fixed].sum())

    incoming: dict[int, list] = {k: [] for k in range(dc.size)}
    own_cost: dict[int, list] = {i: [] for i in senders}
    outgoing: dict[int, list] = {i: [] for i in senders}
    for (i, k), var in share.items():
        outgoing[i].append(var)
        if k == i:
            own_cost[i].append(alpha[i] * own[i] * var)
        else:
            own_cost[i].append(beta[i] * own[i] * var)
            incoming[k].append((alpha[k] + beta[k]) * own[i] * var)
    for i in senders:
        problem += pulp.lpSum(outgoing[i]) <= 1, f"share_{i}"
    for k in range(dc.size):
        load = incoming[k] + own_cost.get(k, [])
        if load:
            fixed_cost = float(alpha[k] * own[k]) if k in fixed else 0.0
            problem += pulp.lpSum(load) + fixed_cost <= float(spare[k]), f"capacity_{k}"

    values = {(k, k): float(own[k]) for k in fixed}
    if not share:  # nothing to decide: every server with traffic samples all of it
        return float(own[fixed].sum()), values, 0
    try:
        status = problem.solve(solver)
    except pulp.PulpSolverError as exc:
        raise SolverError(f"LP backend {lp_backend!r} failed: {exc}") from exc
    if pulp.LpStatus[status] != "Optimal":
        raise SolverError(f"LP backend {lp_backend!r} returned status {pulp.LpStatus[status]!r}, "
                          "not Optimal")
    for (i, k), var in share.items():
        value = min(max(var.value() or 0.0, 0.0), 1.0) * own[i]
        if value > 0:
            values[i, k] = value
    return float(pulp.value(problem.objective) or 0.0), values, len(share)


def canonical(dc: DataCentre, values: dict[tuple[int, int], float]):
    """(local, src, dst, pps) of an LP solution agents can apply, or None if it has none.

    Per-bridge sFlow can realise a solution only when receivers sample all their own traffic
    (1-in-1, so every mirrored packet they take is sampled too) and senders never receive. The
    reduction rule shows such an optimum exists. A degenerate LP optimum may instead have
    receivers mirror their own traffic or senders relay capacity; receivers' own mirroring is
    folded back locally when the senders' offloads still fit the receivers' room, else None.
    """
    parts = split(dc)
    local, offload = np.zeros(dc.size), np.zeros(dc.size)
    for (i, k), value in values.items():
        if k == i:
            local[i] += value
        else:
            if not parts.receiver[k]:
                return None  # a sender receives: not realisable per bridge
            offload[i] += value
    local = np.where(parts.receiver, dc.own_pps, local)
    offload = np.where(parts.receiver, 0.0, offload)
    room = parts.room_pps
    if offload.sum() > room.sum() * (1 + 1e-9) + 1e-9:
        return None
    return (local, *pair_offloads(offload, room))
