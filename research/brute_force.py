"""The best plan OVS can apply on a small data centre, by brute force (independent of the planner).

Every server's sFlow 1-in-N (N up to ``n_max``) or off; any server may take copies whatever its
N and may send and take at once (docs/model.md): a copy costs its sender beta and its receiver
beta + alpha/N, and is collected with probability 1/N, independently of the sender's own draw.
For each choice of N the mirror shares are the LP's (scipy's HiGHS): maximise
``sum w_i (U_i t_i + (1 - t_i) sum_k t_k y_ik)`` within every server's capacity and mirror cap.
Choices are visited best upper bound first (each sender's copies valued at its best receiver's
rate, each receiver's at its best sender's) and the search stops when no bound left beats the
best plan found, so its result is the brute force's over every choice. It reads only the
problem's planning values, so the planner's solvers can be checked against it
(tests/planner/test_applied_space.py) and measured (``planner_applied``).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import linprog

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
    result = linprog(
        -value,
        A_ub=np.vstack((capacity, sends)),
        b_ub=np.concatenate((np.maximum(left, 0.0), limit)),
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"brute force: the mirror LP failed ({result.message})")
    return fixed - result.fun


def brute_force(problem, n_max: int = N_MAX) -> tuple[float, np.ndarray]:
    """The best weighted distinct own packets over every N <= n_max (or off) per server, and
    its rates (1/N, 0 off)."""
    n = problem.size
    own, weight = problem.own_pps, problem.weight
    alpha, beta = problem.alpha, problem.beta
    full = alpha * problem.bridge_pps
    limit = np.minimum(own, problem.mirror_cap_pps)
    menu = np.array([0.0] + [1.0 / m for m in range(1, n_max + 1)])
    rates = np.array(list(itertools.product(menu, repeat=n)))
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
