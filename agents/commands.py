"""The changes an agent can make, as immutable values (ovsdbapp style: commands are data).

``reconcile`` returns a list of these; a host (real or fake) applies them one by one. Every
command is idempotent on its own (``--may-exist``/``--if-exists``, ``tc filter replace``), so a
run killed between two commands converges on the next run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from cosample.agents.state import SflowSettings


@dataclass(frozen=True)
class Command(ABC):
    """Base of all commands; ``describe`` is the one-line form ``--dry-run`` prints."""

    @abstractmethod
    def describe(self) -> str:
        """One line saying what the command changes."""


# OVSDB: sFlow --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SetSflow(Command):
    """Create the bridge's (owned) sFlow row, or update the owned row ``uuid`` in place."""

    bridge: str
    settings: SflowSettings
    uuid: str | None = None

    def describe(self) -> str:
        verb = "update" if self.uuid else "create"
        return (
            f"{verb} sFlow on {self.bridge}: 1-in-{self.settings.sampling} to "
            f"{self.settings.target}"
        )


@dataclass(frozen=True)
class RemoveSflow(Command):
    """Detach and delete the bridge's owned sFlow row ``uuid``."""

    bridge: str
    uuid: str

    def describe(self) -> str:
        return f"remove sFlow from {self.bridge}"


@dataclass(frozen=True)
class ForgetBridge(Command):
    """Strike ``bridge`` from the ledger: the agent owns nothing there any more."""

    bridge: str

    def describe(self) -> str:
        return f"forget bridge {self.bridge} (nothing owned there)"


# OVSDB + OpenFlow: receiver tunnels ----------------------------------------------------------
@dataclass(frozen=True)
class AddTunnelPort(Command):
    bridge: str
    name: str
    peer: str
    options: tuple[tuple[str, str], ...]
    ofport: int

    def describe(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"add VXLAN port {self.name} (from {self.peer}, ofport {self.ofport}, {opts})"


@dataclass(frozen=True)
class RemoveTunnelPort(Command):
    bridge: str
    name: str

    def describe(self) -> str:
        return f"remove port {self.name} from {self.bridge}"


@dataclass(frozen=True)
class AddDropFlow(Command):
    """``cookie=C,priority=P,in_port=N,actions=drop``: mirrored packets stop after sFlow saw them."""

    bridge: str
    cookie: int
    in_port: int
    priority: int

    def describe(self) -> str:
        return f"add flow cookie={self.cookie:#x} in_port={self.in_port} actions=drop"


@dataclass(frozen=True)
class RemoveDropFlow(Command):
    bridge: str
    cookie: int

    def describe(self) -> str:
        return f"remove flows with cookie={self.cookie:#x} from {self.bridge}"


# Linux: mirror devices and tc filters -------------------------------------------------------
@dataclass(frozen=True)
class AddMirrorDevice(Command):
    """A VXLAN device toward ``remote_ip`` (created if missing, then tagged and brought up)."""

    name: str
    peer: str
    remote_ip: str
    vni: int
    local_ip: str | None
    dstport: int
    replace: bool = False  # delete an existing device of that name first (its settings differ)

    def describe(self) -> str:
        verb = "re-create" if self.replace else "add"
        return f"{verb} VXLAN device {self.name} to {self.peer} ({self.remote_ip}, vni {self.vni})"


@dataclass(frozen=True)
class RemoveMirrorDevice(Command):
    name: str

    def describe(self) -> str:
        return f"remove VXLAN device {self.name}"


@dataclass(frozen=True)
class AddClsact(Command):
    device: str

    def describe(self) -> str:
        return f"add clsact qdisc to {self.device}"


@dataclass(frozen=True)
class RemoveClsact(Command):
    """Remove a clsact qdisc the agent added once nothing but the agent used it."""

    device: str

    def describe(self) -> str:
        return f"remove clsact qdisc from {self.device}"


@dataclass(frozen=True)
class SetMirrorFilter(Command):
    """``tc filter replace`` on ``device`` ingress at ``prio``: mirror with ``probability`` to ``target``."""

    device: str
    prio: int
    probability: float
    target: str

    def describe(self) -> str:
        return (
            f"set filter {self.device} ingress prio {self.prio}: mirror "
            f"p={self.probability:.6f} to {self.target}"
        )


@dataclass(frozen=True)
class RemoveMirrorFilter(Command):
    device: str
    prio: int

    def describe(self) -> str:
        return f"remove filter {self.device} ingress prio {self.prio}"
