"""The validating plan reader: bytes in, an immutable ``Plan`` out, or one ``PlanError``.

The format is the planner's plan file (docs/formats.md, written by ``cosample.planner.planfile``).
The reader is strict about every field an agent acts on and names the field in its error
(``hosts.s1.mirrors[0].rate: must be in (0, 1], got 1.5``); unknown extra keys are tolerated, as
the format requires. Two optional top-level fields belong to the agents: ``not_before`` (do not
apply before this UTC time; two-phase transitions) and ``signature`` (reserved; agents verify
detached ``.sig`` files instead, see ``signing``). A *plan set* (``format: cosample.planset``)
carries several plans, e.g. the two phases of a transition, in one document.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from cosample.agents.errors import PlanError
from cosample.planner.formats import FORMAT_VERSION, PLAN_FORMAT, PLANSET_FORMAT  # noqa: F401 - re-exported
ROLES = ("sender", "receiver", "idle")
#: Slack allowed on rates and sums through floating-point rounding in the planner.
RATE_SLACK = 1e-9


@dataclass(frozen=True)
class Mirror:
    """A share of a host's own traffic copied to ``peer`` (``to`` for mirrors, ``from`` for receives)."""

    peer: str
    rate: float


@dataclass(frozen=True)
class HostPlan:
    """One host's part of the plan."""

    name: str
    role: str
    local_rate: float
    sflow_sampling: int | None
    mirrors: tuple[Mirror, ...] = ()
    receives: tuple[Mirror, ...] = ()
    bridge: str | None = None
    tunnel_ip: str | None = None
    vm_ports: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Plan:
    """A validated plan. ``raw`` is the parsed JSON, kept for re-writing (transitions)."""

    version: int
    created: datetime
    expires: datetime
    plan_id: str
    hosts: Mapping[str, HostPlan]
    sflow: Mapping[str, Any] = field(default_factory=dict)
    not_before: datetime | None = None
    datacentre: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def expired(self, now: datetime) -> bool:
        return now >= self.expires

    def active(self, now: datetime) -> bool:
        """May be applied at ``now``: not before ``not_before`` and not expired."""
        return (self.not_before is None or now >= self.not_before) and not self.expired(now)


def parse_document(data: bytes) -> tuple[Plan, ...]:
    """Plans in a plan file or plan set, sorted by version; one ``PlanError`` if anything is wrong."""
    document = _json(data)
    if isinstance(document, dict) and document.get("format") == PLANSET_FORMAT:
        _expect(document.get("format_version") == FORMAT_VERSION, "format_version",
                f"expected {FORMAT_VERSION}, got {document.get('format_version')!r}")
        plans = document.get("plans")
        _expect(isinstance(plans, list) and plans, "plans", "expected a non-empty list")
        parsed = tuple(plan_from_dict(item, where=f"plans[{k}].") for k, item in enumerate(plans))
        versions = [plan.version for plan in parsed]
        _expect(len(set(versions)) == len(versions), "plans", f"duplicate versions {versions}")
        return tuple(sorted(parsed, key=lambda plan: plan.version))
    return (plan_from_dict(document),)


def parse_plan(data: bytes) -> Plan:
    """Exactly one plan (not a plan set)."""
    return plan_from_dict(_json(data))


def plan_from_dict(document: Any, where: str = "") -> Plan:
    """Validate a parsed plan; errors name the field, prefixed by ``where``."""
    _expect(isinstance(document, dict), where or "plan", "expected a JSON object", "")
    fmt = document.get("format")
    _expect(fmt == PLAN_FORMAT, "format", f"expected {PLAN_FORMAT!r}, got {fmt!r}", where)
    _expect(document.get("format_version") == FORMAT_VERSION, "format_version",
            f"expected {FORMAT_VERSION}, got {document.get('format_version')!r}", where)
    version = document.get("version")
    _expect(_is_int(version) and version >= 0, "version",
            f"expected a non-negative integer, got {version!r}", where)
    created = _time(document, "created", where)
    expires = _time(document, "expires", where)
    _expect(expires > created, "expires", "must be later than created", where)
    not_before = _time(document, "not_before", where) if "not_before" in document else None
    plan_id = document.get("plan_id")
    _expect(isinstance(plan_id, str) and plan_id != "", "plan_id", "expected a string", where)
    sflow = _sflow(document.get("sflow", {}), where)
    hosts_doc = document.get("hosts")
    _expect(isinstance(hosts_doc, dict) and hosts_doc, "hosts", "expected a non-empty object",
            where)
    hosts = {name: _host(name, value, where) for name, value in hosts_doc.items()}
    _check_pairs(hosts, where)
    datacentre = document.get("datacentre", "")
    return Plan(version=version, created=created, expires=expires, plan_id=plan_id, hosts=hosts,
                sflow=sflow, not_before=not_before,
                datacentre=datacentre if isinstance(datacentre, str) else "", raw=document)


# pieces ------------------------------------------------------------------------------------
def _host(name: str, doc: Any, where: str) -> HostPlan:
    at = f"hosts.{name}"
    _expect(isinstance(name, str) and name != "", "hosts", f"bad host name {name!r}", where)
    _expect(isinstance(doc, dict), at, "expected an object", where)
    role = doc.get("role")
    _expect(role in ROLES, f"{at}.role", f"expected one of {ROLES}, got {role!r}", where)
    local_rate = _rate(doc.get("local_rate"), f"{at}.local_rate", where, allow_zero=True)
    sampling = doc.get("sflow_sampling")
    if sampling is not None:
        _expect(_is_int(sampling) and sampling >= 1, f"{at}.sflow_sampling",
                f"expected null or an integer >= 1, got {sampling!r}", where)
        _expect(1.0 / sampling <= local_rate * (1 + RATE_SLACK) + RATE_SLACK,
                f"{at}.sflow_sampling", f"1-in-{sampling} exceeds local_rate {local_rate:g}", where)
    else:
        _expect(local_rate == 0.0, f"{at}.sflow_sampling",
                f"null although local_rate is {local_rate:g}", where)
    mirrors = _shares(doc.get("mirrors", []), f"{at}.mirrors", "to", name, where)
    receives = _shares(doc.get("receives", []), f"{at}.receives", "from", name, where)
    total = math.fsum(m.rate for m in mirrors) + (1.0 / sampling if sampling else 0.0)
    _expect(total <= 1.0 + RATE_SLACK, f"{at}.mirrors",
            f"mirrors plus local sampling sum to {total:g} > 1", where)
    _expect(role != "idle" or not mirrors, f"{at}.mirrors", "an idle host mirrors nothing", where)
    bridge = doc.get("bridge")
    _expect(bridge is None or _is_name(bridge), f"{at}.bridge",
            f"expected an interface name, got {bridge!r}", where)
    tunnel_ip = doc.get("tunnel_ip")
    if tunnel_ip is not None:
        try:
            ipaddress.ip_address(tunnel_ip)
        except (ValueError, TypeError):
            _expect(False, f"{at}.tunnel_ip", f"expected an IP address, got {tunnel_ip!r}", where)
    vm_ports = doc.get("vm_ports")
    if vm_ports is not None:
        _expect(isinstance(vm_ports, list) and all(_is_name(p) for p in vm_ports)
                and len(set(vm_ports)) == len(vm_ports), f"{at}.vm_ports",
                f"expected a list of distinct interface names, got {vm_ports!r}", where)
        vm_ports = tuple(vm_ports)
    return HostPlan(name=name, role=role, local_rate=local_rate, sflow_sampling=sampling,
                    mirrors=mirrors, receives=receives, bridge=bridge, tunnel_ip=tunnel_ip,
                    vm_ports=vm_ports)


def _shares(items: Any, at: str, key: str, host: str, where: str) -> tuple[Mirror, ...]:
    _expect(isinstance(items, list), at, f"expected a list, got {items!r}", where)
    out = []
    for k, item in enumerate(items):
        _expect(isinstance(item, dict), f"{at}[{k}]", "expected an object", where)
        peer = item.get(key)
        _expect(isinstance(peer, str) and peer not in ("", host), f"{at}[{k}].{key}",
                f"expected another host's name, got {peer!r}", where)
        out.append(Mirror(peer, _rate(item.get("rate"), f"{at}[{k}].rate", where)))
    peers = [m.peer for m in out]
    _expect(len(set(peers)) == len(peers), at, f"duplicate peers {peers}", where)
    return tuple(sorted(out, key=lambda m: m.peer))


def _check_pairs(hosts: Mapping[str, HostPlan], where: str) -> None:
    """Every mirror names a known host that lists the same share under ``receives``."""
    for host in hosts.values():
        for k, mirror in enumerate(host.mirrors):
            at = f"hosts.{host.name}.mirrors[{k}].to"
            _expect(mirror.peer in hosts, at, f"unknown host {mirror.peer!r}", where)
            match = [r for r in hosts[mirror.peer].receives if r.peer == host.name]
            _expect(bool(match) and abs(match[0].rate - mirror.rate) <= RATE_SLACK, at,
                    f"{mirror.peer} does not list receives from {host.name} at rate "
                    f"{mirror.rate:g}", where)
        for k, receive in enumerate(host.receives):
            at = f"hosts.{host.name}.receives[{k}].from"
            _expect(receive.peer in hosts and any(m.peer == host.name
                                                  for m in hosts[receive.peer].mirrors),
                    at, f"{receive.peer!r} does not mirror to {host.name}", where)


def _sflow(doc: Any, where: str) -> dict[str, Any]:
    _expect(isinstance(doc, dict), "sflow", f"expected an object, got {doc!r}", where)
    if "collector" in doc:
        parse_hostport(doc["collector"], f"{where}sflow.collector")
    for key in ("header_bytes", "polling_s"):
        if key in doc:
            _expect(_is_int(doc[key]) and doc[key] >= 0, f"sflow.{key}",
                    f"expected a non-negative integer, got {doc[key]!r}", where)
    if "agent" in doc:
        _expect(isinstance(doc["agent"], str) and doc["agent"], "sflow.agent",
                "expected an interface name or IP address", where)
    return dict(doc)


def parse_hostport(value: Any, at: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (IPv6 as ``[ADDR]:PORT``) split and checked."""
    if not isinstance(value, str) or ":" not in value:
        raise PlanError(f"{at}: expected 'HOST:PORT', got {value!r}")
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise PlanError(f"{at}: expected 'HOST:PORT' with a port in 1..65535, got {value!r}")
    return host, int(port)


def _rate(value: Any, at: str, where: str, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    low_ok = ok and (value >= 0 if allow_zero else value > 0)
    _expect(low_ok and value <= 1 + RATE_SLACK, at,
            f"must be in {'[' if allow_zero else '('}0, 1], got {value!r}", where)
    return min(float(value), 1.0)


def _time(document: Mapping[str, Any], key: str, where: str) -> datetime:
    value = document.get(key)
    try:
        _expect(isinstance(value, str) and value.endswith("Z"), key, "", where)
        parsed = datetime.fromisoformat(value)
    except (PlanError, ValueError):
        raise PlanError(f"{where}{key}: expected a UTC time like 2026-11-22T10:00:00Z, "
                        f"got {value!r}") from None
    return parsed.astimezone(timezone.utc)


def format_time(moment: datetime) -> str:
    """UTC ISO-8601 with ``Z``, as plans write times."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"plan: not valid UTF-8 JSON ({exc})") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 15 and not any(
        c in value for c in "/ \t\n:")


def _expect(condition: bool, at: str, problem: str, where: str = "") -> None:
    if not condition:
        raise PlanError(f"{where}{at}: {problem}")
