"""Every server's terms in the space of plans the switches can apply (docs/model.md).

In that space any server chooses its bridge's sFlow 1-in-N (or off; or, where it may, the
``sample`` action's K/65535, which takes no copies), may mirror shares of its own traffic to
any other server and may take copies from any other server, whatever its N. A copy is sampled
by the receiver's sFlow at the receiver's 1-in-N, independently of the sender's local draw, so
a server i with local rate ``t_i`` mirroring ``y_ik`` pps to k collects
``w_i (U_i t_i + (1 - t_i) sum_k t_k y_ik)`` distinct own packets, and spends

    A_i t_i + beta_i sum_k y_ik + (beta_i + alpha_i t_i) sum_j y_ji  <=  S_i

(``A_i = alpha_i x bridge input``: sampling its bridge 1-in-1; a copy costs its receiver beta to
take in and alpha when sampled). ``Fleet`` holds these terms for all servers, vectorised, for the
bound over the space (``applied_bound``) and its exact solver for small fleets (``applied_milp``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE as SCALE
from cosample.planner.ladders import CEIL_SLACK
from cosample.planner.problem import Problem
from cosample.planner.realise import MAX_INTERVAL


@dataclass(frozen=True)
class Fleet:
    """Per-server terms, positions as in the problem."""

    own: np.ndarray  # U: own traffic, pps
    weight: np.ndarray
    spare: np.ndarray  # S: usable capacity left after forwarding
    alpha: np.ndarray  # what sampling one packet entering the bridge costs (copies too)
    beta: np.ndarray  # what sending or taking in one copy costs
    limit: np.ndarray  # c = min(U, mirror cap): most own traffic it may mirror
    full: np.ndarray  # A = alpha x bridge input: sFlow 1-in-1 on its bridge
    n_min: np.ndarray  # smallest affordable sFlow N (inf: none)
    full_sample: np.ndarray  # the sample action at K = 65535 (inf: may not use it)
    k_max: np.ndarray  # largest affordable K/65535 (0: none, or may not use it)

    @property
    def size(self) -> int:
        return self.own.size

    def take(self, positions: np.ndarray) -> "Fleet":
        return Fleet(*(getattr(self, name)[positions] for name in self.__dataclass_fields__))


def fleet_of(problem: Problem) -> Fleet:
    """The terms of every server of ``problem``."""
    own, spare = problem.own_pps, problem.spare_pps
    full = problem.alpha * problem.bridge_pps
    full_sample = np.full(own.size, np.inf)
    k_max = np.zeros(own.size)
    if problem.can_sample is not None:
        able = problem.can_sample
        full_sample[able] = (problem.alpha_sample * problem.bridge_pps)[able]
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.floor(SCALE * (spare / full_sample) * (1 + CEIL_SLACK))
        k_max = np.where(able & (spare > 0), np.minimum(np.nan_to_num(k, posinf=SCALE), SCALE), 0)
    return Fleet(
        own=own,
        weight=problem.weight,
        spare=spare,
        alpha=problem.alpha,
        beta=problem.beta,
        limit=np.minimum(own, problem.mirror_cap_pps),
        full=full,
        n_min=smallest_interval(full, spare),
        full_sample=full_sample,
        k_max=k_max,
    )


def smallest_interval(full: np.ndarray, spare: np.ndarray) -> np.ndarray:
    """The smallest N whose 1-in-N costs at most ``spare`` (inf: not even 1-in-2^32-1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.ceil(full / spare * (1 - CEIL_SLACK))
    n = np.where(full <= 0, 1.0, np.where(spare > 0, n, np.inf))
    return np.where(n > MAX_INTERVAL, np.inf, np.maximum(n, 1.0))
