"""The one-host calibration rig: a private OVS and namespaces that ``cosample calibrate --testbed``
pushes its traffic through, built from the lab's parts (``cosample.lab``); a real server's
endpoints are ``endpoints.existing_endpoints``.

``OneHostTestbed`` builds, on this host, a private OVS (userspace datapath) with bridge
``<prefix>br0``, and network namespaces standing in for two VMs and a collector:

    <prefix>A (sender, eth0 .1) -- <prefix>va --+-- <prefix>br0 --+-- <prefix>vb -- <prefix>B (receiver, .2)
                                                 \\ tc mirror (not on the bridge)
                                                  `--> <prefix>vc -- <prefix>C (mirror sink)
                                                  `--> <prefix>vx (VXLAN over <prefix>vc to C; with tunnel=True)

veth tx offloads are off (docs/ovs-facts.md: TCP through the userspace datapath needs it). It removes exactly what it created, in reverse,
when the ``with`` block ends — normally, on error or on Ctrl-C.

Its OVS runs in the root namespace, where only one userspace ovs-vswitchd fits (each makes a tap
named ``ovs-netdev``), so the rig holds a machine-wide lock (``LOCK``) from before it builds until
it is removed: a second one (another pytest-xdist worker, another run) waits for it. Under the
lock it first removes what a crashed one-host testbed left (``cosample.lab.names.sweep``: owner
marks on its namespaces, links and OVS taps; the crashed run's OVS daemons in their
``cosample-PREFIX-ovs-*`` directory).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path

from cosample.costmodel.endpoints import Endpoints
from cosample.costmodel.errors import HarnessError
from cosample.dataplane.run import CommandError, run
from cosample.lab import names
from cosample.lab.netns import Lab, netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

SUBNET = "10.99.0"
TUNNEL_VNI, TUNNEL_PORT = 4242, 48000
#: Held while a one-host testbed exists on this machine (its OVS needs the root namespace's tap).
LOCK = Path(tempfile.gettempdir()) / "cosample-onehost.lock"
#: How long a second testbed waits for the first (a long calibration takes minutes).
LOCK_WAIT_S = 1800.0


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

    def __init__(
        self, prefix: str = "cc", directory: str | Path | None = None, tunnel: bool = False
    ) -> None:
        if not prefix.isalnum() or len(prefix) > 10:
            raise HarnessError(
                f"testbed prefix {prefix!r}: use 1-10 letters or digits "
                f"(interface names are limited to 15 characters)"
            )
        self.prefix = prefix
        self.tunnel = tunnel
        self.directory = Path(directory) if directory else None
        self._made_directory = False
        self.ovs: OvsInstance | None = None
        self.lab = Lab(prefix)
        self.endpoints: Endpoints | None = None
        self._lock: int | None = None

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

    def _take_lock(self) -> None:
        """Wait (at most ``LOCK_WAIT_S``) until no other one-host testbed exists here."""
        descriptor = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock = descriptor
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(descriptor)
                    raise HarnessError(
                        f"another one-host testbed held {LOCK} for {LOCK_WAIT_S:g} s"
                    ) from None
                time.sleep(0.2)

    def _sweep(self) -> None:
        """Under the lock: stop the OVS daemons of a crashed testbed of this prefix (their
        directory's pidfiles, when the process names that directory), then its marked links and
        namespaces (``Lab.sweep``)."""
        for directory in Path(tempfile.gettempdir()).glob(f"cosample-{self.prefix}-ovs-*"):
            pids = []
            for pidfile in ("ovs-vswitchd.pid", "ovsdb-server.pid"):
                try:
                    pid = int((directory / pidfile).read_text().strip())
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                except (OSError, ValueError):
                    continue
                if str(directory) in argv:
                    pids.append(pid)
            names.stop_processes(pids)
            shutil.rmtree(directory, ignore_errors=True)
        names.sweep("ovs-netdev")
        self.lab.sweep()

    def _build(self) -> None:
        p, lab = self.prefix, self.lab
        self._take_lock()
        self._sweep()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix=f"cosample-{p}-ovs-"))
            self._made_directory = True
        self.ovs = OvsInstance(self.directory, dummy=False).start()
        bridge = f"{p}br0"
        self.ovs.vsctl(
            "--may-exist",
            "add-br",
            bridge,
            "--",
            "set",
            "bridge",
            bridge,
            "datapath_type=netdev",
            "external_ids:cosample=costmodel",
        )
        for tap in (bridge, "ovs-netdev"):  # the datapath's taps in the root namespace
            if run(["ip", "link", "show", tap], check=False).returncode == 0:
                names.mark_link(tap)
                names.hold(tap)
        sender, receiver, sink = lab.namespace("A"), lab.namespace("B"), lab.namespace("C")
        links = {}
        for role, letter, namespace, host in (
            ("sender", "a", sender, 1),
            ("receiver", "b", receiver, 2),
            ("sink", "c", sink, 3),
        ):
            links[role] = lab.veth(f"{p}v{letter}", namespace, address=f"{SUBNET}.{host}/24")
        for role in ("sender", "receiver"):
            self.ovs.vsctl(
                "--may-exist",
                "add-port",
                bridge,
                links[role],
                "--",
                "set",
                "interface",
                links[role],
                "external_ids:cosample=costmodel",
            )
        tunnel = self._tunnel(links["sink"], sink) if self.tunnel else None
        self.endpoints = Endpoints(
            bridge=bridge,
            sender_port=links["sender"],
            receiver_port=links["receiver"],
            receiver_ip=f"{SUBNET}.2",
            mirror_target=links["sink"],
            tunnel_target=tunnel,
            sender_exec=("ip", "netns", "exec", sender),
            receiver_exec=("ip", "netns", "exec", receiver),
        )

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
        run(
            [
                "ip",
                "link",
                "add",
                device,
                "type",
                "vxlan",
                "id",
                vni,
                "local",
                local,
                "remote",
                remote,
                "dstport",
                port,
                "dev",
                underlay,
            ]
        )
        self.lab.links.append(device)  # the ledger removes it first
        names.hold(device)
        names.mark_link(device)
        run(["ip", "link", "set", device, "up"])
        run(
            [
                "ip",
                "-n",
                sink,
                "link",
                "add",
                "vx0",
                "type",
                "vxlan",
                "id",
                vni,
                "local",
                remote,
                "remote",
                local,
                "dstport",
                port,
                "dev",
                "eth0",
            ]
        )
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
        for tap in (f"{self.prefix}br0", "ovs-netdev"):
            names.release(tap)
        if self._made_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)  # OVS database, sockets, logs
            self.directory, self._made_directory = None, False
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None
        return problems
