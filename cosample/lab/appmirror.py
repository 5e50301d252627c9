"""The web rig with an OVS switch between client and server, and the seeds' mirroring mechanisms.

Four namespaces, under one prefix ``P`` unique to the process (``Lab.unique``)::

    Pc (wrk, 10.77.0.1) --Pvc--+                         +--Pvs-- Ps (nginx + backend, 10.77.0.2)
                               +-- Pbr (userspace OVS) --+
                                     | vxlan port Pvx (VNI 4242)
                               Pbp (br-phy bridge, 10.78.0.1) --Pvu-- Pa eth0 (10.78.0.2)
                                                                      vx0: kernel VXLAN, analyser

All of the switch (ovs-vswitchd, both bridges, the switch ends of the veths) lives in namespace
``Pw``; the VXLAN port is OVS's own tunnel (userspace ``tnl_push``), routed through the br-phy
bridge ``Pbp`` whose internal port holds the underlay address (docs/ovs-facts.md). The bridge
forwards with two explicit flows (client port <-> server port), so nothing is flooded to the
tunnel unless a mechanism asks for it.

The mechanisms, each set up and removed with ``ovs-vsctl``/``ovs-ofctl`` argument lists built by
the pure functions below (test rig only: the agents' own plan-driven mechanisms replace these
once merged):

- ``port``: an OVS ``Mirror`` selecting every packet into and out of the server's port, output
  to the tunnel port; ``snaplen`` truncates each copy;
- ``selective``: OpenFlow flows that, besides forwarding, copy the service's TCP segments with
  PSH set (requests and single-segment responses) to the tunnel port; ``max_len`` truncates;
- ``tc``: the same segments (of a share of the connections, as the agents' filter selects them)
  copied by the kernel at the server's port (``clsact`` on its switch
  end, a classic-BPF classifier compiled from the sniffer's filter, ``mirred`` to a kernel VXLAN
  device ``Pvt``, VNI 4243, over a second underlay veth ``Pvk`` -- ``eth1``; the analysis node
  reads ``vx1``). The copies leave when the kernel receives the response from the server and
  when ovs-vswitchd transmits the request to it, not after the response's wait in
  ovs-vswitchd's receive queue (docs/appmon-mechanisms.md); no truncation (tc has none).

Removes, on exit or error, what it created: processes by PID, OVS by its pidfiles, namespaces
by name. Needs root, OVS and the web rig's programs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cosample.agents.appmon_state import bpf_filter
from cosample.dataplane.run import run
from cosample.dataplane.tcmirror import (
    bytecode_from_ddd,
    clsact_add_argv,
    clsact_delete_argv,
    selective_filter_argv,
)
from cosample.lab.netns import Lab, disable_tx_offload, silence_uplink
from cosample.lab.ovs import OvsInstance, ovs_available
from cosample.lab.web import CLIENT_ADDRESS, SERVER_ADDRESS, WebRig, web_available
from cosample.plan.appmon import SHARE_BITS

UNDERLAY_SWITCH, UNDERLAY_ANALYSIS = "10.78.0.1", "10.78.0.2"
TUNNEL_VNI, VXLAN_PORT = 4242, 4789
UNDERLAY_MTU = 1600
#: The kernel mirror's own underlay and VNI (``tc``): kernel-routed, not through ovs-vswitchd.
KERNEL_SWITCH, KERNEL_ANALYSIS, KERNEL_VNI = "10.79.0.1", "10.79.0.2", 4243
#: tc priority of the kernel mirror's filters on the server's port (both hooks).
TC_PRIO = 40
#: OpenFlow cookie of the selective-mirror flows (their removal matches it exactly).
SELECTIVE_COOKIE = 0xA99D
MIRROR_NAME = "appmon-mirror"


def rig_unavailable() -> str | None:
    """None when the mirroring rig can run here, else why not."""
    return web_available() or ovs_available()


def port_mirror_args(bridge: str, port: str, output: str, snaplen: int | None = None) -> list[str]:
    """``ovs-vsctl`` arguments: mirror every packet in and out of ``port`` to ``output``."""
    return [
        "--",
        "--id=@p",
        "get",
        "Port",
        port,
        "--",
        "--id=@o",
        "get",
        "Port",
        output,
        "--",
        "--id=@m",
        "create",
        "Mirror",
        f"name={MIRROR_NAME}",
        "select_src_port=@p",
        "select_dst_port=@p",
        "output_port=@o",
        *([f"snaplen={snaplen}"] if snaplen else []),
        "external_ids:cosample=appmon",
        "--",
        "add",
        "Bridge",
        bridge,
        "mirrors",
        "@m",
    ]


def port_mirror_removal_args(bridge: str) -> list[str]:
    return [
        "--",
        "--id=@m",
        "get",
        "Mirror",
        MIRROR_NAME,
        "--",
        "remove",
        "Bridge",
        bridge,
        "mirrors",
        "@m",
    ]


def wire_flows(client_ofport: int | str, server_ofport: int | str) -> list[str]:
    """The bridge as a wire between client and server (no flooding toward the tunnel)."""
    return [
        f"priority=10,in_port={client_ofport},actions=output:{server_ofport}",
        f"priority=10,in_port={server_ofport},actions=output:{client_ofport}",
    ]


def selective_flows(
    client_ofport: int,
    server_ofport: int,
    tunnel_ofport: int,
    server_ip: str,
    server_port: int,
    max_len: int | None = None,
    share_bits: int = 0,
    segments: str = "psh",
) -> list[str]:
    """Flows that forward as the wire does and copy the service's PSH segments (``segments``
    "all": every segment) to the tunnel (truncated to ``max_len`` bytes when given); with
    ``share_bits`` = k only of the connections whose client port's bits 1..k are 0, a share
    2**-k of them, both directions of each (bit 0 is skipped: Linux gives connect()'s ephemeral
    ports even numbers first)."""
    copy = (
        f"output(port={tunnel_ofport},max_len={max_len})" if max_len else f"output:{tunnel_ofport}"
    )
    if segments not in ("psh", "all"):
        raise ValueError(f"segments {segments!r}: expected psh or all")
    flags = ",tcp_flags=+psh" if segments == "psh" else ""
    head = f"cookie={SELECTIVE_COOKIE:#x},priority=100,tcp{flags}"
    if share_bits < 0 or share_bits > 15:
        raise ValueError(f"share_bits {share_bits}: expected 0..15")
    mask = ((1 << share_bits) - 1) << 1
    client_in, client_out = (
        (f",tp_src=0/{mask:#x}", f",tp_dst=0/{mask:#x}") if share_bits else ("", "")
    )
    return [
        f"{head},in_port={client_ofport},nw_dst={server_ip},tp_dst={server_port}"
        f"{client_in},actions=output:{server_ofport},{copy}",
        f"{head},in_port={server_ofport},nw_src={server_ip},tp_src={server_port}"
        f"{client_out},actions=output:{client_ofport},{copy}",
    ]


@dataclass(frozen=True)
class LinkCounters:
    packets: int
    bytes: int


class MirrorRig(WebRig):
    """``WebRig`` with the switch, the tunnel and the analysis node; ``set_mechanism`` switches
    between none, ``port`` and ``selective`` mirroring."""

    def __init__(self, directory, seed: int = 1) -> None:
        super().__init__(directory, seed)
        self.lab = Lab.unique("ac")
        self.prefix = self.lab.prefix
        self.ovs: OvsInstance | None = None
        self.mechanism: tuple = ("none",)

    def build_network(self) -> None:
        p = self.prefix
        self.switch, self.analysis = self.lab.namespace("w"), self.lab.namespace("a")
        self.bridge, self.phy = f"{p}br", f"{p}bp"
        self.client_port, self.server_port = f"{p}vc", f"{p}vs"
        self.tunnel_port, self.uplink = f"{p}vx", f"{p}vu"
        self.lab.veth(
            self.client_port,
            self.client,
            address=f"{CLIENT_ADDRESS}/24",
            host_namespace=self.switch,
        )
        self.lab.veth(
            self.server_port,
            self.server,
            address=f"{SERVER_ADDRESS}/24",
            host_namespace=self.switch,
        )
        self.lab.veth(
            self.uplink,
            self.analysis,
            address=f"{UNDERLAY_ANALYSIS}/24",
            host_namespace=self.switch,
        )
        self.link = "eth0"  # the server's interface, where tcpdump and tshark listen
        ns = ["ip", "-n", self.analysis]
        run(
            [
                *ns,
                "link",
                "add",
                "vx0",
                "type",
                "vxlan",
                "id",
                str(TUNNEL_VNI),
                "local",
                UNDERLAY_ANALYSIS,
                "dstport",
                str(VXLAN_PORT),
                "dev",
                "eth0",
            ]
        )
        run([*ns, "link", "set", "vx0", "up"])
        # The underlay carries full frames plus 50 bytes of VXLAN headers: a 1500-byte MTU would
        # drop every mirrored full-size segment (the userspace datapath does not fragment).
        run([*ns, "link", "set", "eth0", "mtu", str(UNDERLAY_MTU)])
        run(["ip", "-n", self.switch, "link", "set", self.uplink, "mtu", str(UNDERLAY_MTU)])
        self.ovs = OvsInstance(self.directory / "ovs", dummy=False, namespace=self.switch).start()
        vsctl = self.ovs.vsctl
        for bridge in (self.bridge, self.phy):
            vsctl(
                "add-br",
                bridge,
                "--",
                "set",
                "Bridge",
                bridge,
                "datapath_type=netdev",
                "external_ids:cosample=appmon",
            )
        vsctl("add-port", self.bridge, self.client_port)
        vsctl("add-port", self.bridge, self.server_port)
        vsctl(
            "add-port",
            self.bridge,
            self.tunnel_port,
            "--",
            "set",
            "Interface",
            self.tunnel_port,
            "type=vxlan",
            f"options:remote_ip={UNDERLAY_ANALYSIS}",
            f"options:key={TUNNEL_VNI}",
        )
        vsctl("add-port", self.phy, self.uplink)
        vsctl("set", "Interface", self.phy, f"mtu_request={UNDERLAY_MTU}")
        silence_uplink(self.uplink, self.switch)
        self.ovs.wait_for_ports(
            self.client_port, self.server_port, self.tunnel_port, self.uplink, self.phy
        )
        run(["ip", "-n", self.switch, "addr", "add", f"{UNDERLAY_SWITCH}/24", "dev", self.phy])
        run(["ip", "-n", self.switch, "link", "set", self.phy, "up"])
        disable_tx_offload(self.phy, self.switch)
        self.ofport = {
            name: int(vsctl("get", "Interface", name, "ofport").strip())
            for name in (self.client_port, self.server_port, self.tunnel_port)
        }
        mac = json.loads(run([*ns, "-j", "link", "show", "eth0"]).stdout)[0]["address"]
        self.ovs.appctl("tnl/arp/set", self.phy, UNDERLAY_ANALYSIS, mac)
        self._ofctl("del-flows", self._management())
        for flow in wire_flows(self.ofport[self.client_port], self.ofport[self.server_port]):
            self._ofctl("add-flow", self._management(), flow)
        # br-phy: the analysis node's MAC is never learned (it only receives), so NORMAL would
        # flood every copy to the switch's own kernel too; wire the uplink to the local port.
        phy = f"unix:{self.ovs.directory / (self.phy + '.mgmt')}"
        uplink = int(vsctl("get", "Interface", self.uplink, "ofport").strip())
        self._ofctl("del-flows", phy)
        for flow in wire_flows(uplink, "LOCAL"):
            self._ofctl("add-flow", phy, flow)
        self._build_kernel_tunnel()

    def _build_kernel_tunnel(self) -> None:
        """The ``tc`` mechanism's path: a kernel VXLAN device in the switch namespace over its
        own veth to the analysis node's ``eth1``, where ``vx1`` decapsulates."""
        p, sw, an = self.prefix, ["ip", "-n", self.switch], ["ip", "-n", self.analysis]
        self.kernel_uplink, self.kernel_tunnel = f"{p}vk", f"{p}vt"
        self.lab.veth(
            self.kernel_uplink,
            self.analysis,
            peer="eth1",
            address=f"{KERNEL_ANALYSIS}/24",
            host_namespace=self.switch,
        )
        run([*sw, "addr", "add", f"{KERNEL_SWITCH}/24", "dev", self.kernel_uplink])
        for argv in (
            [*sw, "link", "set", self.kernel_uplink, "mtu", str(UNDERLAY_MTU)],
            [*an, "link", "set", "eth1", "mtu", str(UNDERLAY_MTU)],
            [
                *sw,
                "link",
                "add",
                self.kernel_tunnel,
                "type",
                "vxlan",
                "id",
                str(KERNEL_VNI),
                "local",
                KERNEL_SWITCH,
                "remote",
                KERNEL_ANALYSIS,
                "dstport",
                str(VXLAN_PORT),
                "dev",
                self.kernel_uplink,
            ],
            [*sw, "link", "set", self.kernel_tunnel, "up"],
            [
                *an,
                "link",
                "add",
                "vx1",
                "type",
                "vxlan",
                "id",
                str(KERNEL_VNI),
                "local",
                KERNEL_ANALYSIS,
                "dstport",
                str(VXLAN_PORT),
                "dev",
                "eth1",
            ],
            [*an, "link", "set", "vx1", "up"],
        ):
            run(argv)
        # the kernel would send its own IPv6 router solicitations and the like into the tunnel
        run(
            [
                "ip",
                "netns",
                "exec",
                self.switch,
                "sysctl",
                "-q",
                "-w",
                f"net.ipv6.conf.{self.kernel_tunnel}.disable_ipv6=1",
            ]
        )

    @property
    def _switch(self) -> OvsInstance:
        """The rig's OVS (``start`` started it)."""
        assert self.ovs is not None
        return self.ovs

    def _management(self) -> str:
        return f"unix:{self._switch.directory / (self.bridge + '.mgmt')}"

    def _ofctl(self, *args: str) -> str:
        return self._switch.ofctl(*args)

    def set_mechanism(
        self,
        kind: str,
        truncate: int | None = None,
        service_port: int = 80,
        share_bits: int = 0,
        segments: str = "psh",
    ) -> None:
        """Remove the current mechanism and apply ``kind`` (``none``, ``port``, ``selective``);
        ``truncate``: the mirror's ``snaplen`` or the flows' ``max_len``; ``share_bits``: the
        selective flows and the tc mirror copy a share 2**-share_bits of the connections;
        ``segments``: which of their segments (``psh`` or ``all``)."""
        self.clear_mechanism()
        if kind == "port":
            self._switch.vsctl(
                *port_mirror_args(self.bridge, self.server_port, self.tunnel_port, truncate)
            )
        elif kind == "selective":
            for flow in selective_flows(
                self.ofport[self.client_port],
                self.ofport[self.server_port],
                self.ofport[self.tunnel_port],
                SERVER_ADDRESS,
                service_port,
                truncate,
                share_bits,
                segments,
            ):
                self._ofctl("add-flow", self._management(), flow)
        elif kind == "tc":
            if truncate:
                raise ValueError("mechanism 'tc': no truncation in the rig's kernel mirror")
            self._tc_mirror(service_port, segments, share_bits)
        elif kind != "none":
            raise ValueError(f"mechanism {kind!r}: expected none, port, selective or tc")
        self.mechanism = (kind, truncate)
        # A changed Mirror row does not always reach flows already cached in the datapath
        # (seen here: a mirror added after traffic copied nothing): drop them all.
        self._switch.appctl("revalidator/purge")

    def _tc_mirror(self, service_port: int, segments: str, share_bits: int = 0) -> None:
        """The kernel mirror; with ``share_bits`` = k only the connections whose client port's
        top k of its low ``SHARE_BITS`` bits are 0, a share 2**-k (the agents' rule)."""
        if not 0 <= share_bits <= SHARE_BITS:
            raise ValueError(f"share_bits {share_bits}: expected 0..{SHARE_BITS}")
        text = bpf_filter(
            SERVER_ADDRESS, service_port, segments, selected=(1 << SHARE_BITS) >> share_bits
        )
        bytecode = bytecode_from_ddd(run(["tcpdump", "-y", "EN10MB", "-ddd", text]).stdout)
        run(clsact_add_argv(self.server_port, netns=self.switch))
        for direction in ("ingress", "egress"):  # from the server, to the server
            run(
                selective_filter_argv(
                    self.server_port,
                    self.kernel_tunnel,
                    bytecode,
                    prio=TC_PRIO,
                    direction=direction,
                    netns=self.switch,
                )
            )

    def clear_mechanism(self) -> None:
        kind = self.mechanism[0]
        if kind == "tc":
            run(clsact_delete_argv(self.server_port, netns=self.switch))
        if kind == "port":
            self._switch.vsctl(*port_mirror_removal_args(self.bridge))
        elif kind == "selective":
            self._ofctl("del-flows", self._management(), f"cookie={SELECTIVE_COOKIE:#x}/-1")
        self.mechanism = ("none",)

    def analysis_counters(self, device: str = "eth0") -> LinkCounters:
        """Frames and bytes the analysis node received on ``device`` (eth0: the underlay, VXLAN
        included; vx0: the decapsulated copies; eth1 and vx1 the same for ``tc``)."""
        stats = json.loads(
            run(["ip", "-n", self.analysis, "-s", "-j", "link", "show", device]).stdout
        )[0]["stats64"]["rx"]
        return LinkCounters(stats["packets"], stats["bytes"])

    def vswitchd_pid(self) -> int:
        return int((self._switch.directory / "ovs-vswitchd.pid").read_text().strip())

    def close(self) -> None:
        for process in reversed(self._processes):
            self.stop(process)
        self._processes.clear()
        if self.ovs is not None:
            self.ovs.stop()
            self.ovs = None
        super().close()
