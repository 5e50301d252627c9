"""A host backend: one typed interface (``Host``), the real OVS/Linux host, and its in-memory twin.

Every backend observes the host as an ``ObservedState`` and applies one ``Command`` at a time,
raising ``HostError`` (and nothing else) when the host refuses or cannot be reached, in the
style of ovsdbapp's ``api.API``. ``LinuxOvsHost`` is this machine: OVSDB/OpenFlow
(``ovsdb.OvsdbSide``) plus Linux ``ip``/``tc`` (``linuxnet.LinuxSide``), with the ledger of what
the agent owns (``ledger.Ledger``). ``fakehost.FakeHost`` implements the same interface in memory
for unit tests; test_sandbox checks the two agree command for command.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path

from cosample.agents import commands as c
from cosample.agents.appmon_host import AppmonSide
from cosample.agents.appmon_reconcile import APPMON_COMMANDS, KERNEL_MIRROR_COMMANDS
from cosample.agents.config import AgentConfig
from cosample.agents.hoststate import ObservedState
from cosample.agents.ledger import LEDGER_FILE, Ledger
from cosample.agents.linuxnet import LinuxSide
from cosample.agents.ovsdb import OvsdbSide
from cosample.agents.reconcile import VM_PORT_TYPES
from cosample.agents.sample import SAMPLE_COMMANDS, SetSampleExporter, SetSampleFlow
from cosample.agents.sample_host import SampleSide


class Host(ABC):
    """What the agent needs of a host. ``writes`` counts applied commands."""

    writes: int = 0

    @abstractmethod
    def observe(
        self, bridge: str, links: Iterable[str] = (), remotes: Iterable[str] = ()
    ) -> ObservedState:
        """The host as it is: ``bridge``, the interfaces ``links`` (VM ports), the interfaces
        routing toward the tunnel peers ``remotes``, and everything the agent owns anywhere."""

    @abstractmethod
    def apply(self, command: c.Command) -> None:
        """Perform one command; ``HostError`` if the host refuses it or cannot be reached."""


_LINUX_COMMANDS = (
    c.AddMirrorDevice,
    c.RemoveMirrorDevice,
    c.AddClsact,
    c.RemoveClsact,
    c.SetMirrorFilter,
    c.RemoveMirrorFilter,
    *KERNEL_MIRROR_COMMANDS,
)
#: Commands that put something the agent owns on a bridge: the ledger names it first.
_BRIDGE_WRITES = (c.SetSflow, c.AddTunnelPort, c.AddDropFlow, SetSampleExporter, SetSampleFlow)


class LinuxOvsHost(Host):
    """This machine's OVS (at ``config.ovsdb``) and Linux network stack."""

    def __init__(self, config: AgentConfig) -> None:
        self.ledger = Ledger(Path(config.state_dir) / LEDGER_FILE)
        self.ovs = OvsdbSide(config.ovsdb, config.rundir, config.timeout_s)
        self.linux = LinuxSide(config.mirror_device_prefix, self.ledger, config.timeout_s)
        self.appmon = AppmonSide(self.ovs, self.ledger, config.timeout_s)
        self.sample = SampleSide(self.ovs)
        self.writes = 0

    def observe(
        self, bridge: str, links: Iterable[str] = (), remotes: Iterable[str] = ()
    ) -> ObservedState:
        exists, sflow, ports, elsewhere = self.ovs.observe(bridge, self.ledger.names("bridges"))
        appmon = self.appmon.observe(bridge)
        sample = self.sample.observe()
        if not exists:
            return ObservedState(
                bridge=bridge,
                bridge_exists=False,
                elsewhere=elsewhere,
                appmon=appmon,
                sample=sample,
            )
        names = {p.name for p in ports if not p.owned and p.type in VM_PORT_TYPES} | set(links)
        names.discard(bridge)
        remotes = tuple(remotes)
        observed_links, devices, foreign, underlay = self.linux.observe(names, remotes)
        link_mtus, paths = self.linux.mtus(observed_links, remotes)
        return ObservedState(
            bridge=bridge,
            bridge_exists=True,
            sflow=sflow,
            ports=ports,
            flows=self.ovs.flows(bridge),
            links=observed_links,
            devices=devices,
            foreign_links=foreign,
            underlay=underlay,
            link_mtus=link_mtus,
            paths=paths,
            elsewhere=elsewhere,
            appmon=appmon,
            sample=sample,
        )

    def apply(self, command: c.Command) -> None:
        self.writes += 1
        if isinstance(command, APPMON_COMMANDS):
            self.appmon.apply(command)
        elif isinstance(command, c.ForgetBridge):
            self.ledger.discard("bridges", command.bridge)
        elif isinstance(command, _LINUX_COMMANDS):
            self.linux.apply(command)
        else:
            if isinstance(command, _BRIDGE_WRITES):
                self.ledger.add("bridges", command.bridge)  # before: a crash orphans nothing
            side = self.sample if isinstance(command, SAMPLE_COMMANDS) else self.ovs
            side.apply(command)
