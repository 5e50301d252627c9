"""The application part of a plan (``planner.appmon``): the description's services, as hosts'
``appmon`` entries and a summary.

Both parts draw on one CPU; the joint problem is solved in a lexicographic order the
description picks (``appmon_order``, docs/planner.md "Application monitoring"):

* ``appmon_first`` (default): the services are planned in capacity x (1 - margin) minus
  forwarding, with the whole mirror byte caps (``plan_first``, called by ``build_problem``); the
  sFlow plan is then solved with that load taken out of ``usable_pps`` and those bytes out of
  the mirror caps. The sFlow plan's own optimum fills every host it can, so planned second the
  services would get nothing on any host sFlow saturates.
* ``sflow_first``: the sFlow plan is solved and applied first, unchanged; the services get each
  host's ``usable_pps - load_pps`` and each sender's byte cap minus the sFlow mirrors' bytes
  (``plan_appmon``, called by ``build_plan``). A service without ``request_rate`` gets an even split of its server's
own traffic (``own_pps / packets_per_request``), the server's VMs being its services.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosample.plan.appmon import UNCUT
from cosample.planner.applied import Realised
from cosample.planner.appmon import (
    DEFAULT_COSTS,
    MEASURED_PACKETS_PER_REQUEST,
    NONE,
    ONSITE,
    AppmonPlan,
    Services,
)
from cosample.planner.appmon_costs import sender_cost, service_cost
from cosample.planner.appmon_residues import plan_services


def services_arrays(dc, own_pps: np.ndarray, costs: dict) -> Services:
    """The description's services as ``Services`` arrays."""
    index = {name: i for i, name in enumerate(dc.names)}
    host = np.array([index[s.server] for s in dc.services], dtype=np.int64)
    packets = np.array([s.packets_per_request or MEASURED_PACKETS_PER_REQUEST for s in dc.services])
    known = np.array([s.request_rate is not None for s in dc.services])
    unknown_per_host = np.bincount(host[~known], minlength=dc.size)
    rate = np.array(
        [
            s.request_rate
            if s.request_rate is not None
            else own_pps[h] / max(unknown_per_host[h], 1) / p
            for s, h, p in zip(dc.services, host.tolist(), packets.tolist())
        ]
    )
    return Services(
        host=host,
        rate=rate,
        packets=packets,
        weight=np.array([s.weight for s in dc.services]),
        min_share=np.array([s.min_share for s in dc.services]),
        onsite_ok=np.array([s.interface is not None for s in dc.services]),
        bytes_per_request=np.array(
            [
                service_cost(
                    costs, s.protocol, "truncated_bytes" if s.truncate_bytes else "mirror_bytes"
                )[0]
                for s in dc.services
            ]
        ),
        sender_cost=np.array([sender_cost(costs, s.mirror, s.protocol) for s in dc.services]),
        onsite_cost=np.array([service_cost(costs, s.protocol, "onsite")[0] for s in dc.services]),
        analyser_cost=np.array(
            [service_cost(costs, s.protocol, "analyser")[0] for s in dc.services]
        ),
    )


def protocol_costs(dc, costs: dict) -> dict[str, dict[str, list[str]]]:
    """Per protocol of the services other than HTTP/1.x, which of its costs the plan took as
    measured on it (a calibration's ``appmon.protocols``) and which it estimated (the HTTP/1.x
    cost times ``PROTOCOL_FACTORS``): the plan summary says which."""
    out: dict[str, dict[str, list[str]]] = {}
    for service in dc.services:
        if service.protocol == "http" or service.protocol in out:
            continue
        names = ["onsite", "analyser", "mirror_sender", "kernel_mirror_sender", "mirror_bytes"]
        if service.protocol not in UNCUT:
            names.append("truncated_bytes")
        measured = {name: service_cost(costs, service.protocol, name)[1] for name in names}
        out[service.protocol] = {
            "measured": [name for name in names if measured[name]],
            "estimated": [name for name in names if not measured[name]],
        }
    return dict(sorted(out.items()))


def plan_first(dc, usable: np.ndarray, cap_bytes: np.ndarray) -> tuple[AppmonPlan, Services]:
    """Plan the services of ``dc`` before the sFlow plan (``appmon_first``)."""
    costs = {**DEFAULT_COSTS, **dc.appmon_cost}
    svc = services_arrays(dc, dc.own_pps, costs)
    residual = np.maximum(usable - dc.forwarding_pps, 0.0)
    return plan_services(
        svc, residual, np.asarray(cap_bytes, dtype=float), costs, dc.analysis_hosts
    ), svc


def plan_appmon(problem, applied: Realised) -> tuple[AppmonPlan, Services]:
    """The application part of ``problem``'s plan: planned before the sFlow plan if it was
    (``problem.appmon``), else now, after the applied sFlow plan ``applied``."""
    if problem.appmon is not None:
        return problem.appmon
    dc = problem.dc
    costs = {**DEFAULT_COSTS, **dc.appmon_cost}
    svc = services_arrays(dc, problem.own_pps, costs)
    residual = np.maximum(problem.usable_pps - applied.load_pps, 0.0)
    byte_cap = np.full(dc.size, np.inf)
    if dc.mirror_cap_bytes is not None:
        sent = np.bincount(applied.mirror_src, weights=applied.mirror_pps, minlength=dc.size)
        size = np.nan_to_num(
            dc.packet_bytes if dc.packet_bytes is not None else np.zeros(dc.size), nan=0.0
        )
        byte_cap = np.maximum(dc.mirror_cap_bytes - sent * size, 0.0)
    return plan_services(svc, residual, byte_cap, costs, dc.analysis_hosts), svc


def host_entries(dc, plan: AppmonPlan, svc: Services) -> list[list[dict[str, Any]]]:
    """Each host's ``appmon`` entries (docs/formats.md), sorted by address and port."""
    entries: list[list[dict[str, Any]]] = [[] for _ in dc.names]
    for j, service in enumerate(dc.services):
        to = int(plan.to[j])
        if to == NONE:
            continue
        entry: dict[str, Any] = {
            "service": {
                "address": service.address,
                "port": service.port,
                "protocol": service.protocol,
            },
            "share": float(f"{plan.share[j]:.12g}"),
        }
        if to == ONSITE:
            entry.update(mechanism="sniffer", interface=service.interface, to=None)
        else:
            entry.update(mechanism=service.mirror, to=dc.names[to])
            if service.mirror == "kernel_mirror":
                entry["interface"] = service.interface
            if service.truncate_bytes:
                entry["truncate_bytes"] = service.truncate_bytes
        entries[int(svc.host[j])].append(entry)
    for host in entries:
        host.sort(key=lambda e: (e["service"]["address"], e["service"]["port"]))
    return entries


def summary(problem, applied: Realised, plan: AppmonPlan, svc: Services, num) -> dict[str, Any]:
    """The plan summary's ``appmon`` part: what is monitored, the bound and the gap, and the
    highest capacity use with both parts' loads."""
    dc = problem.dc
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(
            problem.capacity_pps > 0, (applied.load_pps + plan.load) / problem.capacity_pps, 0.0
        )
    requests = float(svc.rate.sum())
    monitored = float(np.sum(svc.rate * plan.share))
    return {
        "services": svc.size,
        "requests_per_s": num(requests),
        "monitored_requests_per_s": num(monitored),
        "coverage": num(monitored / requests if requests > 0 else 1.0),
        "onsite": int(np.count_nonzero(plan.to == ONSITE)),
        "mirrored": int(np.count_nonzero(plan.to >= 0)),
        "unmonitored": int(np.count_nonzero(plan.to == NONE)),
        "max_capacity_use": num(float(use.max()) if use.size else 0.0),
        "analysis_hosts": sorted({dc.names[k] for k in plan.to[plan.to >= 0].tolist()}),
        **(
            {"protocol_costs": protocol_costs(dc, {**DEFAULT_COSTS, **dc.appmon_cost})}
            if any(s.protocol != "http" for s in dc.services)
            else {}
        ),
        "objective": {
            "planned": num(plan.objective),
            "bound_lp": num(plan.bound),
            "gap": num(plan.gap),
            "method": plan.method,
            "order": dc.appmon_order,
        },
    }
