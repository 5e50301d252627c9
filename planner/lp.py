"""The paper's linear program (Sec. IV-A), full or reduced by its P/Q rule, solved with PuLP.

Per-server coefficients: at server i, sampling a share s of its own traffic costs
``alpha_i x s x bridge input`` (the bridge samples everything entering it: ``Problem.sample_cost``),
mirroring it costs beta_i, and receiving another server's mirrored packet costs beta_i + alpha_i
(receive, then sample). Capacities are the planned ones (margin, robust). Weights scale the
objective; a sender's mirror cap bounds its mirrored pps; the collector budget bounds the
samples/s of all bridges plus the mirrored copies. The full LP has a variable s[i][k] for every
sender i with traffic and every server k; the reduced LP fixes s[k][k] = 1 for the receivers P
and keeps only s[i][i] and s[i][k] for senders i in Q and receivers k in P.

The LP counts a packet sampled locally and mirrored twice (``l + m``): its optimum is the
upper bound the exact solver's distinct packets are measured against.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import pulp

from cosample.planner.budgets import samples_bound
from cosample.planner.choices import DEFAULT_LP_BACKEND, FULL, LP_BACKENDS, REDUCED
from cosample.planner.distinct import choose
from cosample.planner.errors import SolverError
from cosample.planner.pairing import pair_offloads
from cosample.planner.problem import Problem
from cosample.planner.solution import Bounds, Solution

BACKENDS = LP_BACKENDS


def backend(name: str, time_limit: float | None = None) -> pulp.LpSolver:
    """A PuLP solver by name, checked to be available."""
    if name not in BACKENDS:
        raise SolverError(f"unknown LP backend {name!r} (choose from {', '.join(BACKENDS)})")
    class_name, hint = BACKENDS[name]
    options: dict[str, bool | float] = {"msg": False}
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


def solve_lp(
    problem: Problem,
    reduced: bool = True,
    lp_backend: str = DEFAULT_LP_BACKEND,
    time_limit: float | None = None,
) -> Solution:
    """Build and solve the LP; a non-optimal status raises ``SolverError`` with the status.

    The solution is returned in canonical form (see ``canonical``): receivers sample all their
    own traffic, senders mirror only to receivers, pairs drawn to keep tunnels few. The full LP
    is degenerate; when its optimum is not canonical, the plan comes from the reduced LP (the
    full LP restricted to canonical solutions, with the same optimum). Either way the LP's
    objective is the plan's ``bounds.lp``: it counts local and mirrored samples of one packet
    twice, so the plan's distinct packets may be below it.
    """
    started = time.perf_counter()
    solver = backend(lp_backend, time_limit)
    objective, values, variables = _solve(problem, reduced, solver, lp_backend)
    shape = canonical(problem, values)
    if shape is None:
        _, values, _ = _solve(problem, True, solver, lp_backend)
        shape = canonical(problem, values)
    local, src, dst, pps = shape
    envelope = min(choose(problem).envelope, samples_bound(problem, problem.collector_cap_pps))
    bounds = Bounds(
        lp=objective,
        envelope=max(min(envelope, objective), 0.0),
        method=f"{REDUCED if reduced else FULL} LP",
        optimal=False,
    )
    return Solution(
        REDUCED if reduced else FULL,
        local,
        src,
        dst,
        pps,
        problem=problem,
        bounds=bounds,
        seconds=time.perf_counter() - started,
        variables=variables,
        lp_backend=lp_backend,
    )


def lp_optimum(
    problem: Problem, reduced: bool = False, lp_backend: str = DEFAULT_LP_BACKEND
) -> float:
    """The LP's optimal objective alone (a bound; its solution may not be realisable per bridge)."""
    return _solve(problem, reduced, backend(lp_backend), lp_backend)[0]


def _solve(
    problem: Problem, reduced: bool, solver: pulp.LpSolver, lp_backend: str
) -> tuple[float, dict[tuple[int, int], float], int]:
    """(objective, {(i, k): pps of i's traffic sampled at k}, number of variables)."""
    own, spare, alpha, beta = problem.own_pps, problem.spare_pps, problem.alpha, problem.beta
    cost, weight, bridge = problem.sample_cost, problem.weight, problem.bridge_pps
    senders_mask = own > 0
    if reduced:
        senders_mask &= ~problem.receiver
    receivers_mask = problem.receiver.copy() if reduced else np.ones(problem.size, dtype=bool)
    # a bridge without own traffic samples its input 1-in-1 to receive: only P can, at a fixed cost
    receivers_mask &= (own > 0) | problem.receiver
    senders = np.flatnonzero(senders_mask).tolist()
    receivers = np.flatnonzero(receivers_mask).tolist()
    # sampled 1-in-1 at a fixed cost: in the reduced LP every receiver, in the full LP the
    # receivers without own traffic whose bridges take inbound traffic (they have no variable)
    fixed_mask = problem.receiver & (bridge > 0)
    if not reduced:
        fixed_mask &= own == 0
    fixed = np.flatnonzero(fixed_mask).tolist()

    lp = pulp.LpProblem("collaborative_sampling", pulp.LpMaximize)
    share: dict[tuple[int, int], pulp.LpVariable] = {}
    for i in senders:
        for k in [i] + [k for k in receivers if k != i]:
            share[i, k] = lp.add_variable(f"s_{i}_{k}", lowBound=0, upBound=1)
    fixed_value = float((weight * own)[fixed].sum())
    lp += pulp.lpSum(weight[i] * own[i] * var for (i, _), var in share.items()) + fixed_value

    incoming: dict[int, list] = {k: [] for k in range(problem.size)}
    own_cost: dict[int, list] = {i: [] for i in senders}
    outgoing: dict[int, list] = {i: [] for i in senders}
    mirrored: dict[int, list] = {i: [] for i in senders}
    samples: list = []
    for (i, k), var in share.items():
        outgoing[i].append(var)
        if k == i:
            own_cost[i].append(cost[i] * own[i] * var)
            samples.append(bridge[i] * var)
        else:
            own_cost[i].append(beta[i] * own[i] * var)
            mirrored[i].append(own[i] * var)
            incoming[k].append((alpha[k] + beta[k]) * own[i] * var)
            samples.append(own[i] * var)
    for i in senders:
        lp += pulp.lpSum(outgoing[i]) <= 1, f"share_{i}"
        if np.isfinite(problem.mirror_cap_pps[i]) and mirrored[i]:
            lp += pulp.lpSum(mirrored[i]) <= float(problem.mirror_cap_pps[i]), f"mirror_cap_{i}"
    for k in range(problem.size):
        load = incoming[k] + own_cost.get(k, [])
        if load:
            fixed_cost = float(alpha[k] * bridge[k]) if k in fixed else 0.0
            lp += pulp.lpSum(load) + fixed_cost <= float(spare[k]), f"capacity_{k}"
    fixed_samples = float(bridge[fixed].sum())
    if np.isfinite(problem.collector_cap_pps):
        if fixed_samples > problem.collector_cap_pps:
            raise SolverError(
                f"the collector budget ({problem.collector_cap_pps:,.0f} samples/s) is "
                f"below what the receivers sample 1-in-1 ({fixed_samples:,.0f}); "
                "the reduced LP cannot plan it, use --solver exact"
            )
        lp += pulp.lpSum(samples) + fixed_samples <= problem.collector_cap_pps, "collector"

    values = {(k, k): float(own[k]) for k in fixed if own[k] > 0}
    if not share:  # nothing to decide: every server with traffic samples all of it
        return fixed_value, values, 0
    try:
        with tempfile.TemporaryDirectory(prefix="cosample-lp-") as folder:
            solver.tmpDir = folder  # PuLP's GLPK_CMD leaves its report (-o FILE) behind
            status = lp.solve(solver)
    except pulp.PulpSolverError as exc:
        raise SolverError(f"LP backend {lp_backend!r} failed: {exc}") from exc
    if pulp.LpStatus[status] != "Optimal":
        raise SolverError(
            f"LP backend {lp_backend!r} returned status {pulp.LpStatus[status]!r}, not Optimal"
        )
    for (i, k), var in share.items():
        value = min(max(var.value() or 0.0, 0.0), 1.0) * own[i]
        if value > 0:
            values[i, k] = value
    return float(pulp.value(lp.objective) or 0.0), values, len(share)


def canonical(problem: Problem, values: dict[tuple[int, int], float]):
    """(local, src, dst, pps) of an LP solution agents can apply, or None if it has none.

    Per-bridge sFlow can realise a solution only when receivers sample all their own traffic
    (1-in-1, so every mirrored packet they take is sampled too) and senders never receive. The
    reduction rule shows such an optimum exists. A degenerate LP optimum may instead have
    receivers mirror their own traffic or senders relay capacity; receivers' own mirroring is
    folded back locally when the senders' offloads still fit the receivers' room, else None.
    """
    receiver = problem.receiver
    local, offload = np.zeros(problem.size), np.zeros(problem.size)
    for (i, k), value in values.items():
        if k == i:
            local[i] += value
        else:
            if not receiver[k]:
                return None  # a sender receives: not realisable per bridge
            offload[i] += value
    if not np.isfinite(problem.collector_cap_pps):
        local = np.where(receiver, problem.own_pps, local)
    offload = np.where(receiver, 0.0, offload)
    full = receiver & ((local >= problem.own_pps * (1 - 1e-9)) | (problem.own_pps == 0))
    room = np.where(full, problem.room_pps, 0.0)
    if offload.sum() > room.sum() * (1 + 1e-9) + 1e-9:
        return None
    return (local, *pair_offloads(offload, room))
