"""One re-plan: the smoothed traffic and the inventory as a data centre, planned by the planner.

The planner plans against ``capacity x (1 - plan_margin)``, a larger headroom than the
publication trigger's ``margin``: a plan that saturates a server at ``1 - plan_margin`` stays
under the trigger at ``1 - margin`` while load grows by ``(1 - margin) / (1 - plan_margin) - 1``
(12 % with the defaults 0.05 and 0.15), so noise of that size cannot make the controller
publish. Two kinds of server get no sampling and no mirrors at all (their planning capacity is
set to their forwarding load): servers that forwarding alone overloads (no plan can help them;
reported) and servers never measured (silence is not idleness: they must not receive mirrors).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from cosample.controller.evaluate import PlanShares, shares
from cosample.controller.inventory import Inventory
from cosample.controller.smoothing import Smoothed
from cosample.planner.datacentre import DataCentre
from cosample.planner.planfile import build_plan
from cosample.planner.solvers import solve


@dataclass(frozen=True)
class Candidate:
    """The plan of this cycle (version 0 until published) and the traffic it was made for."""

    document: dict[str, Any]
    shares: PlanShares
    own_pps: np.ndarray
    forwarding_pps: np.ndarray
    saturated: tuple[str, ...]   # forwarding alone above the planning capacity
    unmeasured: tuple[str, ...]  # never seen in a snapshot


def datacentre(inventory: Inventory, traffic: Smoothed, plan_margin: float
               ) -> tuple[DataCentre, np.ndarray, np.ndarray]:
    """The description the planner gets, and the saturated and unmeasured masks."""
    n = inventory.size
    dc = DataCentre(names=inventory.names, capacity_pps=inventory.capacity_pps,
                    alpha=inventory.alpha, beta=inventory.beta,
                    traffic_src=traffic.src, traffic_dst=traffic.dst, traffic_pps=traffic.pps,
                    name=inventory.name, server_extras=inventory.extras,
                    sflow=inventory.sflow)
    forwarding = dc.forwarding_pps
    capacity = inventory.capacity_pps * (1.0 - plan_margin)
    saturated = forwarding > capacity
    unmeasured = ~traffic.seen if traffic.seen.size == n else np.ones(n, dtype=bool)
    capacity = np.where(saturated | unmeasured, forwarding, capacity)
    planned = DataCentre(names=dc.names, capacity_pps=capacity, alpha=dc.alpha, beta=dc.beta,
                         traffic_src=dc.traffic_src, traffic_dst=dc.traffic_dst,
                         traffic_pps=dc.traffic_pps, name=dc.name,
                         server_extras=dc.server_extras, sflow=dc.sflow)
    planned.check_arrays()
    return planned, saturated, unmeasured & ~saturated


def replan(inventory: Inventory, traffic: Smoothed, now: datetime, valid_for: timedelta,
           plan_margin: float, solver: str = "exact") -> Candidate:
    """Plan the smoothed traffic; the document is complete but for its ``version``."""
    dc, saturated, unmeasured = datacentre(inventory, traffic, plan_margin)
    solution = solve(dc, solver)
    document = build_plan(dc, solution, created=now, valid_for=valid_for, version=0)
    names = inventory.names
    return Candidate(document, shares(document, inventory.index), dc.own_pps, dc.forwarding_pps,
                     tuple(names[i] for i in np.flatnonzero(saturated)),
                     tuple(names[i] for i in np.flatnonzero(unmeasured)))
