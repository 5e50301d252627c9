"""The emulated data centre as pure data: servers, VMs, names, addresses and traffic flows.

Nothing here touches the system; ``build.py`` realises a ``Topology`` and ``traffic.py`` drives
its ``flows``. Layout (prefix ``ct``, server ``S``, VM ``V``):

- server S is a network namespace ``ctSh`` running its own ovs-vswitchd (userspace datapath)
  with an integration bridge ``ctbrS`` (VM ports, sFlow, the agents' mirror tunnel ports)
  patched to a tunnel bridge ``ctbtS`` whose only other port is a kernel VXLAN device ``ctvxS``
  (UDP 8472): packets from other VMs enter through the tunnel bridge, which has no sFlow, so a
  server samples only what its own VMs send, as the model assumes (the source samples);
- the server's uplink follows OVS's "br-phy" pattern for the userspace datapath: a bridge
  ``ctbpS`` holds the server end ``ctSul`` of the underlay veth, and its internal port ``ctbpS``
  holds the tunnel IP 172.29.77.S. Encapsulated packets therefore enter OVS, which terminates
  its own VXLAN ports (the agents' receivers, UDP 4789) natively; everything else (the data
  VXLAN, sFlow datagrams) goes up to the kernel through the internal port;
- the underlay is a Linux bridge ``ctbr0`` in the root namespace joined by each server's veth
  root end ``ctuS``; the bridge holds 172.29.77.254, where the sFlow collector listens;
- VM V of server S is a namespace ``ctSvV`` whose ``eth0`` (10.77.S.V/16) is a veth to the
  server's port ``ctSvV``; all VMs share one layer-2 segment across the VXLAN.

The testbed configuration (JSON or YAML) is strict: unknown keys, wrong types and unknown VMs
raise one ``TestbedError`` naming the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cosample.experiments.testbed.errors import TestbedError

UNDERLAY_NET = "172.29.77"
UNDERLAY_PREFIXLEN = 24
COLLECTOR_HOST = 254
VM_NET = "10.77"
VM_PREFIXLEN = 16
VM_MTU = 1400
VXLAN_VNI = 7700
VXLAN_PORT = 8472  # the data plane's; 4789 is left to the agents' mirror tunnels
MAX_SERVERS = 200
MAX_VMS = 200
MAX_IFNAME = 15
CONFIG_KEYS = {"servers", "flows", "packet_bytes"}
SERVER_KEYS = {"capacity_pps", "vms"}
FLOW_KEYS = {"src", "dst", "pps"}


@dataclass(frozen=True)
class Vm:
    """A VM: a namespace with one interface, plugged into its server's integration bridge."""

    server: int
    index: int
    prefix: str

    @property
    def name(self) -> str:
        """Name used in configs and reports, e.g. ``s1v2``."""
        return f"s{self.server}v{self.index}"

    @property
    def namespace(self) -> str:
        return f"{self.prefix}{self.server}v{self.index}"

    @property
    def port(self) -> str:
        """The server-side end of the VM's veth (an OVS port on the integration bridge)."""
        return self.namespace

    @property
    def ip(self) -> str:
        return f"{VM_NET}.{self.server}.{self.index}"

    @property
    def mac(self) -> str:
        return f"02:77:00:00:{self.server:02x}:{self.index:02x}"


@dataclass(frozen=True)
class Server:
    """An emulated host: a namespace with its own OVS, bridges, VMs and an underlay address."""

    index: int
    capacity_pps: float
    vms: tuple[Vm, ...]
    prefix: str

    @property
    def name(self) -> str:
        return f"s{self.index}"

    @property
    def namespace(self) -> str:
        return f"{self.prefix}{self.index}h"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br{self.index}"

    @property
    def phy_bridge(self) -> str:
        """The uplink bridge; its internal port of the same name holds ``tunnel_ip``."""
        return f"{self.prefix}bp{self.index}"

    @property
    def tunnel_bridge(self) -> str:
        return f"{self.prefix}bt{self.index}"

    @property
    def patch_int(self) -> str:
        """Patch port on the integration bridge (peer: ``patch_tun``)."""
        return f"{self.prefix}pi{self.index}"

    @property
    def patch_tun(self) -> str:
        return f"{self.prefix}pt{self.index}"

    @property
    def vxlan(self) -> str:
        return f"{self.prefix}vx{self.index}"

    @property
    def underlay_root(self) -> str:
        """Root-namespace end of the server's underlay veth (enslaved to the underlay bridge)."""
        return f"{self.prefix}u{self.index}"

    @property
    def underlay_port(self) -> str:
        """Server-namespace end of the underlay veth, a port of ``phy_bridge``."""
        return f"{self.prefix}{self.index}ul"

    @property
    def tunnel_ip(self) -> str:
        return f"{UNDERLAY_NET}.{self.index}"


@dataclass(frozen=True)
class Flow:
    """A constant-rate UDP flow from one VM to another."""

    src: Vm
    dst: Vm
    pps: float


@dataclass(frozen=True)
class Topology:
    """Servers, VMs and flows of one emulated data centre."""

    prefix: str
    servers: tuple[Server, ...]
    flows: tuple[Flow, ...]
    packet_bytes: int = 100

    @property
    def underlay_bridge(self) -> str:
        return f"{self.prefix}br0"

    @property
    def collector_ip(self) -> str:
        return f"{UNDERLAY_NET}.{COLLECTOR_HOST}"

    @property
    def vms(self) -> tuple[Vm, ...]:
        return tuple(vm for server in self.servers for vm in server.vms)

    def vm(self, name: str) -> Vm:
        for vm in self.vms:
            if vm.name == name:
                return vm
        raise TestbedError(f"unknown VM {name!r} (known: {', '.join(v.name for v in self.vms)})")

    def server_of_ip(self) -> dict[str, str]:
        """VM address -> server name, to attribute sampled packets to their source server."""
        return {vm.ip: f"s{vm.server}" for vm in self.vms}

    def traffic_matrix(self) -> dict[str, dict[str, float]]:
        """Offered pps from server to server, summed over flows (the planner's ``traffic_pps``)."""
        matrix: dict[str, dict[str, float]] = {}
        for flow in self.flows:
            row = matrix.setdefault(f"s{flow.src.server}", {})
            key = f"s{flow.dst.server}"
            row[key] = row.get(key, 0.0) + flow.pps
        return matrix

    def interface_names(self) -> list[str]:
        """Every interface name the testbed creates (all must fit in 15 characters)."""
        names = [self.underlay_bridge]
        for server in self.servers:
            names += [server.bridge, server.phy_bridge, server.tunnel_bridge, server.patch_int, server.patch_tun,
                      server.vxlan, server.underlay_root, server.underlay_port, server.namespace]
            names += [vm.port for vm in server.vms]
        return names


def from_config(config: Any, prefix: str = "ct", where: str = "testbed config") -> Topology:
    """Validate a parsed configuration (see docs/testbed.md) and build the topology."""
    if not isinstance(prefix, str) or not prefix.isalnum() or not prefix[0].isalpha():
        raise TestbedError(f"prefix: expected letters and digits starting with a letter, got {prefix!r}")
    doc = _mapping(config, where)
    _no_unknown(doc, CONFIG_KEYS, where)
    servers_doc = doc.get("servers")
    if not isinstance(servers_doc, list) or not 1 <= len(servers_doc) <= MAX_SERVERS:
        raise TestbedError(f"{where}: servers: expected a list of 1..{MAX_SERVERS} servers")
    servers = []
    for position, entry in enumerate(servers_doc):
        at = f"{where}: servers[{position}]"
        entry = _mapping(entry, at)
        _no_unknown(entry, SERVER_KEYS, at)
        capacity = _number(entry.get("capacity_pps"), f"{at}.capacity_pps", minimum=0.0)
        count = entry.get("vms", 2)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_VMS:
            raise TestbedError(f"{at}.vms: expected an integer 1..{MAX_VMS}, got {count!r}")
        index = position + 1
        vms = tuple(Vm(index, v + 1, prefix) for v in range(count))
        servers.append(Server(index, capacity, vms, prefix))
    packet_bytes = doc.get("packet_bytes", 100)
    if isinstance(packet_bytes, bool) or not isinstance(packet_bytes, int) \
            or not 64 <= packet_bytes <= VM_MTU - 28:
        raise TestbedError(f"{where}: packet_bytes: expected an integer 64..{VM_MTU - 28}, "
                           f"got {packet_bytes!r}")
    topology = Topology(prefix, tuple(servers), (), packet_bytes)
    flows_doc = doc.get("flows", [])
    if not isinstance(flows_doc, list):
        raise TestbedError(f"{where}: flows: expected a list")
    flows = []
    for position, entry in enumerate(flows_doc):
        at = f"{where}: flows[{position}]"
        entry = _mapping(entry, at)
        _no_unknown(entry, FLOW_KEYS, at)
        try:
            src, dst = topology.vm(str(entry.get("src"))), topology.vm(str(entry.get("dst")))
        except TestbedError as exc:
            raise TestbedError(f"{at}: {exc}") from None
        if src == dst:
            raise TestbedError(f"{at}: src and dst are the same VM {src.name!r}")
        flows.append(Flow(src, dst, _number(entry.get("pps"), f"{at}.pps", minimum=1.0)))
    topology = Topology(prefix, tuple(servers), tuple(flows), packet_bytes)
    too_long = [name for name in topology.interface_names() if len(name) > MAX_IFNAME]
    if too_long:
        raise TestbedError(f"prefix {prefix!r}: name {too_long[0]!r} exceeds {MAX_IFNAME} characters")
    return topology


def read_config(path: str | Path) -> Any:
    """The parsed JSON or YAML document of a testbed configuration file (not yet validated)."""
    path = Path(path)
    try:
        text = path.read_text()
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except OSError as exc:
        raise TestbedError(f"{path}: cannot read testbed config: {exc.strerror}") from exc
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise TestbedError(f"{path}: not valid JSON/YAML: {exc}") from exc


def load_config(path: str | Path, prefix: str = "ct") -> Topology:
    """Read and validate a JSON or YAML testbed configuration."""
    return from_config(read_config(path), prefix, where=str(path))


def skewed_config(servers: int = 3, vms: int = 2, top_pps: float = 2400.0, skew: float = 0.25,
                  capacity_pps: float = 3000.0, remote_share: float = 0.25,
                  packet_bytes: int = 100) -> dict[str, Any]:
    """A configuration with skewed load: server k offers ``top_pps * skew**(k-1)``.

    Each server sends ``1 - remote_share`` of its traffic between its own VMs and the rest to a
    VM on the next server (round robin), so the busiest server must mirror to sample much.
    Flows under 1 pps are left out.
    """
    if servers < 1 or vms < 2:
        raise TestbedError("skewed config needs at least 1 server and 2 VMs per server")
    flows = []
    for k in range(1, servers + 1):
        offered = top_pps * skew ** (k - 1)
        local = offered * (1 - remote_share) if servers > 1 else offered
        flows.append({"src": f"s{k}v1", "dst": f"s{k}v2", "pps": round(local, 1)})
        if servers > 1 and remote_share > 0:
            nxt = k % servers + 1
            flows.append({"src": f"s{k}v2", "dst": f"s{nxt}v1",
                          "pps": round(offered - local, 1)})
    return {"servers": [{"capacity_pps": capacity_pps, "vms": vms} for _ in range(servers)],
            "flows": [flow for flow in flows if flow["pps"] >= 1], "packet_bytes": packet_bytes}


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TestbedError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _no_unknown(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise TestbedError(f"{where}: unknown field {unknown[0]!r} "
                           f"(allowed: {', '.join(sorted(allowed))})")


def _number(value: Any, where: str, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TestbedError(f"{where}: expected a finite number, got {value!r}")
    if value < minimum:
        raise TestbedError(f"{where}: must be >= {minimum:g}, got {value!r}")
    return float(value)
