"""Two-phase plan transitions: every host lowers its load before any host raises it (pure).

From the running plan OLD and the next plan NEW, ``transition`` builds a plan set of two plans:

* phase 1, version ``NEW.version``, active at once: per host the *smaller* of the two plans in
  everything that costs CPU -- local rate (the larger sFlow N), each mirror pair's rate (pairs in
  only one plan dropped, on both the sender and the receiver side). Going from OLD or from NEW to
  phase 1 only lowers load, so the order in which agents apply it does not matter.
* phase 2, NEW itself with version ``NEW.version + 1`` and ``not_before = now + settle``. Every
  host is at or below its NEW load once all agents applied phase 1, so raising to NEW, in any
  order, never exceeds a capacity the planner checked.

``settle`` must exceed the agents' interval + jitter + fetch/apply time, and hosts need
synchronised clocks (NTP); the agent never applies a plan before its ``not_before``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from cosample.agents.errors import PlanError
from cosample.agents.plan import PLANSET_FORMAT, FORMAT_VERSION, Plan, format_time

_NOT_HASHED = ("version", "created", "expires", "not_before", "plan_id", "signature")


def transition(old: Plan, new: Plan, now: datetime, settle_s: float) -> dict[str, Any]:
    """The plan set document (phase 1, phase 2) taking a fleet from ``old`` to ``new``."""
    if new.version <= old.version:
        raise PlanError(f"version: the new plan ({new.version}) must be newer than the old "
                        f"({old.version})")
    not_before = now + timedelta(seconds=settle_s)
    if not_before >= new.expires:
        raise PlanError(f"expires: the new plan expires at {format_time(new.expires)}, before "
                        f"the end of the {settle_s:g} s settle time")
    phase1 = copy.deepcopy(dict(new.raw))
    phase1["hosts"] = {name: _lower(old.raw["hosts"].get(name), doc)
                       for name, doc in new.raw["hosts"].items()}
    _prune_unmatched(phase1["hosts"])
    phase1["transition"] = {"phase": 1, "from_version": old.version, "to_version": new.version}
    phase1["created"] = format_time(now)
    phase1["plan_id"] = plan_id(phase1)
    phase2 = copy.deepcopy(dict(new.raw))
    phase2.update(version=new.version + 1, not_before=format_time(not_before),
                  transition={"phase": 2, "from_version": old.version,
                              "to_version": new.version})
    return {"format": PLANSET_FORMAT, "format_version": FORMAT_VERSION,
            "plans": [phase1, phase2]}


def plan_id(document: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON without the fields that vary between runs."""
    content = {key: value for key, value in document.items() if key not in _NOT_HASHED}
    if isinstance(content.get("solver"), dict):
        content["solver"] = {k: v for k, v in content["solver"].items() if k != "seconds"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _lower(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A host's phase-1 entry: the element-wise minimum of its old and new load."""
    out = copy.deepcopy(new)
    old = old or {"local_rate": 0.0, "sflow_sampling": None, "mirrors": [], "receives": []}
    out["local_rate"] = min(float(old["local_rate"]), float(new["local_rate"]))
    samplings = [n for n in (old.get("sflow_sampling"), new.get("sflow_sampling")) if n]
    out["sflow_sampling"] = max(samplings) if out["local_rate"] > 0 and len(samplings) == 2 \
        else None
    if out["sflow_sampling"] is None:
        out["local_rate"] = 0.0
    out["mirrors"] = _min_shares(old.get("mirrors", []), new.get("mirrors", []), "to")
    out["receives"] = _min_shares(old.get("receives", []), new.get("receives", []), "from")
    return out


def _min_shares(old: list[dict], new: list[dict], key: str) -> list[dict]:
    before = {item[key]: item for item in old}
    out = []
    for item in new:
        if item[key] in before:
            merged = dict(item)
            merged["rate"] = min(float(item["rate"]), float(before[item[key]]["rate"]))
            if "pps" in merged and "pps" in before[item[key]]:
                merged["pps"] = min(float(item["pps"]), float(before[item[key]]["pps"]))
            out.append(merged)
    return sorted(out, key=lambda item: item[key])


def _prune_unmatched(hosts: dict[str, dict[str, Any]]) -> None:
    """Keep a mirror only if its receiver lists it too (a host missing from NEW drops out)."""
    for name, host in hosts.items():
        host["mirrors"] = [m for m in host["mirrors"] if any(
            r["from"] == name for r in hosts.get(m["to"], {}).get("receives", []))]
        host["receives"] = [r for r in host["receives"] if any(
            m["to"] == name for m in hosts.get(r["from"], {}).get("mirrors", []))]
