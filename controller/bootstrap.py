"""Sampling floor and measurement plan: the controller must keep seeing every server's traffic.

A plan-aware collector attributes samples with the plan in force (which server an sFlow agent
address belongs to), so a fleet that never had a plan gives it nothing to work with, and the
controller nothing to plan from. On its very first start, with no plan in force and no fresh
snapshot, the controller therefore publishes a *measurement plan*: every server samples its own
traffic 1-in-N (``--measure-sampling``, default 4096, the agents' own safe rate), mirrors
nothing, and is named with its bridge, tunnel address and VM ports. It costs a server ``alpha/N``
of its forwarding load, at most 0.04 % at the default. The collector then estimates every
server's traffic (weighting each sample by the 1-in-N it carries), and the first real plan
follows as soon as the estimate is warm. The plan says ``"bootstrap": true`` so a restarted
controller knows it for what it is.

The same floor applies to every plan: a server the planner leaves idle (no traffic measured)
or unmeasured would otherwise get no sFlow at all, and traffic that starts there later would
never be seen. The planner's ``build_plan(floor=N)`` makes every server that would sample nothing
sample 1-in-N (``floor_shares`` does the same to a plan's shares as arrays); the
plan's predicted loads then understate by at most ``alpha * U / N`` (0.04 % of forwarding at
N = 4096). Servers that sample at any rate keep it: they show their traffic already.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from cosample.controller.evaluate import PlanShares
from cosample.controller.inventory import Inventory
from cosample.plan.formats import FORMAT_VERSION, PLAN_FORMAT
from cosample.planner.planbytes import plan_id
from cosample.times import format_time

DEFAULT_SAMPLING = 4096


def measurement_plan(
    inventory: Inventory, sampling: int, now: datetime, valid_for: timedelta
) -> dict[str, Any]:
    """Local 1-in-``sampling`` on every server, no mirrors (version 0: the publisher sets it)."""
    hosts = {}
    for i, name in enumerate(inventory.names):
        hosts[name] = {
            "role": "sender",
            "local_rate": 1.0 / sampling,
            "sflow_sampling": sampling,
            "mirrors": [],
            "receives": [],
            "capacity_pps": float(inventory.capacity_pps[i]),
            "alpha": float(inventory.alpha[i]),
            "beta": float(inventory.beta[i]),
            **inventory.extras.get(name, {}),
        }
    plan: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "bootstrap": True,
        "datacentre": inventory.name,
        "sflow": dict(inventory.sflow),
        "solver": {"name": "bootstrap", "lp_backend": None, "variables": 0, "seconds": 0.0},
        "summary": {"servers": inventory.size, "sflow_sampling": sampling},
        "hosts": hosts,
    }
    plan["plan_id"] = plan_id(plan)
    stamp = format_time(now)
    plan.update(version=0, created=stamp, expires=format_time(now + valid_for))
    return plan


def floor_shares(shares: PlanShares, sampling: int) -> PlanShares:
    """The same floor on a plan's shares as arrays."""
    return replace(
        shares, local_rate=np.where(shares.local_rate > 0, shares.local_rate, 1.0 / sampling)
    )


def is_measurement_plan(plan: dict[str, Any] | None) -> bool:
    return plan is not None and plan.get("bootstrap") is True
