"""The application part as applied: each service's share in whole client-port residues.

The agents monitor a planned ``share`` of a service's connections as ``selected_share(share)``
= ``floor(256 x share)`` (at least 1) of 256 client-port residues (``cosample.plan.appmon``):
the selective mirror's flows, the kernel mirror's and the sniffer's filters. So the plan
writes that share, ``k/256``, and its loads, mirror bytes, objective and summary count it.

Rounding down only lowers a host's load; two things raise it: a share under 1/256 becomes 1/256
(at least one residue), and a ``min_share`` between two residues needs the one above it. Where
that takes a host over its capacity (or a sender over its mirror bytes), the services raised
from nothing there are dropped (nothing is required of them), then others on that host give up
residues above their minimum, one at a time, most residues first; if the minimums alone do not
fit, ``ShareInfeasibleError``.
"""

from __future__ import annotations

import math

import numpy as np

from cosample.plan.appmon import SHARE_BITS, selected_share
from cosample.planner.appmon import NONE, ONSITE, AppmonPlan, Services, loads, plan_continuous
from cosample.planner.errors import ShareInfeasibleError

WHOLE = 1 << SHARE_BITS
#: Relative slack of the capacity and byte checks (the MILP's own feasibility tolerance).
SLACK = 1e-9


def plan_services(
    svc: Services,
    residual: np.ndarray,
    byte_cap: np.ndarray,
    costs: dict,
    analysis_hosts: int | None = None,
) -> AppmonPlan:
    """``appmon.plan_continuous``'s plan with its shares as the agents apply them: whole
    client-port residues (``in_residues``)."""
    planned = plan_continuous(svc, residual, byte_cap, costs, analysis_hosts)
    return in_residues(planned, svc, residual, byte_cap, costs)


def in_residues(
    plan: AppmonPlan,
    svc: Services,
    residual: np.ndarray,
    byte_cap: np.ndarray,
    costs: dict,
) -> AppmonPlan:
    """``plan`` with every monitored share a whole number of residues (module docstring)."""
    to = plan.to.copy()
    monitored = to != NONE
    residues = np.zeros(svc.size, dtype=np.int64)
    residues[monitored] = [selected_share(float(s)) for s in plan.share[monitored]]
    need = np.array([math.ceil(WHOLE * m - 1e-9) for m in svc.min_share], dtype=np.int64)
    residues = np.where(monitored, np.maximum(residues, need), 0)
    raised_from_nothing = monitored & (plan.share * WHOLE < 1 - 1e-9) & (need == 0)
    n = residual.shape[0]
    for _ in range(WHOLE * max(svc.size, 1)):
        share = residues / WHOLE
        load, sent, value = loads(svc, to, share, costs, n)
        over = _over(load, residual) | _over(sent, byte_cap)
        if not over.any():
            return AppmonPlan(to, share, load, sent, value, max(plan.bound, value), plan.method)
        on = _touching(svc, to, over)
        dropped = on & raised_from_nothing & (to != NONE)
        if dropped.any():
            to[dropped], residues[dropped] = NONE, 0
            continue
        spare = np.flatnonzero(on & (residues > np.maximum(need, 1)))
        if spare.size == 0:
            host = int(np.flatnonzero(over)[0])
            raise ShareInfeasibleError(
                f"services on host {host}: the minimum shares in whole residues of "
                f"{WHOLE} (selected_share) do not fit its capacity and mirror bytes"
            )
        j = int(spare[np.argmax(residues[spare])])
        residues[j] -= 1
    raise ShareInfeasibleError("services: could not fit the shares in whole residues")


def _over(used: np.ndarray, limit: np.ndarray) -> np.ndarray:
    return used > limit * (1 + SLACK) + SLACK


def _touching(svc: Services, to: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """Services that load one of ``hosts`` (their own host, or their analysis host)."""
    own = hosts[svc.host]
    analysed = (to >= 0) & hosts[np.maximum(to, 0)] & (to != ONSITE)
    return (to != NONE) & (own | analysed)
