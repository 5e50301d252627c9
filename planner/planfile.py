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
from cosample.planner.baseline import noncollab_pps
from cosample.planner.datacentre import DataCentre
from cosample.planner.exact import split
from cosample.planner.formats import FORMAT_VERSION, PLAN_FORMAT
from cosample.planner.realise import Realised, realise
from cosample.planner.solution import Solution

VOLATILE = ("version", "created", "expires", "plan_id")
DEFAULT_VALIDITY = timedelta(hours=6)


def build_plan(dc: DataCentre, solution: Solution, *, created: datetime | None = None,
               valid_for: timedelta = DEFAULT_VALIDITY, version: int | None = None) -> dict[str, Any]:
    """The plan document for ``solution`` (rates rounded for sFlow, loads predicted)."""
    created = (created or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    receivers = split(dc).receiver
    applied = realise(dc, solution, receivers)
    baseline = noncollab_pps(dc)
    plan: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "datacentre": dc.name,
        "sflow": dict(dc.sflow),
        "cost": _cost(dc),
        "solver": {"name": solution.solver, "lp_backend": solution.lp_backend,
                   "variables": solution.variables, "seconds": round(solution.seconds, 6)},
        "summary": _summary(dc, solution, applied, baseline, receivers),
        "hosts": _hosts(dc, applied, receivers),
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


def _summary(dc: DataCentre, solution: Solution, applied: Realised, baseline: float,
             receivers: np.ndarray) -> dict[str, Any]:
    total = float(dc.own_pps.sum())
    collected = solution.collected_pps
    gain = collected / baseline - 1 if baseline > 0 else 0.0
    return {
        "servers": dc.size,
        "own_pps_total": _num(total),
        "collected_pps": _num(collected),
        "collected_applied_pps": _num(applied.collected_pps),
        "collected_distinct_pps": _num(applied.distinct_pps),
        "noncollab_pps": _num(baseline),
        "gain": _num(gain),
        "coverage": _num(collected / total if total > 0 else 1.0),
        "receivers": int(np.count_nonzero(receivers & (dc.own_pps + solution.received_pps > 0))),
        "senders": int(np.count_nonzero(~receivers)),
        "mirror_pairs": int(np.count_nonzero(applied.mirror_pps > 0)),
        "max_capacity_use": _num(_max_use(dc, applied.load_pps)),
    }


def _hosts(dc: DataCentre, applied: Realised, receivers: np.ndarray) -> dict[str, Any]:
    mirrors: dict[int, list] = {}
    receives: dict[int, list] = {}
    for i, k, pps in zip(applied.mirror_src.tolist(), applied.mirror_dst.tolist(),
                         applied.mirror_pps.tolist()):
        if pps <= 0:
            continue
        rate = pps / dc.own_pps[i]
        mirrors.setdefault(i, []).append({"to": dc.names[k], "rate": _num(rate)})
        receives.setdefault(k, []).append({"from": dc.names[i], "rate": _num(rate), "pps": _num(pps)})
    hosts = {}
    for i, name in enumerate(dc.names):
        interval = int(applied.sflow_sampling[i])
        role = "receiver" if receivers[i] else "sender"
        if receivers[i] and interval == 0:
            role = "idle"
        capacity = float(dc.capacity_pps[i])
        load = float(applied.load_pps[i])
        host = {
            "role": role,
            "capacity_pps": _num(capacity),
            "forwarding_pps": _num(dc.forwarding_pps[i]),
            "own_pps": _num(dc.own_pps[i]),
            "local_rate": _num(applied.local_rate[i]),
            "sflow_sampling": interval or None,
            "mirrors": sorted(mirrors.get(i, []), key=lambda m: m["to"]),
            "receives": sorted(receives.get(i, []), key=lambda m: m["from"]),
            "load_pps": _num(load),
            "capacity_use": _num(load / capacity if capacity > 0 else 0.0),
            "headroom_pps": _num(capacity - load),
            "alpha": _num(dc.alpha[i]),
            "beta": _num(dc.beta[i]),
        }
        host.update(dc.server_extras.get(name, {}))
        hosts[name] = host
    return hosts


def _cost(dc: DataCentre) -> dict[str, Any]:
    uniform = np.all(dc.alpha == dc.alpha[0]) and np.all(dc.beta == dc.beta[0])
    if uniform:
        return {"alpha": _num(dc.alpha[0]), "beta": _num(dc.beta[0])}
    return {"per_server": True}


def _max_use(dc: DataCentre, load: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(dc.capacity_pps > 0, load / dc.capacity_pps, 0.0)
    return float(use.max()) if use.size else 0.0


def _num(value: float) -> float:
    """A JSON number rounded to 12 significant digits: stable across platforms, exact enough."""
    return float(f"{float(value):.12g}")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
