"""Where calibration traffic flows: the endpoints the harness pushes traffic through and counts.

``Endpoints`` is pure data; ``existing_endpoints`` describes a real server's OVS and VMs from the
command line, and ``SystemOvs`` drives that OVS; nothing here builds anything. The one-host rig
that builds endpoints of its own for ``cosample calibrate --testbed`` is
``cosample.costmodel.onehost.OneHostTestbed``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from cosample.costmodel.errors import HarnessError
from cosample.dataplane.run import run


@dataclass(frozen=True)
class Endpoints:
    """Everything the harness needs to push traffic and count it; no effects of its own."""

    bridge: str
    sender_port: str  # OVS port of the sender (host end of its link)
    receiver_port: str  # OVS port of the receiver
    receiver_ip: str
    mirror_target: str  # device mirrored copies leave by
    sender_exec: tuple[str, ...] = ()  # argv prefix that runs a command on the sender
    receiver_exec: tuple[str, ...] = ()  # ... on the receiver
    tunnel_target: str | None = None  # a VXLAN device for mirror_vxlan, if any


class SystemOvs:
    """``ovs-vsctl``/``ovs-ofctl`` against an existing OVS (default sockets or ``--db``)."""

    def __init__(self, remote: str | None = None, timeout: float = 10.0) -> None:
        self.remote = remote
        self.timeout = timeout

    def vsctl(self, *args: str) -> str:
        db = [f"--db={self.remote}"] if self.remote else []
        return run(
            ["ovs-vsctl", *db, f"--timeout={int(self.timeout)}", *args], timeout=self.timeout + 2
        ).stdout

    def ofctl(self, command: str, bridge: str, *args: str) -> str:
        """``ovs-ofctl COMMAND BRIDGE ...``; with a ``unix:`` OVSDB remote, the bridge's
        management socket beside it is used (that is where ovs-vswitchd puts it)."""
        target = bridge
        if self.remote and self.remote.startswith("unix:"):
            socket = Path(self.remote[len("unix:") :]).parent / f"{bridge}.mgmt"
            if socket.exists():
                target = f"unix:{socket}"
        return run(["ovs-ofctl", command, target, *args], timeout=self.timeout).stdout


def existing_endpoints(
    bridge: str,
    sender_port: str,
    receiver_port: str,
    receiver_ip: str,
    mirror_target: str,
    sender_exec: str = "",
    receiver_exec: str = "",
    tunnel_target: str | None = None,
) -> Endpoints:
    """Endpoints on a real server, from command-line strings (exec prefixes split like a shell
    would, but never run through one: e.g. ``"ssh root@vm1"`` or ``"ip netns exec vm1"``)."""

    def split(text: str | None) -> tuple[str, ...]:
        return tuple(shlex.split(text)) if text else ()

    for name, value in (
        ("bridge", bridge),
        ("sender port", sender_port),
        ("receiver port", receiver_port),
        ("receiver IP", receiver_ip),
        ("mirror target", mirror_target),
    ):
        if not value:
            raise HarnessError(f"existing endpoints: {name} is required")
    return Endpoints(
        bridge=bridge,
        sender_port=sender_port,
        receiver_port=receiver_port,
        receiver_ip=receiver_ip,
        mirror_target=mirror_target,
        sender_exec=split(sender_exec),
        receiver_exec=split(receiver_exec),
        tunnel_target=tunnel_target or None,
    )
