"""The capacity the controller plans a host with while its guard backs off (pure).

A host's guard steps its monitoring down when its forwarding is past its limit (agents/guard.py)
and its collector says so (the snapshot's ``guard``: the rung, its 1-in-N and mirror scale). That
the host had to back off means the plan asked more than it can give now: a CPU hog, a noisy
neighbour, or a capacity in the inventory that is too high. The guard stops on the first rung
below its limit, so the host's capacity is about ``load on the rung / limit`` (the limit its
plan entry gives, ``servers[].guard.limit`` of the inventory, else 0.9), and the plan in force,
which took it past the limit, is judged above it. The controller plans that host with that
capacity, never above the inventory's, and keeps it for ``hold_s`` after the host was last seen
backing off, then plans it with the inventory's again.
The next plan then fits the host; a host whose trouble stays backs off again and keeps its
lower capacity (the smallest seen while it lasts), one whose trouble has passed gets its
capacity back a hold later. The load on the rung is the plan in force's evaluation
(``evaluate``), with the guarded hosts' local rates at their rung's 1-in-N, their mirror rates
times its scale, and a receiver's sampling of what it receives at its rung's share of its plan's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from cosample.controller.evaluate import PlanShares
from cosample.controller.inventory import Inventory
from cosample.plan.guard import DEFAULT_LIMIT
from cosample.times import format_time

log = logging.getLogger("cosample.controller")
#: hosts the status lists (as the controller's other lists)
LISTED = 20


@dataclass(frozen=True)
class Derating:
    """Per server: the capacity to plan with, and until when (Unix time; 0: the inventory's)."""

    capacity_pps: np.ndarray
    until: np.ndarray

    def derated(self) -> np.ndarray:
        return self.until > 0


def sustained_load(
    shares: PlanShares,
    guard: Mapping[str, Any],
    index: Mapping[str, int],
    own_pps: np.ndarray,
    forwarding_pps: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
) -> np.ndarray:
    """Each server's load (forwarding packets/s) under ``shares`` with the guards' rungs in
    force (``guard``: server -> an entry with ``sflow_sampling`` and ``mirror_scale``)."""
    n = own_pps.size
    local = shares.local_rate.copy()
    scale = np.ones(n)
    for name, entry in guard.items():
        i = index.get(name)
        if i is None:
            continue
        if entry.sflow_sampling and local[i] > 0:
            local[i] = min(local[i], 1.0 / entry.sflow_sampling)
        scale[i] = entry.mirror_scale
    with np.errstate(divide="ignore", invalid="ignore"):
        kept = np.where(shares.local_rate > 0, local / shares.local_rate, 1.0)
    mirrored = shares.mirror_rate * scale[shares.mirror_src] * own_pps[shares.mirror_src]
    out = np.bincount(shares.mirror_src, weights=mirrored, minlength=n)
    received = np.bincount(shares.mirror_dst, weights=mirrored, minlength=n)
    return (
        forwarding_pps
        + alpha * local * own_pps
        + beta * out
        + beta * received
        + alpha * kept * received
    )


def update(
    previous: Derating | None,
    capacity_pps: np.ndarray,
    guard: Mapping[str, Any],
    load_on_rung: np.ndarray | None,
    index: Mapping[str, int],
    limit: np.ndarray,
    now: float,
    hold_s: float,
) -> Derating:
    """This cycle's derating: lapsed ones back to the inventory's ``capacity_pps``; each host in
    ``guard`` planned at ``load_on_rung / limit`` (or less, if it already was) for ``hold_s``
    from ``now``. ``load_on_rung`` None: the guard entries are about another plan than the one
    judged (nothing learnt this cycle)."""
    if previous is None or previous.capacity_pps.size != capacity_pps.size:
        capacity, until = capacity_pps.astype(float).copy(), np.zeros(capacity_pps.size)
    else:
        capacity, until = previous.capacity_pps.copy(), previous.until.copy()
        lapsed = until <= now
        capacity[lapsed], until[lapsed] = capacity_pps[lapsed], 0.0
    if load_on_rung is not None:
        for name in guard:
            i = index.get(name)
            if i is None or capacity_pps[i] <= 0:
                continue
            fits = load_on_rung[i] / limit[i]
            capacity[i] = min(capacity[i], capacity_pps[i], fits)
            until[i] = now + hold_s
    return Derating(capacity, until)


class Derater:
    """The controller's memory of hosts backing off: ``plan`` gives each cycle the inventory to
    plan and judge with (its own capacities where a host is derated), ``status`` lists them."""

    def __init__(self, inventory: Inventory, hold_s: float) -> None:
        self.inventory, self.hold_s = inventory, hold_s
        self.derating: Derating | None = None
        guards = [(inventory.extras.get(name) or {}).get("guard") for name in inventory.names]
        #: each host's guard limit (its inventory entry's, else the plan format's default)
        self.limit = np.array([g["limit"] if g else DEFAULT_LIMIT for g in guards], dtype=float)

    def plan(
        self,
        now: datetime,
        snapshot: Any,
        smoothed: Any,
        current: Mapping[str, Any] | None,
        current_shares: PlanShares | None,
    ) -> Inventory:
        """The inventory this cycle plans with: the snapshot's guarded hosts are judged on the
        plan in force (``current``, its ``current_shares``) when the collector used that plan."""
        inv, guard, plan = self.inventory, snapshot.guard, snapshot.plan
        load = None
        if guard and current is not None and current_shares is not None and plan is not None:
            if plan.version == int(current["version"]):
                own, forwarding = smoothed.loads()
                load = sustained_load(
                    current_shares, guard, inv.index, own, forwarding, inv.alpha, inv.beta
                )
        before = self.derating
        self.derating = update(
            before,
            inv.capacity_pps,
            guard,
            load,
            inv.index,
            self.limit,
            now.timestamp(),
            self.hold_s,
        )
        derated = self.derating.derated()
        new = derated & ~before.derated() if before is not None else derated
        for i in np.flatnonzero(new)[:LISTED].tolist():
            log.warning(
                "%s backs off (its guard): planned with %.0f pps of its %.0f for %.0f s",
                inv.names[i],
                self.derating.capacity_pps[i],
                inv.capacity_pps[i],
                self.hold_s,
            )
        if not derated.any():
            return inv
        return replace(inv, capacity_pps=self.derating.capacity_pps)

    def status(self) -> tuple[dict[str, Any], ...]:
        """The hosts planned below their inventory capacity now (at most ``LISTED``)."""
        if self.derating is None:
            return ()
        inv, derating = self.inventory, self.derating
        return tuple(
            {
                "server": inv.names[i],
                "capacity_pps": round(float(derating.capacity_pps[i]), 3),
                "inventory_pps": float(inv.capacity_pps[i]),
                "until": format_time(float(derating.until[i])),
            }
            for i in np.flatnonzero(derating.derated())[:LISTED].tolist()
        )
