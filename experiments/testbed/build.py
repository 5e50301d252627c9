"""Realise a ``Topology`` on this machine and remove it again, from any process.

Every object is written to a ledger (a JSON state file, replaced atomically) *before* it is
created, so ``down`` — in the same process after a failure, or later from another one — removes
exactly what the testbed created, tolerating what is already gone, and nothing else:
processes left in the testbed's own namespaces, each server's private OVS (ovsdb-server and an
ovs-vswitchd started inside the server's namespace), the namespaces, the root-namespace links,
and the state directory's files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosample.dataplane.run import CommandError, run
from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.topology import (
    UNDERLAY_PREFIXLEN,
    VM_MTU,
    VM_PREFIXLEN,
    VXLAN_PORT,
    VXLAN_VNI,
    Server,
    Topology,
    from_config,
)
from cosample.files import write_text_atomic
from cosample.lab import names
from cosample.lab.netns import Lab, disable_tx_offload, netns_available, silence_uplink
from cosample.lab.ovs import OvsInstance, ovs_available

STATE_FILE = "testbed.json"
TAG = "cosample-testbed"


def server_ovs(directory: str | os.PathLike[str], namespace: str) -> OvsInstance:
    """A private OVS whose ovs-vswitchd runs inside the server's network namespace.

    The userspace datapath creates a tap per bridge (and ``ovs-netdev``) in the namespace it
    runs in, so one namespace per server keeps several instances from colliding, and gives each
    server its own routing table for its tunnels and sFlow agent address.
    """
    return OvsInstance(directory, dummy=False, timeout=15.0, namespace=namespace)


@dataclass
class Ledger:
    """What the testbed created, persisted to ``state_dir/testbed.json`` after every change."""

    state_dir: Path
    prefix: str
    config: dict[str, Any]
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    ovs: dict[str, str] = field(default_factory=dict)  # server name -> namespace
    complete: bool = False
    #: the building process's owner mark (``cosample.lab.names.mark``): an incomplete ledger
    #: whose builder no longer runs is a crashed build, which the next ``up`` removes first
    builder: str = ""

    @property
    def path(self) -> Path:
        return self.state_dir / STATE_FILE

    def save(self) -> None:
        document = {
            "prefix": self.prefix,
            "config": self.config,
            "namespaces": self.namespaces,
            "links": self.links,
            "ovs": self.ovs,
            "complete": self.complete,
            "builder": self.builder,
        }
        write_text_atomic(self.path, json.dumps(document, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, state_dir: str | Path) -> "Ledger":
        path = Path(state_dir) / STATE_FILE
        try:
            document = json.loads(path.read_text())
        except FileNotFoundError:
            raise TestbedError(f"no testbed is up: {path} does not exist") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise TestbedError(f"{path}: unreadable testbed state: {exc}") from exc
        try:
            return cls(
                Path(state_dir),
                document["prefix"],
                document["config"],
                list(document["namespaces"]),
                list(document["links"]),
                dict(document["ovs"]),
                bool(document["complete"]),
                str(document.get("builder", "")),
            )
        except (KeyError, TypeError) as exc:
            raise TestbedError(f"{path}: malformed testbed state ({exc})") from exc


@dataclass
class Testbed:
    """A realised topology: its ledger and one private OVS per server."""

    topology: Topology
    ledger: Ledger

    @property
    def state_dir(self) -> Path:
        return self.ledger.state_dir

    def ovs(self, server: Server) -> OvsInstance:
        return server_ovs(self.state_dir / f"ovs-{server.name}", server.namespace)

    @classmethod
    def load(cls, state_dir: str | Path) -> "Testbed":
        ledger = Ledger.load(state_dir)
        if not ledger.complete:
            raise TestbedError(
                f"testbed in {state_dir} is only partly built; run `cosample testbed down`"
            )
        return cls(from_config(ledger.config, ledger.prefix), ledger)


def requirements() -> str | None:
    """None when a testbed can be built here, else why not."""
    for program, package in (("iperf3", "iperf3"), ("bridge", "iproute2"), ("ss", "iproute2")):
        if shutil.which(program) is None:
            return f"{program} not found; install the Debian package {package!r}"
    return netns_available() or ovs_available()


def up(config: dict[str, Any], state_dir: str | Path, prefix: str = "ct") -> Testbed:
    """Build the emulated data centre; on any failure remove what was built and re-raise."""
    reason = requirements()
    if reason:
        raise TestbedError(f"cannot build the testbed here: {reason}")
    topology = from_config(config, prefix)
    state_dir = Path(state_dir)
    if (state_dir / STATE_FILE).exists():
        _remove_crashed_build(state_dir)
    if (state_dir / STATE_FILE).exists():
        raise TestbedError(
            f"a testbed is already up ({state_dir / STATE_FILE}); "
            f"run `cosample testbed down --state-dir {state_dir}` first"
        )
    clashes = _existing_names(topology)
    if clashes:
        raise TestbedError(
            f"names already in use on this machine: {', '.join(clashes)}; "
            f"choose another --prefix or remove them"
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(state_dir, prefix, config, builder=names.mark())
    ledger.save()
    testbed = Testbed(topology, ledger)
    try:
        _build(testbed)
    except BaseException:
        down(state_dir)
        raise
    ledger.complete = True
    ledger.save()
    return testbed


def _build(testbed: Testbed) -> None:
    topology, ledger = testbed.topology, testbed.ledger
    underlay = topology.underlay_bridge
    _record_link(ledger, underlay)
    run(["ip", "link", "add", underlay, "type", "bridge"])
    run(["ip", "addr", "add", f"{topology.collector_ip}/{UNDERLAY_PREFIXLEN}", "dev", underlay])
    run(["ip", "link", "set", underlay, "up"])
    for server in topology.servers:
        _build_server(testbed, server)


def _build_server(testbed: Testbed, server: Server) -> None:
    topology, ledger = testbed.topology, testbed.ledger
    ns = server.namespace
    _namespace(ledger, ns)
    _record_link(ledger, server.underlay_root)
    run(
        [
            "ip",
            "link",
            "add",
            server.underlay_root,
            "type",
            "veth",
            "peer",
            "name",
            server.underlay_port,
            "netns",
            ns,
        ]
    )
    run(["ip", "link", "set", server.underlay_root, "master", topology.underlay_bridge, "up"])
    run(["ip", "-n", ns, "link", "set", server.underlay_port, "up"])
    silence_uplink(server.underlay_port, ns)  # only the phy bridge answers ARP for tunnel_ip

    ledger.ovs[server.name] = ns
    ledger.save()
    ovs = testbed.ovs(server)
    ovs.start()
    tag = f"external_ids:{TAG}={topology.prefix}"
    ovs.vsctl(
        *_bridge_args(server.phy_bridge, tag),
        "--",
        "add-port",
        server.phy_bridge,
        server.underlay_port,
        *_bridge_args(server.bridge, tag),
        *_bridge_args(server.tunnel_bridge, tag),
        "--",
        "add-port",
        server.bridge,
        server.patch_int,
        "--",
        "set",
        "interface",
        server.patch_int,
        "type=patch",
        f"options:peer={server.patch_tun}",
        "--",
        "add-port",
        server.tunnel_bridge,
        server.patch_tun,
        "--",
        "set",
        "interface",
        server.patch_tun,
        "type=patch",
        f"options:peer={server.patch_int}",
    )
    # The uplink's internal port is a tap made by ovs-vswitchd; kernel-made checksums must be
    # complete before OVS forwards them (docs/ovs-facts.md), hence tx offload off.
    _wait_for_link(ns, server.phy_bridge)
    disable_tx_offload(server.phy_bridge, ns)
    run(
        [
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            f"{server.tunnel_ip}/{UNDERLAY_PREFIXLEN}",
            "dev",
            server.phy_bridge,
        ]
    )
    run(["ip", "-n", ns, "link", "set", server.phy_bridge, "up"])

    run(
        [
            "ip",
            "-n",
            ns,
            "link",
            "add",
            server.vxlan,
            "type",
            "vxlan",
            "id",
            str(VXLAN_VNI),
            "dstport",
            str(VXLAN_PORT),
            "local",
            server.tunnel_ip,
        ]
    )
    for peer in topology.servers:
        if peer.index != server.index:  # head-end replication: a flooded frame goes to each peer
            run(
                [
                    "bridge",
                    "-n",
                    ns,
                    "fdb",
                    "append",
                    "00:00:00:00:00:00",
                    "dev",
                    server.vxlan,
                    "dst",
                    peer.tunnel_ip,
                ]
            )
    run(["ip", "-n", ns, "link", "set", server.vxlan, "up"])
    disable_tx_offload(server.vxlan, ns)
    ovs.vsctl("add-port", server.tunnel_bridge, server.vxlan)

    for vm in server.vms:
        _namespace(ledger, vm.namespace)
        run(
            [
                "ip",
                "netns",
                "exec",
                vm.namespace,
                "sysctl",
                "-q",
                "-w",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]
        )  # no IPv6 chatter in the samples
        run(
            [
                "ip",
                "-n",
                ns,
                "link",
                "add",
                vm.port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                vm.namespace,
            ]
        )
        run(
            [
                "ip",
                "-n",
                vm.namespace,
                "link",
                "set",
                "eth0",
                "address",
                vm.mac,
                "mtu",
                str(VM_MTU),
                "up",
            ]
        )
        run(["ip", "-n", vm.namespace, "addr", "add", f"{vm.ip}/{VM_PREFIXLEN}", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", vm.port, "up"])
        disable_tx_offload(vm.port, ns)
        disable_tx_offload("eth0", vm.namespace)
        ovs.vsctl("add-port", server.bridge, vm.port, "--", "set", "port", vm.port, tag)


def _bridge_args(bridge: str, tag: str) -> list[str]:
    return ["--", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev", tag]


def _wait_for_link(namespace: str, name: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while run(["ip", "-n", namespace, "link", "show", name], check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise TestbedError(f"{name} did not appear in {namespace} within {timeout_s:g} s")
        time.sleep(0.05)


def down(state_dir: str | Path) -> list[str]:
    """Remove everything the ledger in ``state_dir`` records; returns the problems met."""
    state_dir = Path(state_dir)
    ledger = Ledger.load(state_dir)
    problems: list[str] = []
    for server_name, namespace in ledger.ovs.items():
        try:
            server_ovs(state_dir / f"ovs-{server_name}", namespace).stop()
        except (CommandError, OSError) as exc:
            problems.append(f"OVS of {server_name}: {exc}")
    for namespace in ledger.namespaces:
        problems += _kill_namespace_processes(namespace)
    problems += Lab(ledger.prefix, list(ledger.namespaces), list(ledger.links)).teardown()
    if not problems:
        for server_name in ledger.ovs:
            shutil.rmtree(state_dir / f"ovs-{server_name}", ignore_errors=True)
        for extra in state_dir.glob("agent-*"):
            shutil.rmtree(extra, ignore_errors=True)
        ledger.path.unlink(missing_ok=True)
        try:
            state_dir.rmdir()
        except OSError:
            pass  # the user's own files stay
    return problems


def _remove_crashed_build(state_dir: Path) -> None:
    """``down`` a build whose ledger is incomplete and whose builder no longer runs (killed
    while building: it recorded every object before making it); a complete testbed, or one
    still being built, stays."""
    ledger = Ledger.load(state_dir)
    if ledger.complete or not names.abandoned(ledger.builder, f"testbed {state_dir}"):
        return
    problems = down(state_dir)
    if problems:
        raise TestbedError(
            f"removing the crashed build in {state_dir} failed: {'; '.join(problems)}"
        )


def _namespace(ledger: Ledger, name: str) -> None:
    ledger.namespaces.append(name)
    ledger.save()
    run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def _record_link(ledger: Ledger, name: str) -> None:
    ledger.links.append(name)
    ledger.save()


def _existing_names(topology: Topology) -> list[str]:
    """Namespaces or root links the topology would create that exist already."""
    namespaces = set(run(["ip", "netns", "list"]).stdout.split())
    wanted_ns = [s.namespace for s in topology.servers] + [vm.namespace for vm in topology.vms]
    clashes = [name for name in wanted_ns if name in namespaces]
    for link in [topology.underlay_bridge] + [s.underlay_root for s in topology.servers]:
        if run(["ip", "link", "show", link], check=False).returncode == 0:
            clashes.append(link)
    return clashes


def _kill_namespace_processes(namespace: str) -> list[str]:
    """Stop processes still inside one of our namespaces (iperf3 left by an interrupted run)."""
    result = run(["ip", "netns", "pids", namespace], check=False)
    if result.returncode != 0:
        return []
    pids = [int(pid) for pid in result.stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return []


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True
