"""What a host must look like, from its part of a plan (pure): ``desired_state``, ``safe_state``,
and ``at_rung``, the plan's state on a rung of its guard's ladder (``cosample.plan.guard``).

The safe state is what an agent falls back to when it has no valid, unexpired plan: local sFlow
at the conservative ``safe_sampling`` rate (1-in-4096 by default), no mirrors, no receiver
tunnels. It never loads a server beyond sampling a small fraction of its own traffic.
"""

from __future__ import annotations

from dataclasses import replace

from cosample.agents.appmon_state import desired_appmon
from cosample.agents.config import AgentConfig
from cosample.agents.hoststate import DesiredState
from cosample.agents.sample import desired_sample
from cosample.agents.state import (
    PRIO_BASE,
    PRIO_COUNT,
    MirrorTarget,
    SflowSettings,
    TunnelPort,
    pair_vni,
    short_hash,
)
from cosample.dataplane.tcmirror import chain_thresholds
from cosample.plan.document import HostPlan, Plan, SflowSpec, tunnel_ip
from cosample.plan.errors import PlanError
from cosample.plan.guard import Rung

DEFAULT_BRIDGE = "br-int"


def desired_state(plan: Plan, config: AgentConfig) -> DesiredState:
    """The state ``plan`` asks of ``config.host``; a ``PlanError`` if the host cannot realise it."""
    host = plan.hosts.get(config.host)
    if host is None:
        raise PlanError(
            f"hosts: no entry for this host {config.host!r} (the plan has {len(plan.hosts)} hosts)"
        )
    sflow = None
    if host.sflow_sampling is not None:  # null for a ``sample`` host: sFlow off on its bridge
        sflow = _sflow_settings(plan.sflow, config, host.sflow_sampling)
    mirrors, receivers = _mirror_targets(plan, host, config), _tunnel_ports(plan, host, config)
    return DesiredState(
        bridge=config.bridge or host.bridge or DEFAULT_BRIDGE,
        sflow=sflow,
        mirrors=mirrors,
        receivers=receivers,
        vm_ports=_vm_ports(config, host),
        mode="plan",
        plan_version=plan.version,
        sample=desired_sample(plan, host, config),
        appmon=desired_appmon(
            plan,
            host,
            config.vxlan_port,
            tuple(t.vni for t in mirrors) + tuple(p.key for p in receivers),
        ),
    )


def safe_state(config: AgentConfig, plan: Plan | None = None) -> DesiredState:
    """The documented fallback: local sFlow 1-in-``safe_sampling``, no mirrors, no receivers.

    The collector comes from the last plan seen (even expired) or the config; with neither,
    there is nowhere to send samples and the safe state has no sFlow either.
    """
    sflow_doc = plan.sflow if plan is not None else SflowSpec()
    host = plan.hosts.get(config.host) if plan is not None else None
    sflow = None
    if sflow_doc.collector or config.collector:
        sflow = _sflow_settings(sflow_doc, config, config.safe_sampling)
    return DesiredState(
        bridge=config.bridge or (host.bridge if host else None) or DEFAULT_BRIDGE,
        sflow=sflow,
        mode="safe",
        plan_version=plan.version if plan is not None else None,
        vm_ports=_vm_ports(config, host),
    )


def at_rung(desired: DesiredState, rung: Rung) -> DesiredState:
    """``desired`` (a plan's state) with the guard's ``rung`` in force: its sFlow 1-in-N, and
    every mirror rate times its scale (the chain's thresholds recomputed, so the shares stay
    exclusive; scale 0: no mirrors at all). Rung 0, the plan itself, gives ``desired`` back."""
    changes: dict = {}
    if desired.sflow is not None and rung.sampling is not None:
        if rung.sampling != desired.sflow.sampling:
            changes["sflow"] = replace(desired.sflow, sampling=rung.sampling)
    if desired.mirrors and rung.mirror_scale != 1.0:
        if rung.mirror_scale <= 0.0:
            changes["mirrors"] = ()
        else:
            rates = [t.rate * rung.mirror_scale for t in desired.mirrors]
            changes["mirrors"] = tuple(
                replace(t, rate=rate, probability=q)
                for t, rate, q in zip(desired.mirrors, rates, chain_thresholds(rates))
            )
    return replace(desired, **changes) if changes else desired


def mirror_device_name(config: AgentConfig, peer: str) -> str:
    return f"{config.mirror_device_prefix}-{short_hash(peer)}"


def tunnel_port_name(config: AgentConfig, peer: str) -> str:
    return f"{config.tunnel_port_prefix}-{short_hash(peer)}"


# pieces ------------------------------------------------------------------------------------
def _vm_ports(config: AgentConfig, host: HostPlan | None) -> tuple[str, ...] | None:
    if config.vm_ports is not None:
        return tuple(config.vm_ports)
    return tuple(host.vm_ports) if host is not None and host.vm_ports is not None else None


def _sflow_settings(sflow_doc: SflowSpec, config: AgentConfig, sampling: int) -> SflowSettings:
    """Plan values first, the config's otherwise; both were validated for what OVS accepts."""
    target = sflow_doc.collector or config.collector
    if not target:
        raise PlanError(
            "sflow.collector: missing in the plan and in the agent config "
            "(set 'collector' in the config)"
        )
    return SflowSettings(
        target=target,
        sampling=sampling,
        agent=sflow_doc.agent or config.sflow_agent,
        header_bytes=sflow_doc.header_bytes
        if sflow_doc.header_bytes is not None
        else config.header_bytes,
        polling_s=sflow_doc.polling_s if sflow_doc.polling_s is not None else config.polling_s,
    )


def _mirror_targets(plan: Plan, host: HostPlan, config: AgentConfig) -> tuple[MirrorTarget, ...]:
    if not host.mirrors:
        return ()
    if len(host.mirrors) > PRIO_COUNT:
        raise PlanError(
            f"hosts.{host.name}.mirrors: {len(host.mirrors)} targets, at most "
            f"{PRIO_COUNT} supported"
        )
    local_ip = tunnel_ip(plan, host.name, f"{host.name} mirrors traffic")
    probabilities = chain_thresholds([m.rate for m in host.mirrors])
    targets = tuple(
        MirrorTarget(
            peer=m.peer,
            rate=m.rate,
            probability=q,
            prio=PRIO_BASE + k,
            device=mirror_device_name(config, m.peer),
            remote_ip=tunnel_ip(plan, m.peer, f"{host.name} mirrors to it", local_ip),
            vni=pair_vni(host.name, m.peer),
            local_ip=local_ip,
            dstport=config.vxlan_port,
        )
        for k, (m, q) in enumerate(zip(host.mirrors, probabilities))
    )
    _distinct(host.name, "mirror device names", [t.device for t in targets])
    _distinct(host.name, "mirror VXLAN keys", [t.vni for t in targets])
    return targets


def _tunnel_ports(plan: Plan, host: HostPlan, config: AgentConfig) -> tuple[TunnelPort, ...]:
    if not host.receives:
        return ()
    local_ip = tunnel_ip(plan, host.name, f"{host.name} receives mirrored traffic")
    ports = tuple(
        TunnelPort(
            peer=r.peer,
            name=tunnel_port_name(config, r.peer),
            remote_ip=tunnel_ip(plan, r.peer, f"it mirrors to {host.name}", local_ip),
            key=pair_vni(r.peer, host.name),
            local_ip=local_ip,
            dstport=config.vxlan_port,
        )
        for r in host.receives
    )
    _distinct(host.name, "tunnel port names", [p.name for p in ports])
    return ports


def _distinct(host: str, what: str, values: list) -> None:
    if len(set(values)) != len(values):
        raise PlanError(f"hosts.{host}: {what} collide ({values}); rename a peer host")
