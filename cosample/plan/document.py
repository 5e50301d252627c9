"""The validating plan reader: bytes in, an immutable ``Plan`` out, or one ``PlanError``.

The format is the planner's plan file (docs/formats.md), declared here as pydantic models
through ``cosample.validation``. The reader is strict about every field an agent acts on or
hands to OVS and the kernel, and names the field in its error
(``plan.json: hosts.s1.mirrors[0].rate: ... (got 1.5)``); unknown extra keys are tolerated, as
the format requires. Host fields are the *applied* values (docs/formats.md): ``local_rate`` is
``1/sflow_sampling`` (or ``sample_probability/65535`` for a host whose ``local_mechanism`` is
``sample``, OVS's OpenFlow ``sample`` action with IPFIX, configured by the top-level ``ipfix``)
and a host's ``mirrors[].rate`` sum to at most 1 (one exclusive tc chain); the plan as the
solver left it, under ``hosts.<h>.planned``, is informational. An optional per-host
``appmon`` list names the services whose packets the host copies to an application analyser
(docs/appmon-mechanisms.md; its models are ``cosample.plan.appmon``'s); it is strict (unknown
keys refused). Two optional top-level fields belong to the agents: ``not_before`` (two-phase
transitions) and ``reset`` (a signed reset of the rollback floor, see ``selection``). A *plan
set* (``format: cosample.planset``) carries several plans, e.g. the two phases of a transition,
in one document; a host's *slice* (``slices``) carries its part of them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan.appmon import AppmonEntry, check_appmon
from cosample.plan.errors import PlanError
from cosample.plan.errors import fail_at as _fail
from cosample.plan.fieldtypes import (
    HEADER_BYTES,
    MAX_OBSERVATION_DOMAIN,
    MAX_SAMPLING,
    RATE_SLACK,
    Collector,
    LocalMechanism,
    LocalRate,
    Rate,
    Role,
    SflowAgent,
    UtcTime,
    listed,
)
from cosample.plan.formats import FORMAT_VERSION, PLAN_FORMAT, PLANSET_FORMAT
from cosample.plan.guard import GuardSpec
from cosample.times import format_time
from cosample.validation import (
    HostName,
    InterfaceName,
    IpAddress,
    Strict,
    TunnelAddress,
    describe,
    parse_refusal,
)

#: A plan's ``version`` may exceed its ``created`` time (Unix seconds) by at most this much: the
#: controller publishes ``max(previous + 1, now)``, so a version far ahead of its creation time
#: can only be a mistake or an attack, and would otherwise block every later plan as a rollback.
VERSION_SKEW_S = 3600


class _Open(Strict):
    """Plan models tolerate unknown keys (the format allows extensions) but type the known ones."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


# models --------------------------------------------------------------------------------------
class Mirror(_Open):
    """A share of a host's own traffic copied to ``to``."""

    to: HostName
    rate: Rate

    @property
    def peer(self) -> str:
        return self.to


class Receive(_Open):
    """A share of another host's traffic (``from``) that this host receives and samples."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)

    sender: HostName = Field(alias="from")
    rate: Rate

    @property
    def peer(self) -> str:
        return self.sender


class SflowSpec(_Open):
    """The plan's sFlow settings; anything missing comes from the agent's configuration."""

    collector: Collector | None = None
    agent: SflowAgent | None = None
    header_bytes: Annotated[int, Field(ge=HEADER_BYTES[0], le=HEADER_BYTES[1])] | None = None
    polling_s: Annotated[int, Field(ge=0, le=3600)] | None = None


class IpfixSpec(_Open):
    """The plan's IPFIX settings for hosts using ``sample``; anything missing comes from the
    agent's configuration."""

    collector: Collector | None = None
    cache_active_timeout_s: Annotated[int, Field(ge=1, le=3600)] | None = None
    cache_max_flows: Annotated[int, Field(ge=1, le=2**32 - 1)] | None = None


class HostPlan(_Open):
    """One host's part of the plan (applied values; ``name`` is its key under ``hosts``)."""

    name: str = ""
    role: Role
    local_rate: LocalRate
    sflow_sampling: Annotated[int, Field(ge=1, le=MAX_SAMPLING)] | None
    mirrors: Annotated[tuple[Mirror, ...], BeforeValidator(listed)] = ()
    receives: Annotated[tuple[Receive, ...], BeforeValidator(listed)] = ()
    bridge: InterfaceName | None = None
    tunnel_ip: TunnelAddress | None = None
    #: The host's sFlow agent address when it is not ``tunnel_ip`` (read by the collector).
    agent_ip: IpAddress | None = None
    vm_ports: Annotated[tuple[InterfaceName, ...], BeforeValidator(listed)] | None = None
    appmon: Annotated[tuple[AppmonEntry, ...], BeforeValidator(listed)] = ()
    #: ``sample``: the local share by OVS's ``sample`` action at ``sample_probability``/65535,
    #: exported as IPFIX with ``observation_domain``; ``sflow`` (default): ``sflow_sampling``
    local_mechanism: LocalMechanism = "sflow"
    sample_probability: Annotated[int, Field(ge=1, le=SAMPLE_PROBABILITY_SCALE)] | None = None
    observation_domain: Annotated[int, Field(ge=1, le=MAX_OBSERVATION_DOMAIN)] | None = None
    #: how far the host's guard may back off between plans (``cosample.plan.guard``)
    guard: GuardSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "HostPlan":
        if self.local_mechanism == "sample":
            self._check_sample()
        else:
            for key in ("sample_probability", "observation_domain"):
                if getattr(self, key) is not None:
                    _fail(
                        (key,),
                        "only with local_mechanism 'sample' (this host uses sflow)",
                        getattr(self, key),
                    )
        if self.sflow_sampling is not None:
            if 1.0 / self.sflow_sampling > self.local_rate * (1 + RATE_SLACK) + RATE_SLACK:
                _fail(
                    ("sflow_sampling",),
                    f"1-in-{self.sflow_sampling} exceeds local_rate {self.local_rate:g}",
                    self.sflow_sampling,
                )
        elif self.local_rate != 0.0 and self.local_mechanism == "sflow":
            _fail(("sflow_sampling",), f"null although local_rate is {self.local_rate:g}", None)
        total = math.fsum(m.rate for m in self.mirrors)
        if total > 1.0 + RATE_SLACK:
            _fail(
                ("mirrors",),
                f"applied mirror shares sum to {total:g} > 1 (one exclusive tc "
                f"chain mirrors a packet at most once)",
                [m.rate for m in self.mirrors],
            )
        if self.role == "idle" and self.mirrors:
            _fail(("mirrors",), "an idle host mirrors nothing", len(self.mirrors))
        for key, shares in (("mirrors", self.mirrors), ("receives", self.receives)):
            peers = [share.peer for share in shares]
            if len(set(peers)) != len(peers):
                _fail((key,), "duplicate peers", peers)
        if self.vm_ports is not None and len(set(self.vm_ports)) != len(self.vm_ports):
            _fail(("vm_ports",), "duplicate interface names", self.vm_ports)
        check_appmon(self.appmon)
        return self

    def _check_sample(self) -> None:
        """A ``sample`` host: probability and domain given, sFlow off, receives nothing (a
        receiver's bridge samples 1-in-1 with sFlow), local_rate the probability's share."""
        for key in ("sample_probability", "observation_domain"):
            if getattr(self, key) is None:
                _fail((key,), "required with local_mechanism 'sample'", None)
        if self.sflow_sampling is not None:
            _fail(
                ("sflow_sampling",),
                "must be null with local_mechanism 'sample' (sFlow off on the bridge)",
                self.sflow_sampling,
            )
        if self.receives:
            _fail(
                ("receives",),
                "a host using local_mechanism 'sample' receives nothing (a "
                "receiver samples its bridge 1-in-1 with sFlow)",
                len(self.receives),
            )
        share = self.sample_probability / SAMPLE_PROBABILITY_SCALE  # type: ignore[operator]
        if abs(self.local_rate - share) > RATE_SLACK:
            _fail(
                ("local_rate",),
                f"must be sample_probability/{SAMPLE_PROBABILITY_SCALE} = {share:.12g}",
                self.local_rate,
            )


class Plan(_Open):
    """A validated plan. ``raw`` is the parsed JSON, kept for re-writing (last good, transitions)."""

    format: Literal[PLAN_FORMAT]  # type: ignore[valid-type]  # pydantic reads the name
    format_version: Literal[FORMAT_VERSION]  # type: ignore[valid-type]  # pydantic reads the name
    version: Annotated[int, Field(ge=0)]
    created: UtcTime
    expires: UtcTime
    not_before: UtcTime | None = None
    plan_id: Annotated[str, Field(min_length=1, max_length=128)]
    datacentre: str = ""
    reset: bool = False
    sflow: SflowSpec = SflowSpec()
    ipfix: IpfixSpec = IpfixSpec()
    hosts: Annotated[dict[HostName, HostPlan], Field(min_length=1)]
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _name_hosts(cls, data: Any) -> Any:
        hosts = data.get("hosts") if isinstance(data, dict) else None
        if isinstance(hosts, dict):
            named = {
                key: {**doc, "name": key} if isinstance(doc, dict) else doc
                for key, doc in hosts.items()
            }
            data = {**data, "hosts": named}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Plan":
        created, expires = self.created, self.expires
        if expires <= created:
            _fail(("expires",), "must be later than created", format_time(expires))
        if self.version > created.timestamp() + VERSION_SKEW_S:
            _fail(
                ("version",),
                f"more than {VERSION_SKEW_S} s ahead of created (Unix time "
                f"{int(created.timestamp())}); a version that far ahead "
                f"would block every later plan",
                self.version,
            )
        _check_pairs(self.hosts)
        _check_domains(self.hosts)
        return self

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw

    @property
    def digest(self) -> str:
        """SHA-256 of the whole document: same version, same digest, or the version was reused."""
        return content_digest(self._raw)

    def expired(self, now: datetime) -> bool:
        return now >= self.expires

    def active(self, now: datetime) -> bool:
        """May be applied at ``now``: not before ``not_before`` and not expired."""
        return (self.not_before is None or now >= self.not_before) and not self.expired(now)


class PlanHead(_Open):
    """A plan's version and validity alone (the controller's own plans, built and checked by
    the planner, when it builds a transition without re-validating 10^5 host entries)."""

    version: Annotated[int, Field(ge=0)]
    expires: UtcTime


class PlanSet(_Open):
    format: Literal[PLANSET_FORMAT]  # type: ignore[valid-type]  # pydantic reads the name
    format_version: Literal[FORMAT_VERSION]  # type: ignore[valid-type]  # pydantic reads the name
    plans: Annotated[list[dict[str, Any]], Field(min_length=1)]


# reading -------------------------------------------------------------------------------------
def parse_document(data: bytes, source: str = "plan") -> tuple[Plan, ...]:
    """Plans in a plan file or plan set, sorted by version; one ``PlanError`` if anything is wrong."""
    return plans_from_document(load_json(data, source), source)


def plans_from_document(document: Any, source: str = "plan") -> tuple[Plan, ...]:
    """``parse_document`` on parsed JSON (a plan slice's plans come this way too)."""
    if isinstance(document, dict) and document.get("format") == PLANSET_FORMAT:
        planset = validate_plan_part(PlanSet, document, source)
        parsed = tuple(
            plan_from_dict(item, source, prefix=f"plans[{k}].")
            for k, item in enumerate(planset.plans)
        )
        versions = [plan.version for plan in parsed]
        if len(set(versions)) != len(versions):
            raise PlanError(f"{source}: plans: duplicate versions {versions}")
        return tuple(sorted(parsed, key=lambda plan: plan.version))
    return (plan_from_dict(document, source),)


def parse_plan(data: bytes, source: str = "plan") -> Plan:
    """Exactly one plan (not a plan set)."""
    return plan_from_dict(load_json(data, source), source)


def plan_from_dict(document: Any, source: str = "plan", prefix: str = "") -> Plan:
    """Validate a parsed plan; errors name ``source`` and the field (after ``prefix``)."""
    plan = validate_plan_part(Plan, document, source, prefix)
    plan._raw = document
    return plan


def plan_head(document: Any, source: str = "plan") -> PlanHead:
    """``version`` and ``expires`` of a parsed plan, validated (the host table is not read)."""
    return validate_plan_part(PlanHead, document, source)


def content_digest(document: Any) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def same_content(plan: Plan, other: Plan) -> bool:
    """The same plan: the same document, or one read from a host's slice and the other whole
    (``slices``) with the same ``plan_id``, the hash of everything but version and times."""
    if plan.digest == other.digest:
        return True
    return ("slice" in plan.raw) != ("slice" in other.raw) and plan.plan_id == other.plan_id


def tunnel_ip(plan: "Plan", name: str, why: str, family_of: str | None = None) -> str:
    """Host ``name``'s tunnel address (``PlanError`` naming ``why`` when the plan gives none); of
    the same IP family as the address ``family_of`` when given (a tunnel's two ends)."""
    ip = plan.hosts[name].tunnel_ip
    if ip is None:
        raise PlanError(f"hosts.{name}.tunnel_ip: required because {why}")
    if (
        family_of is not None
        and ipaddress.ip_address(ip).version != ipaddress.ip_address(family_of).version
    ):
        raise PlanError(
            f"hosts.{name}.tunnel_ip: {ip} is not of the IP family of this host's "
            f"tunnel address {family_of}; a tunnel needs both ends in one family"
        )
    return ip


# pieces --------------------------------------------------------------------------------------
def _check_pairs(hosts: dict[str, HostPlan]) -> None:
    """Every mirror names another known host that lists the same share under ``receives``."""
    for host in hosts.values():
        for k, mirror in enumerate(host.mirrors):
            loc = ("hosts", host.name, "mirrors", k, "to")
            if mirror.peer == host.name:
                _fail(loc, "a host cannot mirror to itself", mirror.peer)
            if mirror.peer not in hosts:
                _fail(loc, "unknown host", mirror.peer)
            match = [r for r in hosts[mirror.peer].receives if r.peer == host.name]
            if not match or abs(match[0].rate - mirror.rate) > RATE_SLACK:
                _fail(
                    loc,
                    f"{mirror.peer} does not list receives from {host.name} at rate "
                    f"{mirror.rate:g}",
                    mirror.peer,
                )
        for k, entry in enumerate(host.appmon):
            loc = ("hosts", host.name, "appmon", k, "to")
            if entry.to == host.name:
                _fail(
                    loc, "the analysis host is this host: write null for on-site analysis", entry.to
                )
            if entry.to is not None and entry.to not in hosts:
                _fail(loc, "unknown host", entry.to)
        for k, receive in enumerate(host.receives):
            loc = ("hosts", host.name, "receives", k, "from")
            if receive.peer not in hosts or not any(
                m.peer == host.name for m in hosts[receive.peer].mirrors
            ):
                _fail(loc, f"{receive.peer!r} does not mirror to {host.name}", receive.peer)


def _check_domains(hosts: dict[str, HostPlan]) -> None:
    """Each ``observation_domain`` names one host: the collector attributes records by it."""
    seen: dict[int, str] = {}
    for host in hosts.values():
        domain = host.observation_domain
        if domain is None:
            continue
        if domain in seen:
            _fail(
                ("hosts", host.name, "observation_domain"),
                f"also the observation domain of {seen[domain]}; each host needs its own",
                domain,
            )
        seen[domain] = host.name


def validate_plan_part(kind: type[BaseModel], document: Any, source: str, prefix: str = "") -> Any:
    """``document`` as a ``kind``, or one ``PlanError`` naming ``source`` and the field."""
    try:
        return kind.model_validate(document)
    except ValidationError as exc:
        raise PlanError(f"{source}: {prefix}{describe(exc)}") from None
    except RecursionError:
        raise PlanError(f"{source}: {prefix}nested too deeply") from None


def load_json(data: bytes, source: str) -> Any:
    """Parsed JSON, or one ``PlanError`` naming ``source``."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"{source}: not valid UTF-8 JSON ({exc})") from None
    except RecursionError:
        raise PlanError(f"{source}: not a plan (JSON nested too deeply)") from None
    except ValueError as exc:  # Python's own limit: an integer over 4,300 digits
        raise PlanError(f"{source}: not a plan ({parse_refusal(exc)})") from None
