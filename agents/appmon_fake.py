"""The in-memory twin of ``appmon_host.AppmonSide``, part of ``fakehost.FakeHost``.

It keeps devices, tunnel ports, Mirrors and flows as the real host would and refuses what the
real host refuses: a truncating flow or Mirror on a datapath without the truncate action
(``truncate=False``), a Mirror of a port that is not on the bridge, a device name taken by a
foreign interface. Flows vanish with ``restart_vswitchd`` as on the real host.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from cosample.agents import appmon_reconcile as a
from cosample.agents.appmon_state import (
    ISOLATION_VLAN,
    ObservedAppmon,
    ObservedAppmonDevice,
    ObservedAppmonMirror,
    ObservedAppmonPort,
)
from cosample.agents.commands import Command
from cosample.agents.errors import HostError


@dataclass
class FakeAppmon:
    truncate: bool = True
    devices: dict[str, ObservedAppmonDevice] = field(default_factory=dict)
    ports: dict[str, ObservedAppmonPort] = field(default_factory=dict)
    mirrors: dict[str, ObservedAppmonMirror] = field(default_factory=dict)
    flows: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    foreign: set[str] = field(default_factory=set)
    underlay: set[str] = field(default_factory=set)  # ports routing toward the analysis hosts

    def __post_init__(self) -> None:
        self._uuids = (f"mirror-{k}" for k in itertools.count(1))

    def observe(self, bridge: str, bridge_ports: dict[str, int | None]) -> ObservedAppmon:
        used = {n for n in bridge_ports.values() if n} | {
            p.ofport for p in self.ports.values() if p.bridge == bridge and p.ofport
        }
        return ObservedAppmon(
            devices=tuple(sorted(self.devices.values(), key=lambda d: d.name)),
            ports=tuple(sorted(self.ports.values(), key=lambda p: p.name)),
            mirrors=tuple(sorted(self.mirrors.values(), key=lambda m: m.uuid)),
            flows=dict(self.flows),
            used_ofports=frozenset(used),
            foreign_links=frozenset(self.foreign | set(bridge_ports)),
        )

    def apply(self, command: Command, bridge_ports: dict[str, int | None]) -> None:
        if isinstance(command, a.AddAppmonDevice):
            d = command.device
            if d.name in self.foreign:
                raise HostError(f"interface {d.name} exists and is not the agent's")
            self.devices[d.name] = ObservedAppmonDevice(
                d.name, d.remote_ip, d.vni, d.local_ip, d.dstport, up=True
            )
        elif isinstance(command, a.RemoveAppmonDevice):
            self.devices.pop(command.name, None)
        elif isinstance(command, a.AddAppmonPort):
            if command.name not in self.devices:
                raise HostError(f"no device {command.name}")
            if command.name not in self.ports:
                self.ports[command.name] = ObservedAppmonPort(
                    command.bridge, command.name, command.peer, command.ofport, ISOLATION_VLAN
                )
        elif isinstance(command, a.SetAppmonPortTag):
            port = self.ports[command.name]
            self.ports[command.name] = ObservedAppmonPort(
                port.bridge,
                port.name,
                port.peer,
                port.ofport,
                ISOLATION_VLAN if command.isolated else None,
            )
        elif isinstance(command, a.RemoveAppmonPort):
            self.ports.pop(command.name, None)
        elif isinstance(command, a.SetAppmonFlows):
            self._truncation(command.truncates, command.bridge)
            self.flows[(command.bridge, command.cookie)] = frozenset(command.flows)
        elif isinstance(command, a.RemoveAppmonFlows):
            self.flows.pop((command.bridge, command.cookie), None)
        elif isinstance(command, a.SetAppmonMirror):
            self._truncation(command.snaplen is not None, command.bridge)
            if self.underlay & set(command.ports):
                raise HostError(
                    f"port mirror: {self.underlay & set(command.ports)} carries "
                    f"the route to the analysis host; refused"
                )
            missing = [p for p in command.ports if p not in bridge_ports]
            if missing or command.output not in self.ports:
                raise HostError(f"port mirror: {missing or command.output} not on the bridge")
            uuid = command.uuid or next(self._uuids)
            self.mirrors[uuid] = ObservedAppmonMirror(
                command.bridge,
                uuid,
                command.name,
                frozenset(command.ports),
                frozenset(command.ports),
                command.output,
                command.snaplen,
            )
        elif isinstance(command, a.RemoveAppmonMirror):
            self.mirrors.pop(command.uuid, None)
        else:
            raise HostError(f"appmon side cannot apply {command!r}")

    def _truncation(self, truncates: bool, bridge: str) -> None:
        if truncates and not self.truncate:
            raise HostError(f"bridge {bridge}: the datapath has no truncate action; refused")
