"""Desired vs observed state -> the ordered commands that close the gap (pure, like faucet's valves).

Order matters for safety: every command that lowers load (removals, sparser sFlow) comes
before any command that raises it, and a mirror chain is changed so that no target's share ever
exceeds the larger of its old and new share. Within a receiver tunnel,
the drop flow exists before the port and outlives it, so mirrored packets never reach the
bridge's normal forwarding. Only objects marked as the agent's own (or in its ledger) are
changed or removed, on the plan's bridge and on any bridge it owned things on before; anything
else in the way is a conflict: ``find_problems`` reports it per port, the agent leaves that port
alone and configures the rest. Mirrors are all or nothing: if one target's device name is taken
by a foreign interface, no filter is set (a missing link in a chain would raise the shares of
the targets after it).
"""

from __future__ import annotations

from collections.abc import Iterable

from cosample.agents.appmon_reconcile import appmon_problems, reconcile_appmon
from cosample.agents.commands import (
    AddClsact,
    AddDropFlow,
    AddMirrorDevice,
    AddTunnelPort,
    Command,
    ForgetBridge,
    RemoveClsact,
    RemoveDropFlow,
    RemoveMirrorDevice,
    RemoveMirrorFilter,
    RemoveSflow,
    RemoveTunnelPort,
    SetMirrorFilter,
    SetSflow,
)
from cosample.agents.hoststate import DesiredState, ObservedState
from cosample.agents.sample import (
    SAMPLE_COOKIE,
    RemoveSampleExporter,
    RemoveSampleFlow,
    SetSampleExporter,
    SetSampleFlow,
    reconcile_sample,
    sample_problems,
)
from cosample.agents.state import (
    DROP_FLOW_PRIORITY,
    OFPORT_BASE,
    OFPORT_COUNT,
    MirrorTarget,
    ObservedDevice,
    ObservedFilter,
    drop_cookie,
)
from cosample.dataplane.tcmirror import bpf_random_bytecode

VM_PORT_TYPES = ("", "system")


def reconcile(desired: DesiredState, observed: ObservedState) -> list[Command]:
    """Commands that turn ``observed`` into ``desired``: decreases first, then increases
    (application monitoring's before and after the rest: appmon_reconcile)."""
    app_decrease, app_increase = reconcile_appmon(
        desired.appmon, observed.appmon, desired.bridge, observed.bridge_exists, observed.links
    )
    sample_decrease, sample_increase = reconcile_sample(
        desired.sample,
        observed.sample,
        desired.bridge,
        observed.bridge_exists,
        {f.cookie: (f.priority, f.actions) for f in observed.flows},
    )
    if not observed.bridge_exists:  # never create a production bridge; find_problems says so
        stale: list[Command] = list(sample_decrease)
        _elsewhere(desired, observed, stale)
        return app_decrease + _ordered(stale, _DECREASE_ORDER) + app_increase
    decrease: list[Command] = list(sample_decrease)
    increase: list[Command] = list(sample_increase)
    blocked = _blocked_devices(desired, observed)
    recreated = _devices(desired, observed, blocked, decrease, increase)
    _filters(desired, observed, recreated, bool(blocked), decrease, increase)
    _tunnels(desired, observed, decrease, increase)
    _sflow(desired, observed, decrease, increase)
    _elsewhere(desired, observed, decrease)
    return (
        app_decrease
        + _ordered(decrease, _DECREASE_ORDER)
        + _ordered(increase, _INCREASE_ORDER)
        + app_increase
    )


def vm_ports(desired: DesiredState, observed: ObservedState) -> tuple[str, ...]:
    """The ports whose ingress is mirrored: as configured, else the bridge's non-owned system
    ports; never a port that is not on the bridge or that carries the tunnels' underlay."""
    return tuple(
        name for name in _candidate_ports(desired, observed) if _refusal(name, observed) is None
    )


def _candidate_ports(desired: DesiredState, observed: ObservedState) -> tuple[str, ...]:
    if desired.vm_ports is not None:
        return tuple(desired.vm_ports)
    return tuple(
        sorted(
            p.name
            for p in observed.ports
            if not p.owned and p.type in VM_PORT_TYPES and p.name != observed.bridge
        )
    )


def _refusal(name: str, observed: ObservedState) -> str | None:
    """Why ``name`` must not be mirrored from, or None."""
    if name in observed.underlay:
        return (
            f"VM port {name} carries the underlay route of the mirror tunnels; refused "
            f"(mirroring it would mirror the tunnels themselves)"
        )
    if name not in {p.name for p in observed.ports if not p.owned}:
        return f"VM port {name} is not a port of bridge {observed.bridge}; refused"
    link = observed.links.get(name)
    if link is not None and link.conflict:
        return f"VM port {name}: {link.conflict}; left alone, its traffic is not mirrored"
    return None


def find_problems(desired: DesiredState, observed: ObservedState) -> list[str]:
    """What the agent will not fix by itself and reports instead (status file, metrics)."""
    if not observed.bridge_exists:
        return [f"bridge {observed.bridge} does not exist; the agent never creates bridges"]
    problems = appmon_problems(desired.appmon, observed.appmon, observed.links)
    problems += sample_problems(desired.sample, observed.sample, observed.bridge)
    if observed.sflow is not None and not observed.sflow.owned:
        problems.append(
            f"bridge {observed.bridge} has a foreign sFlow row "
            f"{observed.sflow.uuid}; left alone, local sampling not managed"
        )
    if desired.mirrors:
        candidates = _candidate_ports(desired, observed)
        problems += [why for name in candidates if (why := _refusal(name, observed))]
        ports = vm_ports(desired, observed)
        if not ports:
            problems.append("no VM ports to mirror from (set vm_ports in the plan or config)")
        problems += [
            f"VM port {name} has no Linux interface; its traffic is not mirrored"
            for name in ports
            if name not in observed.links
        ]
        problems += [
            f"interface {t.device} exists and is not the agent's; no mirror is set "
            f"up (toward {t.peer} or any other peer) until it is renamed or removed"
            for t in desired.mirrors
            if t.device in _blocked_devices(desired, observed)
        ]
    for port in observed.ports:
        if not port.owned and port.name in {t.name for t in desired.receivers}:
            problems.append(
                f"port {port.name} exists but is not ours; tunnel from "
                f"{port.peer or 'its peer'} not set up"
            )
    return problems


# pieces ------------------------------------------------------------------------------------
def _blocked_devices(desired: DesiredState, observed: ObservedState) -> set[str]:
    """Mirror device names taken by an interface that is not the agent's."""
    return {t.device for t in desired.mirrors if t.device in observed.foreign_links}


def _devices(
    desired: DesiredState,
    observed: ObservedState,
    blocked: set[str],
    decrease: list,
    increase: list,
) -> set[str]:
    """Mirror VXLAN devices; returns the names (re)created, whose filters must be re-set."""
    have = {d.name: d for d in observed.devices}
    want = {t.device: t for t in desired.mirrors if t.device not in blocked}
    decrease += [RemoveMirrorDevice(name) for name in sorted(set(have) - set(want))]
    recreated = set()
    for name, target in want.items():
        device = have.get(name)
        if device is not None and _same_device(device, target):
            if not device.up:
                increase.append(_add_device(target, replace=False))
            continue
        increase.append(_add_device(target, replace=device is not None))
        recreated.add(name)
    return recreated


def _same_device(device: ObservedDevice, target: MirrorTarget) -> bool:
    return (device.remote_ip, device.vni, device.local_ip, device.dstport) == (
        target.remote_ip,
        target.vni,
        target.local_ip,
        target.dstport,
    )


def _add_device(target: MirrorTarget, replace: bool) -> AddMirrorDevice:
    return AddMirrorDevice(
        name=target.device,
        peer=target.peer,
        remote_ip=target.remote_ip,
        vni=target.vni,
        local_ip=target.local_ip,
        dstport=target.dstport,
        replace=replace,
    )


def _filters(
    desired: DesiredState,
    observed: ObservedState,
    recreated: set[str],
    blocked: bool,
    decrease: list,
    increase: list,
) -> None:
    """The filter chain on each VM port, changed so that no target's share ever overshoots.

    Target k's share is ``q_k * prod_{j<k} (1 - q_j)``: changing an early filter moves every
    later share. So from the first filter that must change, the chain is taken down from its
    end (each removal lowers only the removed filter's own share) and rebuilt from its start
    (each addition sets that target to its new share exactly, later ones still absent).
    """
    ports = set(vm_ports(desired, observed))
    want = {} if blocked else {t.prio: t for t in desired.mirrors}
    kernel = kernel_mirror_links(desired)  # they share the clsact qdisc
    for name, link in sorted(observed.links.items()):
        if link.conflict:
            continue  # someone else's qdisc or filter in the agent's range: hands off
        wanted_here = want if name in ports else {}
        have = {f.prio: f for f in link.filters}
        changed = [
            prio
            for prio in set(have) | set(wanted_here)
            if prio not in wanted_here
            or not _same_filter(have.get(prio), wanted_here[prio], recreated)
        ]
        if (wanted_here or name in kernel) and not link.clsact:
            increase.append(AddClsact(name))
        if (
            not wanted_here
            and name not in kernel
            and link.clsact
            and link.clsact_owned
            and not link.foreign_filters
        ):
            decrease.append(RemoveClsact(name))  # after its filters: see _DECREASE_ORDER
        if changed:
            first = min(changed)
            decrease += [
                RemoveMirrorFilter(name, prio)
                for prio in sorted((p for p in have if p >= first), reverse=True)
            ]
            increase += [
                SetMirrorFilter(name, prio, target.probability, target.device)
                for prio, target in sorted(wanted_here.items())
                if prio >= first
            ]


def kernel_mirror_links(desired: DesiredState) -> frozenset[str]:
    """The interfaces the plan's kernel mirrors (``kernel_mirror``) put tc filters on."""
    if desired.appmon is None:
        return frozenset()
    return frozenset(f.interface for f in desired.appmon.kernel_filters)


def _same_filter(current: ObservedFilter | None, target: MirrorTarget, recreated: set[str]) -> bool:
    return (
        current is not None
        and current.target == target.device
        and target.device not in recreated
        and current.bytecode == bpf_random_bytecode(target.probability)
    )


def _tunnels(
    desired: DesiredState, observed: ObservedState, decrease: list, increase: list
) -> None:
    owned = {p.name: p for p in observed.ports if p.owned}
    foreign = {p.name for p in observed.ports if not p.owned}
    used = {p.ofport for p in observed.ports if p.ofport}
    free = (n for n in range(OFPORT_BASE, OFPORT_BASE + OFPORT_COUNT) if n not in used)
    wanted_flows: dict[int, int] = {}
    for port in desired.receivers:
        if port.name in foreign:
            continue
        current = owned.get(port.name)
        options = tuple(sorted(port.options().items()))
        if current is not None and current.ofport and current.ofport > 0:
            ofport = current.ofport
            if tuple(sorted(current.options.items())) == options and current.peer == port.peer:
                wanted_flows[drop_cookie(ofport)] = ofport
                continue
            decrease.append(RemoveTunnelPort(desired.bridge, port.name))
        else:
            if current is not None:  # no usable port number: recreate it with one
                decrease.append(RemoveTunnelPort(desired.bridge, port.name))
            ofport = next(free)
        wanted_flows[drop_cookie(ofport)] = ofport
        increase.append(AddTunnelPort(desired.bridge, port.name, port.peer, options, ofport))
    wanted_names = {p.name for p in desired.receivers}
    decrease += [
        RemoveTunnelPort(desired.bridge, name) for name in sorted(set(owned) - wanted_names)
    ]
    have_flows = {f.cookie: f for f in observed.flows if f.cookie != SAMPLE_COOKIE}
    for cookie, flow in sorted(have_flows.items()):
        if cookie not in wanted_flows or (flow.in_port, flow.priority, flow.actions) != (
            wanted_flows[cookie],
            DROP_FLOW_PRIORITY,
            "drop",
        ):
            decrease.append(RemoveDropFlow(desired.bridge, cookie))
    for cookie, ofport in sorted(wanted_flows.items()):
        had = have_flows.get(cookie)
        if had is None or (had.in_port, had.priority, had.actions) != (
            ofport,
            DROP_FLOW_PRIORITY,
            "drop",
        ):
            increase.append(AddDropFlow(desired.bridge, cookie, ofport, DROP_FLOW_PRIORITY))


def _sflow(desired: DesiredState, observed: ObservedState, decrease: list, increase: list) -> None:
    current = observed.sflow
    if current is not None and not current.owned:
        return  # foreign row: reported, never touched
    if desired.sflow is None:
        if current is not None:
            decrease.append(RemoveSflow(desired.bridge, current.uuid))
        return
    if current is None:
        increase.append(SetSflow(desired.bridge, desired.sflow))
    elif current.settings != desired.sflow:
        command = SetSflow(desired.bridge, desired.sflow, current.uuid)
        sparser = desired.sflow.sampling >= current.settings.sampling
        (decrease if sparser else increase).append(command)


def _elsewhere(desired: DesiredState, observed: ObservedState, decrease: list) -> None:
    """Everything owned on other bridges goes; then the ledger forgets those bridges."""
    for other in observed.elsewhere:
        if other.bridge == desired.bridge:
            continue
        decrease += [RemoveTunnelPort(other.bridge, name) for name in other.ports]
        decrease += [RemoveDropFlow(other.bridge, cookie) for cookie in other.flows]
        if other.sflow_uuid:
            decrease.append(RemoveSflow(other.bridge, other.sflow_uuid))
        decrease.append(ForgetBridge(other.bridge))


_DECREASE_ORDER = (
    RemoveMirrorFilter,
    RemoveClsact,
    RemoveMirrorDevice,
    RemoveTunnelPort,
    RemoveDropFlow,
    RemoveSampleFlow,
    SetSampleFlow,
    RemoveSampleExporter,
    RemoveSflow,
    SetSflow,
    ForgetBridge,
)
_INCREASE_ORDER = (
    AddMirrorDevice,
    AddDropFlow,
    AddTunnelPort,
    AddClsact,
    SetMirrorFilter,
    SetSflow,
    SetSampleExporter,
    SetSampleFlow,
)


def _ordered(commands: Iterable[Command], order: tuple[type, ...]) -> list[Command]:
    """Stable sort by command kind in ``order``."""
    rank = {kind: k for k, kind in enumerate(order)}
    return sorted(commands, key=lambda command: rank[type(command)])
