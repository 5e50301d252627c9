"""The best plan OVS can apply on a small data centre, by brute force (independent of the planner).

Every server's sFlow 1-in-N (N up to ``n_max``) or off; any server may take copies whatever its
N and may send and take at once (docs/model.md): a copy costs its sender beta and its receiver
beta + alpha/N, and is collected with probability 1/N, independently of the sender's own draw.
For each choice of N the mirror shares are the LP's (HiGHS through highspy): maximise
``sum w_i (U_i t_i + (1 - t_i) sum_k t_k y_ik)`` within every server's capacity and mirror cap.
Choices are visited best upper bound first (each sender's copies valued at its best receiver's
rate, each receiver's at its best sender's) and the search stops when no bound left beats the
best plan found, so its result is the brute force's over every choice. It reads only the
problem's planning values, so the planner's solvers can be checked against it
(tests/planner/test_applied_space.py) and measured (``planner_applied``).
"""

from __future__ import annotations

import os
from functools import cache

import highspy
import numpy as np

#: The largest N tried by default (the issue's menu).
N_MAX = 32


def best_mirrors(problem, rate: np.ndarray) -> float:
    """The LP's mirror shares for fixed rates: weighted distinct own packets collected."""
    n = problem.size
    own, weight = problem.own_pps, problem.weight
    alpha, beta = problem.alpha, problem.beta
    left = problem.spare_pps - alpha * problem.bridge_pps * rate
    limit = np.minimum(own, problem.mirror_cap_pps)
    fixed = float((weight * own * rate).sum())
    pairs = [(i, k) for i in range(n) for k in range(n) if i != k]
    value = np.array([weight[i] * (1 - rate[i]) * rate[k] for i, k in pairs])
    if not pairs or value.max() <= 0:
        return fixed
    capacity = np.zeros((n, len(pairs)))
    sends = np.zeros((n, len(pairs)))
    for j, (i, k) in enumerate(pairs):
        capacity[i, j] += beta[i]  # sending a copy
        capacity[k, j] += beta[k] + alpha[k] * rate[k]  # taking it in, sampling it at 1/N_k
        sends[i, j] = 1.0
    return fixed + _max_lp(value, np.vstack((capacity, sends)), np.concatenate((left, limit)))


def _max_lp(value: np.ndarray, rows: np.ndarray, upper: np.ndarray) -> float:
    """max ``value @ y`` subject to ``rows @ y <= max(upper, 0)`` and ``y >= 0``."""
    lp = highspy.HighsLp()
    lp.num_row_, lp.num_col_ = rows.shape
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = value
    lp.col_lower_ = np.zeros(value.size)
    lp.col_upper_ = np.full(value.size, highspy.kHighsInf)
    lp.row_lower_ = np.full(rows.shape[0], -highspy.kHighsInf)
    lp.row_upper_ = np.maximum(upper, 0.0)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.arange(0, rows.size + 1, rows.shape[1])
    lp.a_matrix_.index_ = np.tile(np.arange(rows.shape[1]), rows.shape[0])
    lp.a_matrix_.value_ = rows.ravel()
    solver = _solver()
    solver.passModel(lp)
    solver.run()
    status = solver.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(
            f"brute force: the mirror LP failed ({solver.modelStatusToString(status)})"
        )
    return float(solver.getInfo().objective_function_value)


@cache
def _solver() -> highspy.Highs:
    """One quiet HiGHS per process: highspy prints its banner on standard output when a solver
    is made, before any option can turn it off (hence the descriptor, not ``sys.stdout``)."""
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            solver = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    solver.setOptionValue("output_flag", False)
    return solver


def brute_force(problem, n_max: int = N_MAX) -> tuple[float, np.ndarray]:
    """The best weighted distinct own packets over every N <= n_max (or off) per server, and
    its rates (1/N, 0 off)."""
    n = problem.size
    own, weight = problem.own_pps, problem.weight
    alpha, beta = problem.alpha, problem.beta
    full = alpha * problem.bridge_pps
    limit = np.minimum(own, problem.mirror_cap_pps)
    menu = np.array([0.0] + [1.0 / m for m in range(1, n_max + 1)])
    # every choice, the last server's varying fastest
    rates = np.stack(np.meshgrid(*[menu] * n, indexing="ij"), axis=-1).reshape(-1, n)
    left = problem.spare_pps - full * rates
    affordable = (left >= -1e-9 * np.maximum(full * rates, 1.0)).all(axis=1)
    rates, left = rates[affordable], np.maximum(left[affordable], 0.0)
    fixed = (weight * own * rates).sum(axis=1)
    factor = weight * (1 - rates)
    out_most = np.minimum(limit, left / beta)
    in_most = left / (beta + alpha * rates)
    by_senders, by_receivers = np.zeros(len(rates)), np.zeros(len(rates))
    for i in range(n):
        others = [k for k in range(n) if k != i]
        if not others:
            continue
        by_senders += factor[:, i] * rates[:, others].max(axis=1) * out_most[:, i]
        by_receivers += rates[:, i] * factor[:, others].max(axis=1) * in_most[:, i]
    bound = fixed + np.minimum(by_senders, by_receivers)
    best, arg = -1.0, np.zeros(n)
    for j in np.argsort(-bound, kind="stable"):
        if bound[j] <= best * (1 + 1e-12):
            break
        value = best_mirrors(problem, rates[j]) if bound[j] > fixed[j] else fixed[j]
        if value > best:
            best, arg = value, rates[j]
    return best, arg
