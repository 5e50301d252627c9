"""Network namespaces and veth links that remember what they created and remove only that.

A ``Lab`` is a ledger: every namespace and host-side link it creates is recorded, and
``teardown`` deletes exactly those, in reverse order, tolerating ones already gone. Use it as a
context manager so errors and Ctrl-C clean up too. Needs root (``ip netns``).

What a run that crashed left behind is removed before the first name is created: each namespace
and root-namespace link carries its creator's owner mark, and ``cosample.lab.names.sweep``
removes those of the lab's prefix whose creator no longer runs. Prefixes unique to the process
come from ``cosample.lab.names.run_prefix``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from cosample.dataplane.run import CommandError, require, run
from cosample.lab import names


def netns_available() -> str | None:
    """None when namespaces can be created here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for program, package in (("ip", "iproute2"), ("ethtool", "ethtool"), ("tc", "iproute2")):
        try:
            require(program, package)
        except CommandError as exc:
            return str(exc)
    return None


def disable_tx_offload(interface: str, namespace: str | None = None) -> None:
    """TCP through the userspace datapath fails with veth tx checksum offload on (docs/ovs-facts.md)."""
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    run([*prefix, "ethtool", "-K", interface, "tx", "off"])


def silence_uplink(interface: str, namespace: str | None = None) -> None:
    """Stop the kernel answering ARP on an interface that is an OVS port of a "br-phy" bridge.

    The userspace datapath reads such a port with a packet socket, but the kernel still sees
    its frames: by default Linux answers an ARP request for any of its addresses on any
    interface, so the tunnel address on the bridge's internal port is also answered with the
    *port's* MAC. The peer then keeps whichever reply came last; with the port's MAC, OVS does
    not recognise the tunnel packets as its own (no ``tnl_pop``) and they are lost. ``arp off``
    leaves the bridge's internal port as the only one answering.
    """
    run(["ip", *(["-n", namespace] if namespace else []), "link", "set", interface, "arp", "off"])


@dataclass
class Lab:
    """Creates namespaces and veth pairs with a common name prefix, and removes them again."""

    prefix: str = "cs"
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    #: what the names of every lab of this kind start with (``run_prefix``'s kind): leftovers of
    #: crashed runs, whose prefixes carry other run tags, are swept under it; default the prefix
    kind: str = ""
    swept: bool = False

    @classmethod
    def unique(cls, kind: str) -> "Lab":
        """A lab whose prefix is unique to this process (``names.run_prefix(kind)``)."""
        return cls(prefix=names.run_prefix(kind), kind=kind)

    def sweep(self) -> list[str]:
        """Remove what a crashed run left under this lab's kind (owner marks prove it); once."""
        if self.swept:
            return []
        self.swept = True
        return names.sweep(self.kind or self.prefix)

    def namespace(self, name: str) -> str:
        """Create namespace ``prefix+name`` with loopback up and our owner mark; returns its
        full name."""
        self.sweep()
        full = f"{self.prefix}{name}"
        run(["ip", "netns", "add", full])
        self.namespaces.append(full)
        names.hold(full)
        names.mark_namespace(full)
        run(["ip", "-n", full, "link", "set", "lo", "up"])
        return full

    def veth(
        self,
        host_end: str,
        namespace: str | None = None,
        peer: str = "eth0",
        address: str | None = None,
        host_namespace: str | None = None,
    ) -> str:
        """A veth pair: ``host_end`` in ``host_namespace`` (default: the root namespace, e.g. for
        a switch), ``peer`` in ``namespace`` (e.g. a VM).

        Both ends come up with tx checksum offload off; ``address`` (CIDR) goes on the peer.
        Returns the host end's name. A link inside a namespace of ours goes with the namespace.
        """
        if len(host_end) > 15:
            raise CommandError(f"interface name {host_end!r} is longer than 15 characters")
        self.sweep()
        host_ns = ["-n", host_namespace] if host_namespace else []
        argv = ["ip", *host_ns, "link", "add", host_end, "type", "veth", "peer", "name", peer]
        if namespace:
            argv += ["netns", namespace]
        run(argv)
        if not host_namespace:
            self.links.append(host_end)
            names.hold(host_end)
            names.mark_link(host_end)
        ns = ["-n", namespace] if namespace else []
        run(["ip", *ns, "link", "set", peer, "up"])
        run(["ip", *host_ns, "link", "set", host_end, "up"])
        disable_tx_offload(host_end, host_namespace)
        disable_tx_offload(peer, namespace)
        if address:
            run(["ip", *ns, "addr", "add", address, "dev", peer])
        return host_end

    def exec_argv(self, namespace: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``namespace``."""
        return ["ip", "netns", "exec", namespace, *argv]

    def teardown(self) -> list[str]:
        """Delete what this lab created; returns the problems met (empty when all went)."""
        problems = []
        for link in reversed(self.links):
            if run(["ip", "link", "show", link], check=False).returncode == 0:
                result = run(["ip", "link", "del", link], check=False)
                if result.returncode != 0:
                    problems.append(f"link {link}: {result.stderr.strip()}")
        for namespace in reversed(self.namespaces):
            result = run(["ip", "netns", "del", namespace], check=False)
            if result.returncode != 0 and "No such file" not in result.stderr:
                problems.append(f"namespace {namespace}: {result.stderr.strip()}")
        for name in self.links + self.namespaces:
            names.release(name)
        self.links.clear()
        self.namespaces.clear()
        return problems

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.teardown()
