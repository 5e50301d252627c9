"""Two-phase plan transitions: every host lowers its load before any host raises it (pure).

From the running plan OLD and the next plan NEW, ``transition`` builds a plan set of two plans:

* phase 1, version ``NEW.version``, active at once: per host the *smaller* of the two plans in
  everything that costs CPU -- local rate (the larger sFlow N, the smaller ``sample``
  probability, nothing when the two plans sample by different mechanisms), each mirror pair's
  rate (pairs in only one plan dropped, on both the sender and the receiver side), each
  application mirror's share (one in only one plan, or that differs in more than its share,
  dropped). Going from OLD or from NEW to phase 1 only lowers load, so the order in which agents
  apply it does not matter.
* phase 2, NEW itself with version ``NEW.version + 1`` and ``not_before = now + settle``. Every
  host is at or below its NEW load once all agents applied phase 1, so raising to NEW, in any
  order, never exceeds a capacity the planner checked.

A publisher that gives its collector a lead (``start``, the controller's ``not_before``: the
collector must know a plan before any agent applies it) delays both: phase 1 from ``start``,
phase 2 from ``start + settle``.

``settle`` must exceed the agents' interval + jitter + fetch/apply time, and hosts need
synchronised clocks (NTP); the agent never applies a plan before its ``not_before``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping

import orjson

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan.document import FORMAT_VERSION, PLANSET_FORMAT, Plan
from cosample.plan.errors import PlanError
from cosample.plan.hostfields import SAMPLE_FIELDS
from cosample.times import format_time

try:  # built by pip install (setup.py); without it the first phase is lowered in Python
    from cosample.plan import _transition  # type: ignore[attr-defined]  # compiled: no stub
except ImportError:  # pragma: no cover - a host without a compiler
    _transition = None

_NOT_HASHED = ("version", "created", "expires", "not_before", "plan_id", "signature")


def transition(old: Plan, new: Plan, now: datetime, settle_s: float) -> dict[str, Any]:
    """The plan set document (phase 1, phase 2) taking a fleet from ``old`` to ``new``."""
    return plan_set(old.raw, new.raw, old.version, new.version, new.expires, now, settle_s)


def plan_set(
    old: dict[str, Any],
    new: dict[str, Any],
    old_version: int,
    new_version: int,
    new_expires: datetime,
    now: datetime,
    settle_s: float,
    start: datetime | None = None,
    table: Callable[[bytes], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """``transition`` on the plans' documents (versions and expiry given, already checked);
    ``start``: phase 1's ``not_before`` (None: at once).

    Nothing is deep-copied (10^5 hosts: 28 s before, docs/controller.md): phase 2 shares NEW's
    host entries; phase 1's are shallow copies of NEW's with fresh ``mirrors``/``receives``
    lists. The result is read-only (it is serialised, never changed).

    Host tables kept as their JSON bytes (the planner's ``HostTable``: ``.json``) are read
    as bytes when ``table`` says how to keep phase 1's (``table(data)``, the controller's
    ``HostTable([data])``): the compiled ``lower`` writes phase 1's table from OLD's and
    NEW's bytes, the same bytes as the Python path (tests/plan/test_transition_compiled.py),
    and no host entry becomes a dict. Otherwise, or where ``lower`` declines (None: not its
    fast case), both tables are parsed and lowered here."""
    if new_version <= old_version:
        raise PlanError(
            f"version: the new plan ({new_version}) must be newer than the old ({old_version})"
        )
    not_before = (start or now) + timedelta(seconds=settle_s)
    if not_before >= new_expires:
        raise PlanError(
            f"expires: the new plan expires at {format_time(new_expires)}, before "
            f"the end of the {settle_s:g} s settle time"
        )
    phase1 = dict(new)
    lowered = compiled_lower(old["hosts"], new["hosts"]) if table is not None else None
    if table is not None and lowered is not None:
        phase1["hosts"] = table(lowered)
    else:
        old_hosts = _parsed(old["hosts"])
        phase1["hosts"] = {
            name: _lower(old_hosts.get(name), doc) for name, doc in _parsed(new["hosts"]).items()
        }
        _prune_unmatched(phase1["hosts"])
    phase1["transition"] = {"phase": 1, "from_version": old_version, "to_version": new_version}
    phase1["created"] = format_time(now)
    if start is not None:
        phase1["not_before"] = format_time(start)
    phase1["plan_id"] = plan_id(phase1)
    phase2 = dict(new)
    phase2.update(
        version=new_version + 1,
        not_before=format_time(not_before),
        transition={"phase": 2, "from_version": old_version, "to_version": new_version},
    )
    return {"format": PLANSET_FORMAT, "format_version": FORMAT_VERSION, "plans": [phase1, phase2]}


def plan_id(document: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON without the fields that vary between runs. A host table
    kept as bytes (``chunks``: the planner's ``HostTable``) is hashed as those bytes, in the
    place orjson would write the parsed table (the planner's ``plan_id`` splices the same way)."""
    content = {key: value for key, value in document.items() if key not in _NOT_HASHED}
    if isinstance(content.get("solver"), dict):
        content["solver"] = {k: v for k, v in content["solver"].items() if k != "seconds"}
    chunks = getattr(content.get("hosts"), "chunks", None)
    if chunks is None:
        return hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    # a NUL byte where the table goes: orjson escapes control characters in strings, so a raw
    # NUL can be nothing else
    head, tail = orjson.dumps({**content, "hosts": _MARK}, option=orjson.OPT_SORT_KEYS).split(
        b"\x00"
    )
    digest = hashlib.sha256(head)
    for chunk in chunks:
        digest.update(chunk)
    digest.update(tail)
    return digest.hexdigest()


def compiled_lower(old_hosts: Any, new_hosts: Any) -> bytes | None:
    """Phase 1's host table as bytes from the compiled ``lower`` (``_transition.c``), when
    both tables are kept as bytes (``.json``) and it is built; None otherwise or when the
    tables are not its fast case (then the Python path gives the same)."""
    if _transition is None:
        return None
    old_json, new_json = getattr(old_hosts, "json", None), getattr(new_hosts, "json", None)
    if not isinstance(old_json, bytes) or not isinstance(new_json, bytes):
        return None
    return _transition.lower(old_json, new_json, SAMPLE_PROBABILITY_SCALE)


def _parsed(hosts: Any) -> Mapping[str, Any]:
    """A host table as dicts: a table kept as bytes (the planner's ``HostTable``) is parsed
    once (its Mapping methods would cost a Python call or three per look-up of 10^5)."""
    parsed = getattr(hosts, "parsed", None)
    return parsed() if callable(parsed) else hosts


_MARK = orjson.Fragment(b"\x00")


def _lower(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A host's phase-1 entry: the element-wise minimum of its old and new load (a shallow
    copy of NEW's entry with the four fields replaced, and ``appmon`` as ``_lower_appmon``)."""
    out = dict(new)
    old = old or _NOTHING
    local = _lower_local(old, new)
    if local.get("local_mechanism") == "sflow":  # sampling off: no sample fields at all
        for key in _SAMPLE_KEYS:
            out.pop(key, None)
        del local["local_mechanism"]
    out.update(local)
    out["mirrors"] = _min_shares(old.get("mirrors", ()), new.get("mirrors", ()), "to")
    out["receives"] = _min_shares(old.get("receives", ()), new.get("receives", ()), "from")
    if "appmon" in out or "appmon" in old:
        out["appmon"] = _lower_appmon(old.get("appmon", ()), new.get("appmon", ()))
    return out


def _lower_appmon(old: Any, new: Any) -> list[Any]:
    """Phase 1's application mirrors: NEW's entries that OLD has too, and those OLD has with
    another ``share`` only (the same service, mechanism and analysis host: the first such entry
    of OLD's) at the smaller share, the entry that has it. A share's copies and analysis cost
    CPU in proportion to it, so the smaller one lowers both ends' load as the other minima do,
    and the service stays monitored through the transition instead of stopping for ``settle``."""
    kept = []
    for entry in new:
        if entry in old:
            kept.append(entry)
            continue
        share = _share(entry)
        if share is None:
            continue
        rest = _but_share(entry)
        for was in old:
            was_share = _share(was)
            if was_share is not None and _but_share(was) == rest:
                kept.append(was if was_share < share else entry)
                break
    return kept


def _share(entry: Any) -> float | None:
    """An application mirror's share (1: absent or null, every connection); None: not an entry
    with a numeric share."""
    if not isinstance(entry, dict):
        return None
    share = entry.get("share")
    if share is None:
        return 1.0
    return float(share) if isinstance(share, (int, float)) else None


def _but_share(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "share"}


def _lower_local(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The smaller local share: with the same mechanism in both plans, the sparser sFlow 1-in-N
    or the smaller ``sample`` probability; with different mechanisms (or none), none."""
    mechanisms = {old.get("local_mechanism", "sflow"), new.get("local_mechanism", "sflow")}
    if mechanisms == {"sample"}:
        probability = min(int(old["sample_probability"]), int(new["sample_probability"]))
        return {
            "local_rate": probability / SAMPLE_PROBABILITY_SCALE,
            "sample_probability": probability,
        }
    off = {"local_rate": 0.0, "sflow_sampling": None}
    if mechanisms != {"sflow"}:
        return {**off, "local_mechanism": "sflow"}
    old_n, new_n = old.get("sflow_sampling"), new.get("sflow_sampling")
    local_rate = min(float(old["local_rate"]), float(new["local_rate"]))
    if not (local_rate > 0 and old_n and new_n):
        return off
    return {"local_rate": local_rate, "sflow_sampling": max(old_n, new_n)}


_SAMPLE_KEYS = SAMPLE_FIELDS
_NOTHING: dict[str, Any] = {
    "local_rate": 0.0,
    "sflow_sampling": None,
    "mirrors": (),
    "receives": (),
}


def _min_shares(old, new, key: str) -> list[dict]:
    if not old or not new:
        return []
    before = {item[key]: item for item in old}
    out = []
    for item in new:
        was = before.get(item[key])
        if was is not None:
            merged = dict(item)
            merged["rate"] = min(float(item["rate"]), float(was["rate"]))
            if "pps" in merged and "pps" in was:
                merged["pps"] = min(float(item["pps"]), float(was["pps"]))
            out.append(merged)
    return sorted(out, key=lambda item: item[key]) if len(out) > 1 else out


def _prune_unmatched(hosts: dict[str, dict[str, Any]]) -> None:
    """Keep a mirror only if its receiver lists it too (a host missing from NEW drops out)."""
    pairs = {(name, m["to"]) for name, host in hosts.items() for m in host["mirrors"]} & {
        (r["from"], name) for name, host in hosts.items() for r in host["receives"]
    }
    for name, host in hosts.items():
        if host["mirrors"]:
            host["mirrors"] = [m for m in host["mirrors"] if (name, m["to"]) in pairs]
        if host["receives"]:
            host["receives"] = [r for r in host["receives"] if (r["from"], name) in pairs]
