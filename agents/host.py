"""The real host: OVSDB/OpenFlow (``ovsdb.OvsdbSide``) plus Linux ``ip``/``tc`` (``linuxnet.LinuxSide``).

It has the two methods every host has (``fakehost.FakeHost`` is the in-memory twin): ``observe``
returns an ``ObservedState`` and ``apply`` performs one ``Command``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cosample.agents import commands as c
from cosample.agents.config import AgentConfig
from cosample.agents.linuxnet import LinuxSide
from cosample.agents.ovsdb import OvsdbSide
from cosample.agents.reconcile import VM_PORT_TYPES
from cosample.agents.state import ObservedState

_LINUX_COMMANDS = (c.AddMirrorDevice, c.RemoveMirrorDevice, c.AddClsact, c.RemoveClsact,
                   c.SetMirrorFilter, c.RemoveMirrorFilter)
CLSACT_LEDGER = "clsact-owned.json"


class LinuxOvsHost:
    """This machine's OVS (at ``config.ovsdb``) and Linux network stack."""

    def __init__(self, config: AgentConfig) -> None:
        self.ovs = OvsdbSide(config.ovsdb, config.rundir, config.timeout_s)
        self.linux = LinuxSide(config.mirror_device_prefix,
                               Path(config.state_dir) / CLSACT_LEDGER, config.timeout_s)
        self.writes = 0

    def observe(self, bridge: str, links: Iterable[str] = ()) -> ObservedState:
        exists, sflow, ports = self.ovs.observe(bridge)
        if not exists:
            return ObservedState(bridge=bridge, bridge_exists=False)
        names = {p.name for p in ports if not p.owned and p.type in VM_PORT_TYPES} | set(links)
        names.discard(bridge)
        return ObservedState(bridge=bridge, bridge_exists=True, sflow=sflow, ports=ports,
                             flows=self.ovs.flows(bridge), links=self.linux.links(names),
                             devices=self.linux.devices())

    def apply(self, command: c.Command) -> None:
        self.writes += 1
        if isinstance(command, _LINUX_COMMANDS):
            self.linux.apply(command)
        else:
            self.ovs.apply(command)
