"""An in-memory ``host.Host``: the same interface and error type (``HostError``) as ``LinuxOvsHost``.

For unit tests of the reconcile loop (like faucet's fake OpenFlow table). It models the facts
the real host has and the agent must cope with: flows vanish when ovs-vswitchd restarts, tc
filters vanish when an interface is re-created, a re-created mirror device leaves filters
pointing at nothing, foreign objects exist, a command can fail (``fail_on``). Every ``apply``
counts as one write. One bridge only: what the agent leaves on other bridges is tested on the
real host (test_hardening).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from cosample.agents import commands as c
from cosample.agents import sample as s
from cosample.agents.appmon_fake import FakeAppmon
from cosample.agents.appmon_reconcile import (
    APPMON_COMMANDS,
    RemoveKernelMirrorFilter,
    SetKernelMirrorFilter,
)
from cosample.agents.errors import HostError
from cosample.agents.host import Host
from cosample.agents.hoststate import ObservedState
from cosample.agents.state import (
    PRIO_BASE,
    PRIO_COUNT,
    ObservedDevice,
    ObservedFilter,
    ObservedFlow,
    ObservedKernelFilter,
    ObservedLink,
    ObservedPort,
    ObservedSflow,
)
from cosample.dataplane.ipfix import SAMPLE_COLLECTOR_SET_ID
from cosample.dataplane.tcmirror import bpf_random_bytecode


@dataclass
class FakeLink:
    clsact: bool = False
    clsact_owned: bool = False
    foreign_filters: int = 0
    filters: dict[int, ObservedFilter] = field(default_factory=dict)  # prio -> filter
    #: (direction, prio) -> the agent's kernel-mirror filter
    kernel: dict[tuple[str, int], ObservedKernelFilter] = field(default_factory=dict)


class FakeHost(Host):
    """A bridge with ports, an sFlow row, flows; Linux links with tc filters; VXLAN devices."""

    def __init__(
        self,
        bridge: str = "br-int",
        vm_ports: Iterable[str] = ("vm1", "vm2"),
        bridge_exists: bool = True,
    ) -> None:
        self.bridge = bridge
        self.bridge_exists = bridge_exists
        self.sflow: ObservedSflow | None = None
        self.ports: dict[str, ObservedPort] = {
            name: ObservedPort(name, "", next_ofport, owned=False)
            for next_ofport, name in enumerate(vm_ports, start=1)
        }
        self.flows: dict[int, ObservedFlow] = {}
        self.links: dict[str, FakeLink] = {name: FakeLink() for name in vm_ports}
        self.devices: dict[str, ObservedDevice] = {}
        self.writes = 0
        self.applied: list[c.Command] = []
        #: Command types that fail (as a host refusing them would), e.g. ``{c.AddMirrorDevice}``.
        self.fail_on: set[type] = set()
        self._uuids = (f"uuid-{k}" for k in itertools.count(1))
        self.appmon = FakeAppmon()  # application monitoring (appmon_fake)
        #: Flow_Sample_Collector_Set rows (with their IPFIX row) by UUID
        self.exporters: dict[str, s.ObservedExporter] = {}

    # the host interface ---------------------------------------------------------------------
    def observe(
        self, bridge: str, links: Iterable[str] = (), remotes: Iterable[str] = ()
    ) -> ObservedState:
        sample = s.ObservedSample(
            tuple(sorted(self.exporters.values(), key=lambda e: (e.bridge, e.uuid)))
        )
        if not self.bridge_exists or bridge != self.bridge:
            return ObservedState(
                bridge=bridge,
                bridge_exists=False,
                appmon=self.appmon.observe(bridge, {}),
                sample=sample,
            )
        names = {p.name for p in self.ports.values() if not p.owned} | set(links)
        observed_links = {
            name: ObservedLink(
                name,
                link.clsact,
                tuple(
                    f
                    for prio, f in sorted(link.filters.items())
                    if PRIO_BASE <= prio < PRIO_BASE + PRIO_COUNT
                ),
                clsact_owned=link.clsact_owned,
                foreign_filters=link.foreign_filters,
                kernel_filters=tuple(f for _, f in sorted(link.kernel.items())),
            )
            for name, link in self.links.items()
            if name in names or link.clsact_owned or link.kernel
        }
        return ObservedState(
            bridge=bridge,
            bridge_exists=True,
            sflow=self.sflow,
            ports=tuple(sorted(self.ports.values(), key=lambda p: p.name)),
            flows=tuple(f for _, f in sorted(self.flows.items())),
            links=observed_links,
            devices=tuple(sorted(self.devices.values(), key=lambda d: d.name)),
            appmon=self.appmon.observe(bridge, self._bridge_ports()),
            sample=sample,
        )

    def apply(self, command: c.Command) -> None:
        self.writes += 1
        if type(command) in self.fail_on:
            raise HostError(f"fake host refuses: {command.describe()}")
        self.applied.append(command)
        if isinstance(command, APPMON_COMMANDS):
            return self.appmon.apply(command, self._bridge_ports())
        handler = getattr(self, f"_apply_{type(command).__name__}")
        try:
            handler(command)
        except KeyError as exc:
            raise HostError(f"{command.describe()}: no such interface {exc}") from None

    # simulated events -----------------------------------------------------------------------
    def restart_vswitchd(self) -> None:
        """OpenFlow flows are not in OVSDB: they are gone after a restart."""
        self.flows.clear()
        self.appmon.flows.clear()

    def _bridge_ports(self) -> dict[str, int | None]:
        return {name: port.ofport for name, port in self.ports.items()}

    def recreate_link(self, name: str) -> None:
        """An interface deleted and added again has no qdisc and no filters."""
        owned = self.links[name].clsact_owned  # the ledger remembers; harmless when stale
        self.links[name] = FakeLink(clsact_owned=owned)

    def add_foreign_sflow(self) -> None:
        self.sflow = ObservedSflow(
            "foreign-uuid", owned=False, settings=c.SflowSettings("192.0.2.9:6343", 1)
        )

    def add_foreign_collector_set(self, set_id: int = SAMPLE_COLLECTOR_SET_ID) -> None:
        """Someone else's Flow_Sample_Collector_Set (unmarked) on the bridge."""
        self.exporters["foreign-set"] = s.ObservedExporter(
            self.bridge,
            "foreign-set",
            set_id,
            owned=False,
            ipfix_uuid="foreign-ipfix",
            ipfix=s.IpfixSettings("192.0.2.9:4739", 60, 100),
        )

    # command handlers -----------------------------------------------------------------------
    def _apply_SetSflow(self, command: c.SetSflow) -> None:
        uuid = command.uuid or next(self._uuids)
        self.sflow = ObservedSflow(uuid, owned=True, settings=command.settings)

    def _apply_RemoveSflow(self, command: c.RemoveSflow) -> None:
        if self.sflow is not None and self.sflow.uuid == command.uuid:
            self.sflow = None

    def _apply_AddTunnelPort(self, command: c.AddTunnelPort) -> None:
        if command.name not in self.ports:
            taken = {p.ofport for p in self.ports.values() if p.ofport is not None}
            ofport = command.ofport if command.ofport not in taken else max(taken) + 1
            self.ports[command.name] = ObservedPort(
                command.name,
                "vxlan",
                ofport,
                owned=True,
                options=dict(command.options),
                peer=command.peer,
            )

    def _apply_RemoveTunnelPort(self, command: c.RemoveTunnelPort) -> None:
        port = self.ports.get(command.name)
        if port is not None and port.owned:
            del self.ports[command.name]

    def _apply_AddDropFlow(self, command: c.AddDropFlow) -> None:
        self.flows[command.cookie] = ObservedFlow(
            command.cookie, command.in_port, command.priority, "drop"
        )

    def _apply_RemoveDropFlow(self, command: c.RemoveDropFlow) -> None:
        self.flows.pop(command.cookie, None)

    def _apply_AddMirrorDevice(self, command: c.AddMirrorDevice) -> None:
        if command.replace or command.name not in self.devices:
            self._drop_device(command.name)
        self.devices[command.name] = ObservedDevice(
            command.name, command.remote_ip, command.vni, command.local_ip, command.dstport, up=True
        )

    def _apply_RemoveMirrorDevice(self, command: c.RemoveMirrorDevice) -> None:
        self._drop_device(command.name)

    def _apply_AddClsact(self, command: c.AddClsact) -> None:
        link = self.links[command.device]
        if not link.clsact:
            link.clsact = link.clsact_owned = True

    def _apply_RemoveClsact(self, command: c.RemoveClsact) -> None:
        link = self.links[command.device]
        link.clsact = link.clsact_owned = False
        link.filters.clear()
        link.kernel.clear()
        link.foreign_filters = 0

    def _apply_SetMirrorFilter(self, command: c.SetMirrorFilter) -> None:
        link = self.links[command.device]
        if not link.clsact:
            raise HostError(f"no clsact on {command.device}")  # as tc would fail
        if command.target not in self.devices:
            raise HostError(f"no device {command.target}")
        link.filters[command.prio] = ObservedFilter(
            command.prio, bpf_random_bytecode(command.probability), command.target
        )

    def _apply_SetKernelMirrorFilter(self, command: SetKernelMirrorFilter) -> None:
        f = command.filter
        link = self.links[f.interface]
        if not link.clsact:
            raise HostError(f"no clsact on {f.interface}")  # as tc would fail
        if f.target not in self.appmon.devices:
            raise HostError(f"no device {f.target}")
        if f.interface in self.appmon.underlay:
            raise HostError(
                f"kernel mirror: {f.interface} carries the route to the analysis host; refused"
            )
        link.kernel[(f.direction, f.prio)] = ObservedKernelFilter(
            f.direction, f.prio, f.cookie, f.target
        )

    def _apply_RemoveKernelMirrorFilter(self, command: RemoveKernelMirrorFilter) -> None:
        link = self.links.get(command.interface)
        if link is not None:
            link.kernel.pop((command.direction, command.prio), None)

    def _apply_ForgetBridge(self, command: c.ForgetBridge) -> None:
        pass  # one bridge only: nothing is ever owned elsewhere

    def _apply_RemoveMirrorFilter(self, command: c.RemoveMirrorFilter) -> None:
        link = self.links.get(command.device)
        if link is not None:
            link.filters.pop(command.prio, None)

    def _drop_device(self, name: str) -> None:
        if self.devices.pop(name, None) is not None:
            for link in self.links.values():
                for prio, f in list(link.filters.items()):
                    if f.target == name:
                        link.filters[prio] = replace(f, target=None)

    def _apply_SetSampleExporter(self, command: s.SetSampleExporter) -> None:
        if command.ipfix_uuid:
            for uuid, row in self.exporters.items():
                if row.ipfix_uuid == command.ipfix_uuid and row.owned:
                    self.exporters[uuid] = replace(row, ipfix=command.ipfix)
            return
        if any(
            e.set_id == SAMPLE_COLLECTOR_SET_ID and e.bridge == command.bridge
            for e in self.exporters.values()
        ):  # OVSDB's index on (id, bridge)
            raise HostError(f"{command.describe()}: a collector set with this id exists")
        uuid = next(self._uuids)
        self.exporters[uuid] = s.ObservedExporter(
            command.bridge,
            uuid,
            SAMPLE_COLLECTOR_SET_ID,
            owned=True,
            ipfix_uuid=next(self._uuids),
            ipfix=command.ipfix,
        )

    def _apply_RemoveSampleExporter(self, command: s.RemoveSampleExporter) -> None:
        self.exporters.pop(command.uuid, None)

    def _apply_SetSampleFlow(self, command: s.SetSampleFlow) -> None:
        self.flows[s.SAMPLE_COOKIE] = ObservedFlow(
            s.SAMPLE_COOKIE,
            None,
            s.SAMPLE_PRIORITY,
            s.sample_actions(command.probability, command.domain),
        )

    def _apply_RemoveSampleFlow(self, command: s.RemoveSampleFlow) -> None:
        self.flows.pop(s.SAMPLE_COOKIE, None)
