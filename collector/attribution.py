"""Who sent a sampled packet, and with which probability the plan selected it (pure).

Built from a validated plan (``cosample.plan.document.Plan``) and an optional inventory:

- a sample without tunnel-ingress records was taken on a VM port: it belongs to the server
  whose agent address reported it (the host's ``tunnel_ip``, or the inventory's ``agent_ip``);
- a sample with tunnel-ingress records whose VNI is the agents' key for a mirror pair
  ``sender -> this receiver`` (``cosample.dataplane.tunnels.pair_vni``) is a mirrored copy and
  belongs to the sender; its outer source address must be the sender's ``tunnel_ip``;
- a VNI that is some other pair's mirror key is a ``stale_mirror`` (a plan the collector does not
  run yet or any more); another VNI from a known server is tenant overlay traffic, already
  sampled on its way in at the sending server (``overlay_ingress``, not counted); anything else
  is an ``unknown_tunnel``. VM addresses are never used: tenants reuse them.

Before any plan exists (``planless``), the inventory's ``agent_ip`` of each server is all there
is: agents without a plan run their safe state (local sFlow at their own 1-in-N, no mirrors), so
every sample is local and is weighted by the 1-in-N its agent reports; the attribution has no
plan version (``plan_version is None``) and the snapshot says so (``plan: null``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.dataplane.tunnels import pair_vni

if TYPE_CHECKING:  # plan reader and inventory model are heavy to import (pydantic's models);
    from cosample.collector.inventory import Inventory  # replay without either never needs them
    from cosample.plan.document import Plan
    from cosample.plan.guard import GuardSpec

LOCAL, MIRRORED = "local", "mirrored"


@dataclass(frozen=True)
class ServerPlan:
    """What the plan asks of one server's sampling."""

    name: str
    agent: str | None
    sampling: int | None  # the bridge's 1-in-N, None when nothing is sampled locally
    mirrors: Mapping[str, float]  # receiver -> share of this server's packets mirrored to it
    #: OVS's ``sample`` action instead of sFlow: probability out of 65535, IPFIX domain
    sample_probability: int | None = None
    observation_domain: int | None = None
    #: how far the host's guard may step from the plan (``cosample.plan.guard``; None: not at all)
    guard: GuardSpec | None = None

    @property
    def local_rate(self) -> float:
        if self.sample_probability:
            return self.sample_probability / SAMPLE_PROBABILITY_SCALE
        return 1.0 / self.sampling if self.sampling else 0.0

    @property
    def ipfix_key(self) -> str | None:
        """The key of the server's IPFIX stream where sFlow streams have their agent address
        (sums, loss, exposure, ``rate_of``, which holds the probability out of 65535 the
        records report), or None for an sFlow host."""
        return ipfix_key(self.observation_domain) if self.sample_probability else None


@dataclass(frozen=True)
class Source:
    """The verdict on one sample: ``server`` it belongs to and how it was taken (``kind``)."""

    server: str
    kind: str  # LOCAL or MIRRORED
    share: float = 1.0  # mirror share of the sender's packets copied to the sampling receiver


@dataclass
class Attribution:
    """Lookup tables for the fast path, built once per plan."""

    plan_version: int | None  # None: plan-less (see ``planless``)
    plan_id: str | None
    servers: dict[str, ServerPlan]
    server_of_agent: dict[str, str]
    mirrors: dict[tuple[str, int], tuple[str, float, str | None]]  # (receiver agent, VNI) -> ...
    mirror_vnis: frozenset[int]
    known_ips: frozenset[str]
    server_of_address: dict[str, str] = field(default_factory=dict)
    #: ``sample`` hosts: IPFIX exporter address (the host's agent address) -> server
    server_of_exporter: dict[str, str] = field(default_factory=dict)
    #: the plan's IPFIX flow-cache timeout: the longest span one record covers (None: not given)
    ipfix_timeout_s: float | None = None

    def source(self, agent: str, vni: int | None, tunnel_src: str | None) -> Source | str:
        """Where a sample from ``agent`` belongs, or the name of the reason it is not counted."""
        server = self.server_of_agent.get(agent)
        if server is None:
            return "unknown_agent"
        if vni is None and tunnel_src is None:
            return Source(server, LOCAL)
        mirror = self.mirrors.get((agent, vni)) if vni is not None else None
        if mirror is not None:
            sender, share, sender_ip = mirror
            if sender_ip is not None and tunnel_src is not None and tunnel_src != sender_ip:
                return "unknown_tunnel"
            return Source(sender, MIRRORED, share)
        if vni is not None and vni in self.mirror_vnis:
            return "stale_mirror"
        if tunnel_src in self.known_ips:
            return "overlay_ingress"
        return "unknown_tunnel"

    def coverage(
        self, server: str, rate_of: Mapping[str, int] | None = None, scale: float = 1.0
    ) -> float:
        """Fraction of ``server``'s packets sampled somewhere: ``l + Q - l Q`` (independent draws).

        ``rate_of`` gives the 1-in-N each agent reports (what OVS does now), else the plan's;
        ``scale``, the factor its guard runs its mirror rates at (``guardstate``).
        """
        local, mirrored = self.rates(server, rate_of, scale)
        return min(1.0, local + mirrored - local * mirrored)

    def rates(
        self, server: str, rate_of: Mapping[str, int] | None = None, scale: float = 1.0
    ) -> tuple[float, float]:
        """(local sampling probability l, mirrored-and-sampled probability Q) of a packet."""
        plan = self.servers[server]
        if plan.sample_probability:  # the probability the records report, else the plan's
            key = plan.ipfix_key  # (a str: the host samples with IPFIX)
            reported = rate_of.get(key) if rate_of and key is not None else None
            local = (reported or plan.sample_probability) / SAMPLE_PROBABILITY_SCALE
        else:
            local = _probability(self._rate(plan, rate_of))
        return local, min(math.fsum(self.mirror_rates(server, rate_of, scale).values()), 1.0)

    def mirror_rates(
        self, server: str, rate_of: Mapping[str, int] | None = None, scale: float = 1.0
    ) -> dict[str, float]:
        """receiver -> ``scale m_j / N_j``: probability that a packet is mirrored to it and
        sampled (``scale``: the sender's guard's factor on its planned mirror rates)."""
        return {
            receiver: scale * share * _probability(self._rate(self.servers[receiver], rate_of))
            for receiver, share in self.servers[server].mirrors.items()
        }

    @staticmethod
    def _rate(plan: ServerPlan, rate_of: Mapping[str, int] | None) -> int | None:
        reported = rate_of.get(plan.agent) if rate_of and plan.agent else None
        return reported or plan.sampling


def ipfix_key(domain: int | None) -> str:
    return f"ipfix/{domain}"


def exporter_address(source: str) -> str:
    """The UDP source as the plan writes addresses (IPv4-mapped IPv6 as IPv4, no scope)."""
    try:
        ip = ipaddress.ip_address(source.split("%", 1)[0])
    except ValueError:
        return source
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _probability(sampling: int | None) -> float:
    return 1.0 / sampling if sampling else 0.0


def build(plan: Plan, inventory: Inventory | None = None, *, safe: bool = False) -> Attribution:
    """The tables for ``plan``; agent addresses from the inventory override ``tunnel_ip``.

    ``safe``: the plan expired and the agents fell back to local sampling only (no mirrors).
    """
    entries = inventory.servers if inventory is not None else {}
    servers: dict[str, ServerPlan] = {}
    for name, host in plan.hosts.items():
        entry = entries.get(name)
        agent = (
            (entry.agent_ip if entry is not None and entry.agent_ip else None)
            or _agent_override(plan, name)
            or host.tunnel_ip
        )
        sample = not safe and host.local_mechanism == "sample"
        servers[name] = ServerPlan(
            name,
            agent,
            None if safe else host.sflow_sampling,
            {} if safe else {m.peer: m.rate for m in host.mirrors},
            host.sample_probability if sample else None,
            host.observation_domain if sample else None,
            None if safe else host.guard,
        )
    server_of_agent = {s.agent: s.name for s in servers.values() if s.agent is not None}
    mirrors: dict[tuple[str, int], tuple[str, float, str | None]] = {}
    vnis = set()
    for sender in servers.values():
        for receiver, share in sender.mirrors.items():
            vni = pair_vni(sender.name, receiver)
            vnis.add(vni)
            agent = servers[receiver].agent
            if agent is not None:
                mirrors[(agent, vni)] = (sender.name, share, plan.hosts[sender.name].tunnel_ip)
    known = {h.tunnel_ip for h in plan.hosts.values() if h.tunnel_ip} | set(server_of_agent)
    exporters = {s.agent: s.name for s in servers.values() if s.sample_probability and s.agent}
    return Attribution(
        plan.version,
        plan.plan_id,
        servers,
        server_of_agent,
        mirrors,
        frozenset(vnis),
        frozenset(known),
        inventory.server_of_address() if inventory is not None else {},
        exporters,
        plan.ipfix.cache_active_timeout_s,
    )


def planless(inventory: Inventory | None) -> Attribution | None:
    """The safe-state attribution without a plan: each server of the inventory that has an
    ``agent_ip`` samples locally at the rate its agent reports (no mirrors, so no tunnel
    samples are counted); None when the inventory names no agent address."""
    server_of_agent = inventory.server_of_agent() if inventory is not None else {}
    if inventory is None or not server_of_agent:
        return None
    return _local_only(server_of_agent, inventory.server_of_address())


def heard(agents: Iterable[str]) -> Attribution | None:
    """``planless`` for agents a capture holds and no inventory names: each agent address is a
    server of that name (addresses as the decoder writes them, so they match its lookups)."""
    server_of_agent = {agent: agent for agent in agents}
    return _local_only(server_of_agent, {}) if server_of_agent else None


def _local_only(server_of_agent: dict[str, str], server_of_address: dict[str, str]) -> Attribution:
    servers = {name: ServerPlan(name, agent, None, {}) for agent, name in server_of_agent.items()}
    return Attribution(
        None,
        None,
        servers,
        server_of_agent,
        {},
        frozenset(),
        frozenset(server_of_agent),
        server_of_address,
    )


def _agent_override(plan: Plan, host: str) -> str | None:
    """``hosts.<h>.agent_ip`` (validated and normalised by the plan reader): the agent address
    when not ``tunnel_ip``."""
    return plan.hosts[host].agent_ip
