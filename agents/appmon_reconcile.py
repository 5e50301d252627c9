"""Desired vs observed application-monitoring state -> ordered commands (pure).

Ownership as everywhere in the agent: a device is the agent's by its ``ifalias`` (or the
ledger), a Port/Interface/Mirror row by ``external_ids`` (owner and ``cosample-appmon``), a
flow by the appmon cookie tag. Nothing else is changed or removed. Decreases come first and in
this order: a tunnel port loses its Mirror only after it is isolated again (tag), flows go
before their port, the port before its device. Increases: device, port (isolated), flows,
Mirror, then the port leaves the isolation VLAN. Kernel-mirror filters (tc, applied by the
Linux side) go first among the decreases and come last among the increases, after the device
they copy to; the ``clsact`` qdisc they share with the sFlow chain is the main reconcile's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cosample.agents.appmon_state import (
    APPMON_COOKIE_TAG,
    APPMON_OFPORT_BASE,
    APPMON_OFPORT_COUNT,
    DROP_PRIORITY,
    ISOLATION_VLAN,
    AppmonDevice,
    DesiredAppmon,
    KernelMirrorFilter,
    ObservedAppmon,
    ObservedAppmonDevice,
    ObservedAppmonMirror,
    flow_text,
    rule_actions,
)
from cosample.agents.commands import Command
from cosample.agents.state import ObservedLink


# commands --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AddAppmonDevice(Command):
    device: AppmonDevice
    replace: bool = False

    def describe(self) -> str:
        d = self.device
        return (
            f"{'re-create' if self.replace else 'add'} appmon VXLAN device {d.name} "
            f"({'to' if d.attach else 'from'} {d.peer}, {d.remote_ip}, vni {d.vni})"
        )


@dataclass(frozen=True)
class RemoveAppmonDevice(Command):
    name: str

    def describe(self) -> str:
        return f"remove appmon VXLAN device {self.name}"


@dataclass(frozen=True)
class AddAppmonPort(Command):
    """Attach the tunnel device ``name`` to ``bridge`` (tagged, in the isolation VLAN)."""

    bridge: str
    name: str
    peer: str
    ofport: int

    def describe(self) -> str:
        return f"attach {self.name} to {self.bridge} (ofport {self.ofport}, to {self.peer})"


@dataclass(frozen=True)
class SetAppmonPortTag(Command):
    bridge: str
    name: str
    isolated: bool

    def describe(self) -> str:
        return (
            f"{'isolate' if self.isolated else 'un-isolate'} port {self.name} "
            f"({'tag ' + str(ISOLATION_VLAN) if self.isolated else 'no tag'}: Mirror output)"
        )


@dataclass(frozen=True)
class RemoveAppmonPort(Command):
    bridge: str
    name: str

    def describe(self) -> str:
        return f"detach {self.name} from {self.bridge}"


@dataclass(frozen=True)
class SetAppmonFlows(Command):
    """Replace the flows with ``cookie`` on ``bridge`` by ``flows`` (``flow_text`` form)."""

    bridge: str
    cookie: int
    flows: tuple[str, ...]
    truncates: bool = False

    def describe(self) -> str:
        return f"set {len(self.flows)} appmon flow(s) cookie={self.cookie:#x} on {self.bridge}"


@dataclass(frozen=True)
class RemoveAppmonFlows(Command):
    bridge: str
    cookie: int

    def describe(self) -> str:
        return f"remove appmon flows cookie={self.cookie:#x} from {self.bridge}"


@dataclass(frozen=True)
class SetAppmonMirror(Command):
    """Create the Mirror ``name`` (or update row ``uuid``) selecting ``ports`` -> ``output``."""

    bridge: str
    name: str
    peer: str
    ports: tuple[str, ...]
    output: str
    snaplen: int | None
    uuid: str | None = None
    remote_ip: str = ""  # the analysis host: a mirrored port must not carry its underlay

    def describe(self) -> str:
        return (
            f"{'update' if self.uuid else 'create'} Mirror {self.name}: "
            f"{','.join(self.ports)} -> {self.output} snaplen={self.snaplen}"
        )


@dataclass(frozen=True)
class RemoveAppmonMirror(Command):
    bridge: str
    uuid: str
    name: str

    def describe(self) -> str:
        return f"remove Mirror {self.name} from {self.bridge}"


@dataclass(frozen=True)
class SetKernelMirrorFilter(Command):
    """Write (``tc filter replace``) one hook's kernel-mirror filter."""

    filter: KernelMirrorFilter

    def describe(self) -> str:
        f = self.filter
        return (
            f"set kernel mirror filter on {f.interface} {f.direction} prio {f.prio} "
            f"-> {f.target} ({f.peer})"
        )


@dataclass(frozen=True)
class RemoveKernelMirrorFilter(Command):
    interface: str
    direction: str
    prio: int

    def describe(self) -> str:
        return (
            f"remove kernel mirror filter from {self.interface} {self.direction} prio {self.prio}"
        )


#: Applied by the Linux side (tc), not by the appmon side.
KERNEL_MIRROR_COMMANDS = (SetKernelMirrorFilter, RemoveKernelMirrorFilter)
APPMON_COMMANDS = (
    AddAppmonDevice,
    RemoveAppmonDevice,
    AddAppmonPort,
    SetAppmonPortTag,
    RemoveAppmonPort,
    SetAppmonFlows,
    RemoveAppmonFlows,
    SetAppmonMirror,
    RemoveAppmonMirror,
)


# reconcile -------------------------------------------------------------------------------------
def reconcile_appmon(
    desired: DesiredAppmon | None,
    observed: ObservedAppmon | None,
    bridge: str,
    bridge_exists: bool = True,
    links: Mapping[str, ObservedLink] | None = None,
) -> tuple[list[Command], list[Command]]:
    """(decreases, increases) that turn ``observed`` into ``desired`` on ``bridge``; ``links``:
    the observed interfaces, with the agent's kernel-mirror filters on them."""
    if observed is None:
        return [], []
    desired = desired or DesiredAppmon()
    blocked = {d.name for d in desired.devices if d.name in observed.foreign_links}
    decrease: list[Command] = []
    increase: list[Command] = []
    recreated = _devices(desired, observed, blocked, decrease, increase)
    tunnels = {d.peer: d for d in desired.devices if d.attach and d.name not in blocked}
    if not bridge_exists:
        tunnels = {}
    mirrored = {m.peer for m in desired.mirrors if m.peer in tunnels}
    ofports = _ports(tunnels, mirrored, observed, bridge, recreated, decrease, increase)
    _flows(desired, observed, bridge, ofports, decrease, increase)
    _mirrors(desired, observed, bridge, tunnels, mirrored, decrease, increase)
    _kernel(desired, links or {}, blocked, recreated, decrease, increase)
    return (_ordered(decrease, _DECREASE_ORDER), _ordered(increase, _INCREASE_ORDER))


def appmon_problems(
    desired: DesiredAppmon | None,
    observed: ObservedAppmon | None,
    links: Mapping[str, ObservedLink] | None = None,
) -> list[str]:
    if desired is None or observed is None:
        return []
    problems = [
        f"interface {d.name} exists and is not the agent's; application monitoring "
        f"{'to' if d.attach else 'from'} {d.peer} not set up"
        for d in desired.devices
        if d.name in observed.foreign_links
    ]
    if links is not None:
        for name in sorted({f.interface for f in desired.kernel_filters}):
            link = links.get(name)
            if link is None:
                problems.append(f"interface {name} (a kernel mirror's) not found; not mirrored")
            elif link.conflict:
                problems.append(f"interface {name}: {link.conflict}; kernel mirror not set up")
    return problems


def _kernel(
    desired: DesiredAppmon,
    links: Mapping[str, ObservedLink],
    blocked: set[str],
    recreated: set[str],
    decrease: list,
    increase: list,
) -> None:
    """Kernel-mirror filters: each hook's (prio -> cookie, target) as desired, on interfaces
    that exist and are not in conflict; the agent's others are removed. ``tc filter replace``
    changes a filter in place, so a changed one is written, not removed first."""
    want = {
        (f.interface, f.direction, f.prio): f
        for f in desired.kernel_filters
        if f.target not in blocked
    }
    for name, link in sorted(links.items()):
        if link.conflict:
            continue  # someone else's filter in a range of the agent's: hands off
        for have in link.kernel_filters:
            key = (name, have.direction, have.prio)
            if key not in want:
                decrease.append(RemoveKernelMirrorFilter(*key))
    for key, f in sorted(want.items()):
        on = links.get(f.interface)
        if on is None or on.conflict:
            continue  # reported by appmon_problems
        found = next(
            (h for h in on.kernel_filters if (h.direction, h.prio) == (f.direction, f.prio)), None
        )
        if (
            found is None
            or (found.cookie, found.target) != (f.cookie, f.target)
            or f.target in recreated
        ):
            increase.append(SetKernelMirrorFilter(f))


def _devices(
    desired: DesiredAppmon,
    observed: ObservedAppmon,
    blocked: set[str],
    decrease: list,
    increase: list,
) -> set[str]:
    have = {d.name: d for d in observed.devices}
    want = {d.name: d for d in desired.devices if d.name not in blocked}
    decrease += [RemoveAppmonDevice(name) for name in sorted(set(have) - set(want))]
    recreated = set()
    for name, device in sorted(want.items()):
        current = have.get(name)
        if current is not None and _same(current, device):
            if not current.up:
                increase.append(AddAppmonDevice(device))
            continue
        increase.append(AddAppmonDevice(device, replace=current is not None))
        if current is not None:
            recreated.add(name)
    return recreated


def _same(current: ObservedAppmonDevice, device: AppmonDevice) -> bool:
    return (current.remote_ip, current.vni, current.local_ip, current.dstport) == (
        device.remote_ip,
        device.vni,
        device.local_ip,
        device.dstport,
    )


def _ports(
    tunnels: dict[str, AppmonDevice],
    mirrored: set[str],
    observed: ObservedAppmon,
    bridge: str,
    recreated: set[str],
    decrease: list,
    increase: list,
) -> dict[str, int]:
    """Tunnel ports on ``bridge``; returns peer -> OpenFlow port number."""
    free = (
        n
        for n in range(APPMON_OFPORT_BASE, APPMON_OFPORT_BASE + APPMON_OFPORT_COUNT)
        if n not in observed.used_ofports
    )
    here = {p.name: p for p in observed.ports if p.bridge == bridge}
    decrease += [
        RemoveAppmonPort(p.bridge, p.name)
        for p in observed.ports
        if p.bridge != bridge or p.name not in {d.name for d in tunnels.values()}
    ]
    ofports: dict[str, int] = {}
    for peer, device in sorted(tunnels.items()):
        current = here.get(device.name)
        isolated = peer not in mirrored
        if (  # usable
            current is not None
            and current.ofport is not None
            and current.ofport > 0
            and current.peer == peer
            and device.name not in recreated
        ):
            ofports[peer] = current.ofport
            tagged = current.tag == ISOLATION_VLAN
            if tagged != isolated:
                (decrease if isolated else increase).append(
                    SetAppmonPortTag(bridge, device.name, isolated)
                )
            continue
        if current is not None:
            decrease.append(RemoveAppmonPort(bridge, device.name))
        ofports[peer] = next(free)
        increase.append(AddAppmonPort(bridge, device.name, peer, ofports[peer]))
        if not isolated:
            increase.append(SetAppmonPortTag(bridge, device.name, False))
    return ofports


def _flows(
    desired: DesiredAppmon,
    observed: ObservedAppmon,
    bridge: str,
    ofports: dict[str, int],
    decrease: list,
    increase: list,
) -> None:
    want: dict[int, tuple[frozenset[str], bool]] = {}
    for ofport in ofports.values():
        want[APPMON_COOKIE_TAG | ofport] = (
            frozenset({flow_text(DROP_PRIORITY, f"in_port={ofport}", "drop")}),
            False,
        )
    for rule in desired.rules:
        if rule.peer in ofports:
            actions = rule_actions(ofports[rule.peer], rule.max_len)
            want[rule.cookie] = (
                frozenset(flow_text(priority, match, actions) for priority, match in rule.matches),
                rule.max_len is not None,
            )
    for (where, cookie), flows in sorted(observed.flows.items()):
        if where != bridge or cookie not in want:
            decrease.append(RemoveAppmonFlows(where, cookie))
    for cookie, (flows, truncates) in sorted(want.items()):
        if observed.flows.get((bridge, cookie)) != flows:
            increase.append(SetAppmonFlows(bridge, cookie, tuple(sorted(flows)), truncates))


def _mirrors(
    desired: DesiredAppmon,
    observed: ObservedAppmon,
    bridge: str,
    tunnels: dict[str, AppmonDevice],
    mirrored: set[str],
    decrease: list,
    increase: list,
) -> None:
    want = {m.name: m for m in desired.mirrors if m.peer in mirrored}
    have: dict[str, ObservedAppmonMirror] = {}
    for seen in observed.mirrors:
        if seen.bridge == bridge and seen.name in want and seen.name not in have:
            have[seen.name] = seen
        else:
            decrease.append(RemoveAppmonMirror(seen.bridge, seen.uuid, seen.name))
    for name, mirror in sorted(want.items()):
        output = tunnels[mirror.peer].name
        current = have.get(name)
        if current is not None and (current.src, current.dst, current.output, current.snaplen) == (
            frozenset(mirror.ports),
            frozenset(mirror.ports),
            output,
            mirror.snaplen,
        ):
            continue
        increase.append(
            SetAppmonMirror(
                bridge,
                name,
                mirror.peer,
                mirror.ports,
                output,
                mirror.snaplen,
                current.uuid if current else None,
                tunnels[mirror.peer].remote_ip,
            )
        )


_DECREASE_ORDER = (
    RemoveKernelMirrorFilter,
    SetAppmonPortTag,
    RemoveAppmonMirror,
    RemoveAppmonFlows,
    RemoveAppmonPort,
    RemoveAppmonDevice,
)
_INCREASE_ORDER = (
    AddAppmonDevice,
    AddAppmonPort,
    SetAppmonFlows,
    SetAppmonMirror,
    SetAppmonPortTag,
    SetKernelMirrorFilter,
)


def _ordered(commands: list[Command], order: tuple[type, ...]) -> list[Command]:
    rank = {kind: k for k, kind in enumerate(order)}
    return sorted(commands, key=lambda command: rank[type(command)])
