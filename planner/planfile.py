"""The plan file: canonical JSON that agents apply (format in docs/formats.md).

Everything but ``version``, ``created``, ``expires`` and ``solver.seconds`` is a pure function of
the data centre and the solver, and ``plan_id`` hashes exactly that part, so the same input gives
the same plan_id and byte-identical hosts and summary.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from cosample.files import write_text_atomic
from cosample.planner.baseline import solve_noncollab
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.formats import FORMAT_VERSION, PLAN_FORMAT
from cosample.planner.realise import Realised, realise
from cosample.planner.solution import Solution

VOLATILE = ("version", "created", "expires", "plan_id")
DEFAULT_VALIDITY = timedelta(hours=6)


def build_plan(dc: DataCentre, solution: Solution, *, created: datetime | None = None,
               valid_for: timedelta = DEFAULT_VALIDITY, version: int | None = None,
               point_estimate: Solution | None = None) -> dict[str, Any]:
    """The plan document for ``solution`` (rates rounded for sFlow, loads predicted).

    ``point_estimate``: for a robust plan, the same plan made with the point estimates, whose
    collected volume the summary states beside the robust one.
    """
    created = (created or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    problem = solution.problem
    if problem.dc is not dc and problem.dc.names != dc.names:
        raise PlannerError("build_plan: the solution was planned for another data centre")
    applied = realise(solution)
    baseline = (applied if solution.solver == "noncollab"
                else realise(solve_noncollab(problem))).collected_pps  # both after 1-in-N
    plan: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "datacentre": dc.name,
        "sflow": dict(dc.sflow),
        "cost": _cost(problem),
        "solver": {"name": solution.solver, "lp_backend": solution.lp_backend,
                   "variables": solution.variables, "seconds": round(solution.seconds, 6)},
        "summary": _summary(solution, applied, baseline, point_estimate),
        "hosts": _hosts(problem, applied),
    }
    plan["plan_id"] = plan_id(plan)
    plan["version"] = int(created.timestamp()) if version is None else int(version)
    plan["created"] = _iso(created)
    plan["expires"] = _iso(created + valid_for)
    return plan


def plan_id(plan: dict[str, Any]) -> str:
    """SHA-256 of the plan without its volatile fields (time, version, solve time)."""
    stable = {key: value for key, value in plan.items() if key not in VOLATILE}
    stable["solver"] = {k: v for k, v in plan["solver"].items() if k != "seconds"}
    # compact, not the indented file form: the same content, hashed by the C encoder (json's
    # indent forces the pure-Python one, ~7x slower; the controller hashes every cycle)
    compact = json.dumps(stable, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(compact.encode()).hexdigest()


def canonical_json(document: Any) -> str:
    """Sorted keys, two-space indent, no NaN: the one serialisation of a plan."""
    return json.dumps(document, sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_plan(plan: dict[str, Any], path: str | Path) -> None:
    """Write atomically: a reader sees the old plan or the new one, never half of it."""
    write_text_atomic(path, canonical_json(plan))


def _summary(solution: Solution, applied: Realised, baseline: float,
             point_estimate: Solution | None) -> dict[str, Any]:
    problem = solution.problem
    total = float(problem.own_pps.sum())
    collected = applied.collected_pps
    gain = collected / baseline - 1 if baseline > 0 else 0.0
    bounds = solution.bounds
    roles = _roles(problem, applied)
    summary = {
        "servers": problem.size,
        "own_pps_total": _num(total),
        "collected_pps": _num(collected),
        "collected_planned_pps": _num(solution.collected_pps),
        "collected_inbound_pps": _num(applied.inbound_distinct_pps),
        "samples_pps": _num(applied.samples_pps),
        "overlap_pps": _num(applied.samples_pps - collected),
        "noncollab_pps": _num(baseline),
        "gain": _num(gain),
        "coverage": _num(collected / total if total > 0 else 1.0),
        "receivers": int(np.count_nonzero(roles == "receiver")),
        "senders": int(np.count_nonzero(roles == "sender")),
        "mirror_pairs": int(np.count_nonzero(applied.mirror_pps > 0)),
        "max_capacity_use": _num(_max_use(problem, applied.load_pps)),
        "objective": {
            "weighted": not problem.uniform_weight or float(problem.weight[0]) != 1.0,
            "planned": _num(solution.objective),
            "bound_lp": _num(bounds.lp),
            "bound_distinct": _num(bounds.envelope),
            "gap": _num(solution.gap),
            "optimal": bool(solution.optimal),
            "method": bounds.method,
        },
        "assumptions": {
            "margin": _num(float(problem.margin.max())) if problem.uniform_margin else "per server",
            "robust": problem.robust,
            "collector_cap_pps": (_num(problem.collector_cap_pps)
                                  if np.isfinite(problem.collector_cap_pps) else None),
        },
        "notes": list(problem.notes),
    }
    if point_estimate is not None:
        summary["assumptions"]["point_estimate_collected_pps"] = _num(
            realise(point_estimate).collected_pps)
    return summary


def _roles(problem, applied: Realised) -> np.ndarray:
    """receiver (samples its bridge 1-in-1, may take mirrors), sender, or idle (samples nothing)."""
    received = np.bincount(applied.mirror_dst, weights=applied.mirror_pps, minlength=problem.size)
    full = applied.local_rate >= 1.0
    roles = np.where(problem.receiver & (full | (received > 0)), "receiver", "sender")
    nothing = (applied.sflow_sampling == 0) & (received <= 0) & (
        np.bincount(applied.mirror_src, weights=applied.mirror_pps, minlength=problem.size) <= 0)
    return np.where(nothing & ((problem.own_pps == 0) | problem.receiver), "idle", roles)


def _hosts(problem, applied: Realised) -> dict[str, Any]:
    dc = problem.dc
    own = problem.own_pps
    mirrors: dict[int, list] = {}
    receives: dict[int, list] = {}
    for i, k, pps in zip(applied.mirror_src.tolist(), applied.mirror_dst.tolist(),
                         applied.mirror_pps.tolist()):
        if pps <= 0:
            continue
        rate = pps / own[i]
        mirrors.setdefault(i, []).append({"to": dc.names[k], "rate": _num(rate)})
        receives.setdefault(k, []).append({"from": dc.names[i], "rate": _num(rate), "pps": _num(pps)})
    planned_mirrors: dict[int, list] = {}
    src, dst, pps = applied.mirror_src, applied.mirror_dst, applied.planned_mirror_pps
    for i, k, amount in zip(src.tolist(), dst.tolist(), pps.tolist()):
        if amount > 0:
            planned_mirrors.setdefault(i, []).append({"to": dc.names[k], "rate": _num(amount / own[i])})
    roles = _roles(problem, applied)
    hosts = {}
    for i, name in enumerate(dc.names):
        interval = int(applied.sflow_sampling[i])
        capacity = float(problem.capacity_pps[i])
        load = float(applied.load_pps[i])
        host = {
            "role": str(roles[i]),
            "capacity_pps": _num(capacity),
            "margin": _num(problem.margin[i]),
            "forwarding_pps": _num(dc.forwarding_pps[i]),
            "own_pps": _num(own[i]),
            "sampled_pps": _num(problem.bridge_pps[i]),
            "local_rate": _num(applied.local_rate[i]),
            "sflow_sampling": interval or None,
            "mirrors": sorted(mirrors.get(i, []), key=lambda m: m["to"]),
            "receives": sorted(receives.get(i, []), key=lambda m: m["from"]),
            "planned": {"local_rate": _num(applied.planned_rate[i]),
                        "mirrors": sorted(planned_mirrors.get(i, []), key=lambda m: m["to"])},
            "distinct_pps": _num(applied.distinct_pps[i]),
            "load_pps": _num(load),
            "capacity_use": _num(load / capacity if capacity > 0 else 0.0),
            "headroom_pps": _num(capacity - load),
            "alpha": _num(problem.alpha[i]),
            "beta": _num(problem.beta[i]),
            "weight": _num(problem.weight[i]),
        }
        host.update(dc.server_extras.get(name, {}))
        hosts[name] = host
    return hosts


def _cost(problem) -> dict[str, Any]:
    """The coefficients planned with (the intervals' upper ends when robust)."""
    alpha, beta = problem.alpha, problem.beta
    if np.all(alpha == alpha[0]) and np.all(beta == beta[0]):
        return {"alpha": _num(alpha[0]), "beta": _num(beta[0])}
    return {"per_server": True}


def _max_use(problem, load: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(problem.capacity_pps > 0, load / problem.capacity_pps, 0.0)
    return float(use.max()) if use.size else 0.0


def _num(value: float) -> float:
    """A JSON number rounded to 12 significant digits: stable across platforms, exact enough."""
    return float(f"{float(value):.12g}")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
