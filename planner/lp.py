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

from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import SolverError
from cosample.planner.exact import split
from cosample.planner.pairing import pair_offloads
from cosample.planner.solution import Solution

BACKENDS = {
    "glpk": ("GLPK_CMD", "install the Debian package glpk-utils (glpsol)"),
    "highs": ("HiGHS", "pip install highspy"),
    "cbc": ("PULP_CBC_CMD", "PuLP's bundled CBC is missing; reinstall pulp"),
}


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


def solve_lp(dc: DataCentre, reduced: bool = True, lp_backend: str = "highs",
             time_limit: float | None = None) -> Solution:
    """Build and solve the LP; a non-optimal status raises ``SolverError`` with the status."""
    started = time.perf_counter()
    dc.check_feasible()
    solver = backend(lp_backend, time_limit)
    own, spare, alpha, beta = dc.own_pps, dc.spare_pps, dc.alpha, dc.beta
    senders_mask = own > 0
    if reduced:
        receivers_mask = spare - alpha * own >= 0
        senders_mask &= ~receivers_mask
    else:
        receivers_mask = np.ones(dc.size, dtype=bool)
    senders = np.flatnonzero(senders_mask).tolist()
    receivers = np.flatnonzero(receivers_mask).tolist()

    problem = pulp.LpProblem("collaborative_sampling", pulp.LpMaximize)
    share: dict[tuple[int, int], pulp.LpVariable] = {}
    for i in senders:
        for k in [i] + [k for k in receivers if k != i]:
            share[i, k] = pulp.LpVariable(f"s_{i}_{k}", lowBound=0, upBound=1)
    fixed = [k for k in receivers if reduced]  # receivers sample all their own in the reduced LP
    problem += pulp.lpSum(own[i] * var for (i, _), var in share.items()) + float(own[fixed].sum())

    incoming: dict[int, list] = {k: [] for k in range(dc.size)}
    own_cost: dict[int, list] = {i: [] for i in senders}
    for (i, k), var in share.items():
        if k == i:
            own_cost[i].append(alpha[i] * own[i] * var)
        else:
            own_cost[i].append(beta[i] * own[i] * var)
            incoming[k].append((alpha[k] + beta[k]) * own[i] * var)
    for i in senders:
        problem += pulp.lpSum(share[i, k] for k in [i] + [k for k in receivers if k != i]) <= 1, \
            f"share_{i}"
    for k in range(dc.size):
        load = incoming[k] + own_cost.get(k, [])
        if not load:
            continue
        fixed_cost = float(alpha[k] * own[k]) if reduced and receivers_mask[k] else 0.0
        problem += pulp.lpSum(load) + fixed_cost <= float(spare[k]), f"capacity_{k}"

    if not share:  # nothing to decide: every server with traffic samples all of it
        status = pulp.LpStatusOptimal
    else:
        try:
            status = problem.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverError(f"LP backend {lp_backend!r} failed: {exc}") from exc
    if pulp.LpStatus[status] != "Optimal":
        raise SolverError(f"LP backend {lp_backend!r} returned status {pulp.LpStatus[status]!r}, "
                          "not Optimal")
    local, offload = np.zeros(dc.size), np.zeros(dc.size)
    for (i, k), var in share.items():
        value = min(max(var.value() or 0.0, 0.0), 1.0) * own[i]
        if k == i:
            local[i] = value
        else:
            offload[i] += value
    local, src, dst, pps = canonical(dc, local, offload)
    return Solution("reduced" if reduced else "full", float(pulp.value(problem.objective) or 0.0),
                    local, src, dst, pps, seconds=time.perf_counter() - started,
                    variables=len(share), lp_backend=lp_backend)


def canonical(dc: DataCentre, local: np.ndarray, offload: np.ndarray):
    """The LP optimum in the form agents can apply, with the same collected volume.

    The full LP is degenerate: a receiver may mirror its own traffic to another receiver at no
    loss. Per-bridge sFlow cannot realise that (a receiver samples 1-in-1 so that every mirrored
    packet it takes is sampled), and the reduction rule shows an optimum exists where receivers
    sample all their own traffic. So receivers keep everything local, senders keep the LP's
    local share and total offload, and offloads are re-paired with receivers' room.
    """
    parts = split(dc)
    local = np.where(parts.receiver, dc.own_pps, local)
    offload = np.where(parts.receiver, 0.0, offload)
    return (local, *pair_offloads(offload, parts.room_pps))
