"""Where calibration traffic flows: a one-host testbed we build, or endpoints that already exist.

``OneHostTestbed`` builds, on this host, a private OVS (userspace datapath) with bridge
``<prefix>br0``, and network namespaces standing in for two VMs and a collector:

    <prefix>A (sender, eth0 .1) -- <prefix>va --+-- <prefix>br0 --+-- <prefix>vb -- <prefix>B (receiver, .2)
                                                 \\ tc mirror (not on the bridge)
                                                  `--> <prefix>vc -- <prefix>C (mirror sink)
                                                  `--> <prefix>vx (VXLAN over <prefix>vc to C; with tunnel=True)

veth tx offloads are off (docs/ovs-facts.md: TCP through the userspace datapath needs it). It removes exactly what it created, in reverse,
when the ``with`` block ends — normally, on error or on Ctrl-C. ``ExistingEndpoints`` describes
a real server's OVS and VMs from the command line and creates nothing but the mechanisms.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cosample.costmodel.errors import HarnessError
from cosample.lab.netns import Lab, netns_available
from cosample.lab.ovs import OvsInstance, ovs_available
from cosample.dataplane.run import CommandError, run

SUBNET = "10.99.0"
TUNNEL_VNI, TUNNEL_PORT = 4242, 48000


@dataclass(frozen=True)
class Endpoints:
    """Everything the harness needs to push traffic and count it; no effects of its own."""

    bridge: str
    sender_port: str            # OVS port of the sender (host end of its link)
    receiver_port: str          # OVS port of the receiver
    receiver_ip: str
    mirror_target: str          # device mirrored copies leave by
    sender_exec: tuple[str, ...] = ()     # argv prefix that runs a command on the sender
    receiver_exec: tuple[str, ...] = ()   # ... on the receiver
    tunnel_target: str | None = None      # a VXLAN device for mirror_vxlan, if any


class SystemOvs:
    """``ovs-vsctl``/``ovs-ofctl`` against an existing OVS (default sockets or ``--db``)."""

    def __init__(self, remote: str | None = None, timeout: float = 10.0) -> None:
        self.remote = remote
        self.timeout = timeout

    def vsctl(self, *args: str) -> str:
        db = [f"--db={self.remote}"] if self.remote else []
        return run(["ovs-vsctl", *db, f"--timeout={int(self.timeout)}", *args],
                   timeout=self.timeout + 2).stdout

    def ofctl(self, command: str, bridge: str, *args: str) -> str:
        """``ovs-ofctl COMMAND BRIDGE ...``; with a ``unix:`` OVSDB remote, the bridge's
        management socket beside it is used (that is where ovs-vswitchd puts it)."""
        target = bridge
        if self.remote and self.remote.startswith("unix:"):
            socket = Path(self.remote[len("unix:"):]).parent / f"{bridge}.mgmt"
            if socket.exists():
                target = f"unix:{socket}"
        return run(["ovs-ofctl", command, target, *args], timeout=self.timeout).stdout


def one_host_testbed_unavailable() -> str | None:
    """None when a one-host testbed can be built here, else why not."""
    reason = ovs_available() or netns_available()
    if reason:
        return reason
    for program in ("iperf3",):
        try:
            run([program, "--version"], timeout=5)
        except CommandError:
            return f"{program} not installed (Debian package {program!r})"
    return None


class OneHostTestbed:
    """Build the sketch above on enter, remove it on exit; ``endpoints`` and ``ovs`` inside."""

    def __init__(self, prefix: str = "cc", directory: str | Path | None = None,
                 tunnel: bool = False) -> None:
        if not prefix.isalnum() or len(prefix) > 10:
            raise HarnessError(f"testbed prefix {prefix!r}: use 1-10 letters or digits "
                               f"(interface names are limited to 15 characters)")
        self.prefix = prefix
        self.tunnel = tunnel
        self.directory = Path(directory) if directory else None
        self._made_directory = False
        self.ovs: OvsInstance | None = None
        self.lab = Lab(prefix)
        self.endpoints: Endpoints | None = None

    def __enter__(self) -> "OneHostTestbed":
        reason = one_host_testbed_unavailable()
        if reason:
            raise HarnessError(f"cannot build the one-host testbed: {reason}")
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _build(self) -> None:
        p, lab = self.prefix, self.lab
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix=f"cosample-{p}-ovs-"))
            self._made_directory = True
        self.ovs = OvsInstance(self.directory, dummy=False).start()
        bridge = f"{p}br0"
        self.ovs.vsctl("--may-exist", "add-br", bridge, "--", "set", "bridge", bridge,
                       "datapath_type=netdev", "external_ids:cosample=costmodel")
        sender, receiver, sink = lab.namespace("A"), lab.namespace("B"), lab.namespace("C")
        links = {}
        for role, letter, namespace, host in (("sender", "a", sender, 1),
                                              ("receiver", "b", receiver, 2), ("sink", "c", sink, 3)):
            links[role] = lab.veth(f"{p}v{letter}", namespace, address=f"{SUBNET}.{host}/24")
        for role in ("sender", "receiver"):
            self.ovs.vsctl("--may-exist", "add-port", bridge, links[role], "--", "set",
                           "interface", links[role], "external_ids:cosample=costmodel")
        tunnel = self._tunnel(links["sink"], sink) if self.tunnel else None
        self.endpoints = Endpoints(
            bridge=bridge, sender_port=links["sender"], receiver_port=links["receiver"],
            receiver_ip=f"{SUBNET}.2", mirror_target=links["sink"], tunnel_target=tunnel,
            sender_exec=("ip", "netns", "exec", sender),
            receiver_exec=("ip", "netns", "exec", receiver))

    def _tunnel(self, underlay: str, sink: str) -> str:
        """A VXLAN device toward the sink, as the agents build toward a receiving server; the
        sink decapsulates. Link-local underlay addresses and an unusual UDP port, both derived
        from the prefix, keep it apart from other tunnels in the root namespace."""
        octet = 20 + zlib.crc32(self.prefix.encode()) % 200
        local, remote = f"169.254.{octet}.1", f"169.254.{octet}.2"
        vni, port = str(TUNNEL_VNI), str(TUNNEL_PORT + octet)
        run(["ip", "addr", "add", f"{local}/30", "dev", underlay])
        run(["ip", "-n", sink, "addr", "add", f"{remote}/30", "dev", "eth0"])
        device = f"{self.prefix}vx"
        run(["ip", "link", "add", device, "type", "vxlan", "id", vni, "local", local,
             "remote", remote, "dstport", port, "dev", underlay])
        self.lab.links.append(device)  # the ledger removes it first
        run(["ip", "link", "set", device, "up"])
        run(["ip", "-n", sink, "link", "add", "vx0", "type", "vxlan", "id", vni, "local", remote,
             "remote", local, "dstport", port, "dev", "eth0"])
        run(["ip", "-n", sink, "link", "set", "vx0", "up"])
        return device

    def close(self) -> list[str]:
        """Remove what was built (bridge and daemons, then links and namespaces)."""
        problems = []
        if self.ovs is not None:
            try:
                self.ovs.stop()
            except CommandError as exc:
                problems.append(f"OVS: {exc}")
            self.ovs = None
        problems += self.lab.teardown()
        if self._made_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)  # OVS database, sockets, logs
            self.directory, self._made_directory = None, False
        return problems


def existing_endpoints(bridge: str, sender_port: str, receiver_port: str, receiver_ip: str,
                       mirror_target: str, sender_exec: str = "",
                       receiver_exec: str = "", tunnel_target: str | None = None) -> Endpoints:
    """Endpoints on a real server, from command-line strings (exec prefixes split like a shell
    would, but never run through one: e.g. ``"ssh root@vm1"`` or ``"ip netns exec vm1"``)."""
    def split(text: str | None) -> tuple[str, ...]:
        return tuple(shlex.split(text)) if text else ()

    for name, value in (("bridge", bridge), ("sender port", sender_port),
                        ("receiver port", receiver_port), ("receiver IP", receiver_ip),
                        ("mirror target", mirror_target)):
        if not value:
            raise HarnessError(f"existing endpoints: {name} is required")
    return Endpoints(bridge=bridge, sender_port=sender_port, receiver_port=receiver_port,
                     receiver_ip=receiver_ip, mirror_target=mirror_target,
                     sender_exec=split(sender_exec), receiver_exec=split(receiver_exec),
                     tunnel_target=tunnel_target or None)


def exec_argv(prefix: Sequence[str], argv: Sequence[str]) -> list[str]:
    """``argv`` run through an endpoint's prefix (none: on this host)."""
    return [*prefix, *argv]
