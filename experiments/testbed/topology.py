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

The testbed configuration (JSON or YAML, docs/testbed.md) is declared once as the pydantic models
``Config``, ``ServerConfig`` and ``FlowConfig`` and validated through ``cosample.validation``:
unknown keys, wrong types, bounds, unknown VMs and names too long for an interface each raise one
``TestbedError`` naming the file, the field path and the bad value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from cosample.experiments.testbed.errors import TestbedError
from cosample.validation import InterfaceName, Strict, problem, read_document, validate

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
MAX_IFNAME = 15  # what ``cosample.validation.InterfaceName`` allows
MIN_PACKET_BYTES = 64
MAX_PACKET_BYTES = VM_MTU - 28  # UDP payload that fits the VM MTU with IPv4 and UDP headers


def _prefix(text: str) -> str:
    if not (text.isascii() and text.isalnum() and text[:1].isalpha()):
        raise ValueError("expected letters and digits starting with a letter")
    return text


#: Letters and digits starting with a letter: the start of every name the testbed creates.
Prefix = Annotated[str, AfterValidator(_prefix)]


_INTERFACE_NAMES = TypeAdapter(list[InterfaceName])


class Naming(Strict):
    """What the testbed's names start with (``--prefix``), so several testbeds can coexist."""

    prefix: Prefix


class ServerConfig(Strict):
    """An emulated server: its capacity for the planner and how many VMs it hosts."""

    capacity_pps: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    vms: Annotated[int, Field(ge=1, le=MAX_VMS)] = 2


class FlowConfig(Strict):
    """A constant-rate UDP flow between two VMs named ``sSvV``."""

    src: str
    dst: str
    pps: Annotated[float, Field(ge=1, allow_inf_nan=False)]


class Config(Strict):
    """A testbed configuration file (docs/testbed.md)."""

    servers: Annotated[list[ServerConfig], Field(min_length=1, max_length=MAX_SERVERS)]
    flows: list[FlowConfig] = []
    packet_bytes: Annotated[int, Field(ge=MIN_PACKET_BYTES, le=MAX_PACKET_BYTES)] = 100


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
            names += [
                server.bridge,
                server.phy_bridge,
                server.tunnel_bridge,
                server.patch_int,
                server.patch_tun,
                server.vxlan,
                server.underlay_root,
                server.underlay_port,
                server.namespace,
            ]
            names += [vm.port for vm in server.vms]
        return names


def from_config(config: Any, prefix: str = "ct", where: str = "testbed config") -> Topology:
    """Validate a parsed configuration (see docs/testbed.md) and build the topology."""
    validate(Naming, {"prefix": prefix}, error=TestbedError)
    checked = validate(Config, config, where=where, error=TestbedError)
    servers = tuple(
        Server(
            index,
            entry.capacity_pps,
            tuple(Vm(index, v + 1, prefix) for v in range(entry.vms)),
            prefix,
        )
        for index, entry in enumerate(checked.servers, start=1)
    )
    vms = {vm.name: vm for server in servers for vm in server.vms}
    flows = []
    for position, entry in enumerate(checked.flows):
        for end in ("src", "dst"):
            if getattr(entry, end) not in vms:
                raise problem(
                    ("flows", position, end),
                    f"unknown VM (known: {', '.join(vms)})",
                    getattr(entry, end),
                    where=where,
                    error=TestbedError,
                )
        if entry.src == entry.dst:
            raise problem(
                ("flows", position, "dst"),
                "the same VM as src",
                entry.dst,
                where=where,
                error=TestbedError,
            )
        flows.append(Flow(vms[entry.src], vms[entry.dst], entry.pps))
    topology = Topology(prefix, servers, tuple(flows), checked.packet_bytes)
    names = topology.interface_names()
    try:
        _INTERFACE_NAMES.validate_python(names)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        name, what = names[first["loc"][0]], first["msg"]
        raise problem(
            ("prefix",),
            f"makes the interface name {name!r} invalid: {what[:1].lower()}{what[1:]}",
            prefix,
            error=TestbedError,
        ) from None
    return topology


def read_config(path: str | Path) -> Any:
    """The parsed JSON or YAML document of a testbed configuration file (not yet validated)."""
    return read_document(path, "testbed config", error=TestbedError)


def load_config(path: str | Path, prefix: str = "ct") -> Topology:
    """Read and validate a JSON or YAML testbed configuration."""
    return from_config(read_config(path), prefix, where=str(path))


def skewed_config(
    servers: int = 3,
    vms: int = 2,
    top_pps: float = 2400.0,
    skew: float = 0.25,
    capacity_pps: float = 3000.0,
    remote_share: float = 0.25,
    packet_bytes: int = 100,
) -> dict[str, Any]:
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
            flows.append({"src": f"s{k}v2", "dst": f"s{nxt}v1", "pps": round(offered - local, 1)})
    return {
        "servers": [{"capacity_pps": capacity_pps, "vms": vms} for _ in range(servers)],
        "flows": [flow for flow in flows if flow["pps"] >= 1],
        "packet_bytes": packet_bytes,
    }
