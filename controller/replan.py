"""One re-plan: the smoothed traffic and the inventory as a data centre, planned by the planner.

The planner plans against ``capacity x (1 - plan_margin)``, a larger headroom than the
publication trigger's ``margin``: a plan that saturates a server at ``1 - plan_margin`` stays
under the trigger at ``1 - margin`` while load grows by ``(1 - margin) / (1 - plan_margin) - 1``
(12 % with the defaults 0.05 and 0.15), so noise of that size cannot make the controller
publish. Two kinds of server get no mirrors and no planned sampling (their planning capacity is set to
their forwarding load): servers that forwarding alone overloads (no plan can help them;
reported), servers never measured (silence is not idleness: they must not receive mirrors) and
servers whose traffic is rising by a step (``Smoothed.rising``: the collector's window shows
only part of the step yet, so a budget given now would be overloaded a cycle later).
A server that would sample nothing samples 1-in-``floor`` (``build_plan(floor=...)``), so the
controller keeps seeing traffic appear anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from cosample.controller.bootstrap import floor_shares
from cosample.controller.evaluate import PlanShares
from cosample.controller.hostnames import HostNames
from cosample.controller.inventory import Inventory
from cosample.controller.smoothing import Smoothed
from cosample.planner.datacentre import DataCentre
from cosample.planner.planfile import build_plan, host_report, significant
from cosample.planner.problem import build_problem
from cosample.planner.solution import Solution
from cosample.planner.solvers import solve


@dataclass(frozen=True)
class Candidate:
    """This cycle's plan as arrays; the plan document is built only if it is published."""

    dc: DataCentre  # the description planned (planning capacities)
    solution: Solution
    shares: PlanShares  # applied shares, as the plan file will state them
    own_pps: np.ndarray
    forwarding_pps: np.ndarray
    saturated: HostNames  # forwarding alone above the planning capacity
    unmeasured: Sequence[str]  # never seen in a snapshot
    floor: int | None = None  # hosts sampling nothing sample 1-in-floor
    rising: Sequence[str] = ()  # traffic rising by a step: no budget until it has settled

    def document(self, now: datetime, valid_for: timedelta) -> dict[str, Any]:
        """The plan file (version 0: the publisher sets it), its hosts with only the fields
        agents and collectors read (``report``: the rest). Its hosts stay serialised (a
        ``HostTable``): the controller publishes the bytes and reads entries only to build a
        two-phase transition."""
        return build_plan(
            self.dc,
            self.solution,
            created=now,
            valid_for=valid_for,
            version=0,
            floor=self.floor,
            lazy_hosts=True,
            report=False,
        )

    def report(self, plan: dict[str, Any]) -> bytes:
        """The per-host report of ``plan`` (this candidate's document as published), in
        columns: predicted loads, inputs as planned, the continuous optimum."""
        return host_report(self.solution, plan)


def datacentre(
    inventory: Inventory,
    traffic: Smoothed,
    plan_margin: float,
    rising: np.ndarray | None = None,
    services: tuple[Any, ...] | None = None,
) -> tuple[DataCentre, np.ndarray, np.ndarray]:
    """The description the planner gets, and the saturated and unmeasured masks. ``services``:
    the inventory's services with their measured request rates (``apploop``); None: as the
    inventory states them."""
    n = inventory.size
    appmon: dict[str, Any] = {  # the DataCentre keywords of the application part
        "services": inventory.services if services is None else services,
        "appmon_cost": inventory.appmon_cost,
        "analysis_hosts": inventory.analysis_hosts,
        "appmon_order": inventory.appmon_order,
    }
    dc = DataCentre(
        names=inventory.names,
        capacity_pps=inventory.capacity_pps,
        alpha=inventory.alpha,
        beta=inventory.beta,
        traffic_src=traffic.src,
        traffic_dst=traffic.dst,
        traffic_pps=traffic.pps,
        name=inventory.name,
        server_extras=inventory.extras,
        sflow=inventory.sflow,
        **inventory.sample,
        **appmon,
    )
    forwarding = dc.forwarding_pps
    capacity = inventory.capacity_pps * (1.0 - plan_margin)
    saturated = forwarding > capacity
    unmeasured = ~traffic.seen if traffic.seen.size == n else np.ones(n, dtype=bool)
    frozen = saturated | unmeasured
    capacity = np.where(frozen, forwarding, capacity)
    if rising is not None and (rising & ~frozen).any():
        # a rising server gets no sFlow budget, but keeps what the application part, planned
        # first, gives it: otherwise a web server whose traffic steps up would lose its
        # monitoring for as long as the step takes to settle
        kept = forwarding
        if appmon["services"] and inventory.appmon_order == "appmon_first":
            kept = (
                forwarding + build_problem(_with(dc, capacity, appmon), margin=0.0).appmon[0].load
            )
        capacity = np.where(rising & ~frozen, np.minimum(kept, capacity), capacity)
    planned = _with(dc, capacity, appmon)
    planned.check_arrays()
    return planned, saturated, unmeasured & ~saturated


def _with(dc: DataCentre, capacity: np.ndarray, appmon: dict[str, Any]) -> DataCentre:
    """``dc`` with other capacities."""
    return DataCentre(
        names=dc.names,
        capacity_pps=capacity,
        alpha=dc.alpha,
        beta=dc.beta,
        traffic_src=dc.traffic_src,
        traffic_dst=dc.traffic_dst,
        traffic_pps=dc.traffic_pps,
        name=dc.name,
        server_extras=dc.server_extras,
        sflow=dc.sflow,
        alpha_sample=dc.alpha_sample,
        observation_domain=dc.observation_domain,
        ipfix=dc.ipfix,
        **appmon,
    )


def replan(
    inventory: Inventory,
    traffic: Smoothed,
    plan_margin: float,
    solver: str = "exact",
    floor: int | None = None,
    rising: np.ndarray | None = None,
    services: tuple[Any, ...] | None = None,
) -> Candidate:
    """Plan the smoothed traffic and state the applied shares, without writing the document."""
    dc, saturated, unmeasured = datacentre(inventory, traffic, plan_margin, rising, services)
    solution = solve(dc, solver, margin=0.0)  # plan_margin is already in the capacities above
    names = inventory.names
    applied = applied_shares(dc, solution)
    if floor:
        applied = floor_shares(applied, floor)
    return Candidate(
        dc,
        solution,
        applied,
        dc.own_pps,
        dc.forwarding_pps,
        HostNames.where(names, saturated),
        HostNames.where(names, unmeasured),
        floor,
        HostNames.where(names, rising) if rising is not None else (),
    )


def applied_shares(dc: DataCentre, solution: Solution) -> PlanShares:
    """What the plan file will say the data plane does: sFlow's 1-in-N and the topped-up mirrors
    (the planner's own rounding, ``realise``), as arrays; the mirror rates as the file writes
    them (12 significant digits), so that a restarted controller reads back from the file the
    very shares it kept (an exact rate beside its rounded self would look risen or fallen, and
    ask for a two-phase publication where one phase is safe)."""
    applied = solution.applied  # the one rounding the plan file and the report state too
    local = applied.local_rate  # 1/N, or 0
    keep = applied.mirror_pps > 0
    src, dst = applied.mirror_src[keep], applied.mirror_dst[keep]
    rate = significant(applied.mirror_pps[keep] / dc.own_pps[src], None, "mirrors.rate")
    return PlanShares(0, "", local, src.astype(np.int64), dst.astype(np.int64), rate)
