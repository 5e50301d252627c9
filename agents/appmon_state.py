"""Application monitoring on a host: what the plan's ``hosts.<h>.appmon`` asks (pure).

Per monitored service the plan names a mechanism (docs/appmon-mechanisms.md):

- ``selective_mirror``: OpenFlow flows (the agent's appmon cookie) matching the service's TCP
  segments (to and from ``address:port``, with PSH by default) whose actions copy the segment to
  a tunnel port toward the analysis host, truncated to ``truncate_bytes``
  (``output(port=N,max_len=B)``), and forward it as before (``NORMAL``);
- ``kernel_mirror``: on the VM's port (``interface``), a cls_bpf filter on each hook of the
  shared ``clsact`` qdisc whose classic-BPF program is the sniffer's filter (``bpf_filter``,
  with the share's client-port residues), ``mirred egress mirror`` to the tunnel device toward
  the analysis host, verdict ``continue``; in the prio range ``KERNEL_MIRROR_PRIO_BASE`` of
  ``cosample.dataplane.tcmirror``, marked by a cookie that hashes what the filter does. The
  copies leave at the kernel's receive/transmit time: the server's timing on a userspace
  datapath (docs/appmon-mechanisms.md). The bytecode is compiled on the host at apply time
  (``tcpdump -y EN10MB -ddd``); here the filter is its libpcap expression;
- ``port_mirror``: an OVS ``Mirror`` selecting every packet to and from the VM's port, output to
  that tunnel port, truncated with ``snaplen``;
- ``sniffer``: nothing on the switch; the analyser on this host listens on ``interface`` with the
  BPF filter this module writes (``analyser_spec``).

The tunnel toward an analysis host is a Linux VXLAN device attached to the bridge as a port (the
same kind of device the sFlow mirrors use, so it works whatever the datapath and needs no br-phy
bridge; docs/appmon-mechanisms.md says what was measured). On the analysis host, the agent
creates the matching VXLAN device, unattached, and the analyser reads it.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass, field

from cosample.agents.state import ObservedDevice, short_hash
from cosample.dataplane.tcmirror import (
    KERNEL_MIRROR_COOKIE_TAG,
    KERNEL_MIRROR_PRIO_BASE,
    KERNEL_MIRROR_PRIO_COUNT,
)
from cosample.dataplane.tunnels import RECORD_PORT, appmon_vni
from cosample.plan.appmon import SHARE_BITS, AppmonEntry, selected_share
from cosample.plan.document import HostPlan, Plan, tunnel_ip
from cosample.plan.errors import PlanError

#: ``external_ids`` key on the agent's appmon Port, Interface and Mirror rows: the peer host.
APPMON_KEY = "cosample-appmon"
#: ``ifalias`` of the agent's appmon VXLAN devices (not the sFlow mirror devices' prefix, so
#: neither side mistakes the other's devices for its own).
APPMON_ALIAS = "cosample-appmon=agent"
#: Names: ``cosas-<hash of analysis host>`` on a sender, ``cosar-<hash of sender>`` on the
#: analysis host.
SEND_PREFIX, RECEIVE_PREFIX = "cosas", "cosar"
#: OpenFlow cookies of appmon flows: top 16 bits APPMON_COOKIE_TAG; the drop flow of a tunnel
#: port has the port number in the low bits, a service's flows ``RULE_BIT | crc32``.
APPMON_COOKIE_TAG, APPMON_COOKIE_MASK = 0xC05B << 48, 0xFFFF << 48
RULE_BIT = 1 << 32
#: Priorities: the tunnel port's drop flow, then the service flows (PSH above FIN above RST, so
#: a segment with several flags is copied once).
DROP_PRIORITY, FLAG_PRIORITY = 40000, {"psh": 40102, "fin": 40101, "rst": 40100, None: 40100}
#: OpenFlow port numbers requested for appmon tunnel ports: [APPMON_OFPORT_BASE, +COUNT).
APPMON_OFPORT_BASE, APPMON_OFPORT_COUNT = 65000, 200
#: A tunnel port used only by flows sits in this VLAN, so ``NORMAL`` never floods to it; a port
#: that is a Mirror's output is left out of normal forwarding by OVS itself and stays untagged
#: (an access tag on a Mirror output port lost one direction here: docs/appmon-mechanisms.md).
ISOLATION_VLAN = 4095
#: MTU of a sender's tunnel device: untruncated full-size frames must fit (the underlay
#: fragments the encapsulated packet rather than the device dropping the frame).
TUNNEL_MTU = 9000
_FLAGS = {"psh": ("psh",), "psh+ends": ("psh", "fin", "rst"), "all": (None,)}
_BPF_FLAGS4 = {"psh": "tcp-push", "psh+ends": "tcp-push|tcp-fin|tcp-rst"}
_BPF_FLAGS6 = {"psh": "0x08", "psh+ends": "0x0d"}  # byte 13 of a TCP header after a bare IPv6 one


@dataclass(frozen=True)
class AppmonDevice:
    """A VXLAN device: toward an analysis host (``attach``: a port of the bridge) or from a
    sender (on the analysis host, read by the analyser)."""

    name: str
    peer: str
    remote_ip: str
    vni: int
    local_ip: str
    dstport: int
    attach: bool


@dataclass(frozen=True)
class SelectiveRule:
    """The flows of one selectively mirrored service, toward ``peer``'s tunnel port."""

    peer: str
    cookie: int
    matches: tuple[tuple[int, str], ...]  # (priority, OpenFlow match)
    max_len: int | None


@dataclass(frozen=True)
class AppmonMirror:
    """The OVS Mirror toward ``peer``: every packet to and from ``ports``."""

    peer: str
    name: str
    ports: tuple[str, ...]
    snaplen: int | None


@dataclass(frozen=True)
class KernelMirrorFilter:
    """One hook's tc filter of a kernel-mirrored service: ``expression`` (libpcap) -> ``target``."""

    interface: str
    direction: str  # ingress (what the VM sends) / egress (what it receives)
    prio: int
    expression: str
    target: str
    peer: str
    remote_ip: str  # the analysis host: the interface must not carry the route to it

    @property
    def cookie(self) -> str:
        """The owner's tag and a hash of the filter, target and peer: a changed entry changes
        it, so reconcile compares cookies, not bytecode (compiled on the host)."""
        digest = zlib.crc32(f"{self.expression}>{self.target}>{self.peer}".encode())
        return f"{KERNEL_MIRROR_COOKIE_TAG}{digest:08x}"


@dataclass(frozen=True)
class DesiredAppmon:
    devices: tuple[AppmonDevice, ...] = ()
    rules: tuple[SelectiveRule, ...] = ()
    mirrors: tuple[AppmonMirror, ...] = ()
    kernel_filters: tuple[KernelMirrorFilter, ...] = ()
    spec: tuple[dict, ...] = ()  # what the analyser on this host reads (analyser_spec)


@dataclass(frozen=True)
class ObservedAppmonPort:
    bridge: str
    name: str
    peer: str | None
    ofport: int | None
    tag: int | None


#: An appmon VXLAN device is observed as the sFlow mirrors' devices are (its owner tells them apart).
ObservedAppmonDevice = ObservedDevice


@dataclass(frozen=True)
class ObservedAppmonMirror:
    bridge: str
    uuid: str
    name: str
    src: frozenset[str]
    dst: frozenset[str]
    output: str | None
    snaplen: int | None


@dataclass(frozen=True)
class ObservedAppmon:
    """The agent's appmon objects on every bridge, and what reconcile needs around them."""

    devices: tuple[ObservedAppmonDevice, ...] = ()
    ports: tuple[ObservedAppmonPort, ...] = ()
    mirrors: tuple[ObservedAppmonMirror, ...] = ()
    #: (bridge, cookie) -> the flows with that cookie, as ``flow_text`` writes them
    flows: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    #: OpenFlow port numbers in use on the plan's bridge (by anyone)
    used_ofports: frozenset[int] = frozenset()
    #: interfaces that exist and are not the agent's appmon devices
    foreign_links: frozenset[str] = frozenset()


# desired ---------------------------------------------------------------------------------------
def desired_appmon(
    plan: Plan, host: HostPlan, vxlan_port: int = 4789, sflow_vnis: tuple[int, ...] = ()
) -> DesiredAppmon:
    """This host's appmon state: its own entries, and the tunnels of senders it analyses for."""
    devices: list[AppmonDevice] = []
    rules: list[SelectiveRule] = []
    by_peer: dict[str, list[AppmonEntry]] = {}
    selective: dict[tuple[str, int], int] = {}
    for k, entry in enumerate(host.appmon):
        if entry.mechanism == "sniffer":
            continue
        assert entry.to is not None  # (``AppmonEntry``: a mirror has its analysis host)
        by_peer.setdefault(entry.to, []).append(entry)
        if entry.mechanism == "selective_mirror":
            key = (entry.service.address, entry.service.port)
            if key in selective:
                raise PlanError(
                    f"hosts.{host.name}.appmon[{k}]: a second selective mirror of "
                    f"{key[0]}:{key[1]} (appmon[{selective[key]}]); OpenFlow runs "
                    f"one flow per packet, so a service has one selective mirror"
                )
            selective[key] = k
            rules.append(_rule(entry))
    for peer in sorted(by_peer):
        local = tunnel_ip(plan, host.name, f"{host.name} mirrors services to {peer}")
        devices.append(
            AppmonDevice(
                name=f"{SEND_PREFIX}-{short_hash(peer)}",
                peer=peer,
                remote_ip=tunnel_ip(plan, peer, f"{host.name} mirrors services to it", local),
                vni=appmon_vni(host.name, peer),
                local_ip=local,
                dstport=vxlan_port,
                attach=True,
            )
        )
    mirrors = tuple(
        AppmonMirror(
            peer=peer,
            name=f"cosample-appmon-{short_hash(peer)}",
            ports=tuple(sorted({e.interface for e in entries if e.mechanism == "port_mirror"})),  # type: ignore
            snaplen=next(e.truncate_bytes for e in entries if e.mechanism == "port_mirror"),
        )
        for peer, entries in sorted(by_peer.items())
        if any(e.mechanism == "port_mirror" for e in entries)
    )
    senders = sorted(
        name
        for name, other in plan.hosts.items()
        if any(e.to == host.name and e.mechanism != "sniffer" for e in other.appmon)
    )
    for sender in senders:
        local = tunnel_ip(plan, host.name, f"it analyses services of {sender}")
        devices.append(
            AppmonDevice(
                name=f"{RECEIVE_PREFIX}-{short_hash(sender)}",
                peer=sender,
                remote_ip=tunnel_ip(plan, sender, f"it mirrors services to {host.name}", local),
                vni=appmon_vni(sender, host.name),
                local_ip=local,
                dstport=vxlan_port,
                attach=False,
            )
        )
    names = [d.name for d in devices]
    kernel = _kernel_filters(host, {d.peer: d for d in devices if d.attach})
    vnis = [d.vni for d in devices] + list(sflow_vnis)
    if len(set(names)) != len(names) or len(set(vnis)) != len(vnis):
        raise PlanError(
            f"hosts.{host.name}.appmon: tunnel device names or VXLAN keys collide "
            f"({names}); rename a peer host"
        )
    return DesiredAppmon(
        devices=tuple(devices),
        rules=tuple(rules),
        mirrors=mirrors,
        kernel_filters=kernel,
        spec=analyser_spec(plan, host),
    )


def _kernel_filters(
    host: HostPlan, tunnels: dict[str, AppmonDevice]
) -> tuple[KernelMirrorFilter, ...]:
    """Both hooks' filters of each ``kernel_mirror`` entry; per interface, consecutive prios
    in the plan's order."""
    out: list[KernelMirrorFilter] = []
    count: dict[str, int] = {}
    for entry in host.appmon:
        if entry.mechanism != "kernel_mirror":
            continue
        interface, to = entry.interface, entry.to
        assert interface is not None and to is not None  # (``AppmonEntry``: a kernel mirror's)
        k = count.get(interface, 0)
        if k >= KERNEL_MIRROR_PRIO_COUNT:
            raise PlanError(
                f"hosts.{host.name}.appmon: more than {KERNEL_MIRROR_PRIO_COUNT} "
                f"kernel mirrors on {interface}"
            )
        count[interface] = k + 1
        tunnel = tunnels[to]
        expression = bpf_filter(
            entry.service.address,
            entry.service.port,
            entry.copied_segments,
            selected_share(entry.share),
        )
        out += [
            KernelMirrorFilter(
                interface,
                direction,
                KERNEL_MIRROR_PRIO_BASE + k,
                expression,
                tunnel.name,
                tunnel.peer,
                tunnel.remote_ip,
            )
            for direction in ("ingress", "egress")
        ]
    return tuple(out)


def analyser_spec(plan: Plan, host: HostPlan) -> tuple[dict, ...]:
    """What an analyser on ``host`` reads, one item per service: interface, BPF filter, snaplen.

    Sniffer entries of this host (on-site, or ``send_to`` an analysis host with compact
    records: ``send_records`` is the endpoint for ``appmon run --send-records``, sent from
    ``send_records_from``, this host's tunnel address), the services other hosts mirror to this
    host (read from the tunnel device), and the other hosts' sniffers that send records here
    (``interface`` None; ``receive_records`` for ``appmon run --receive-records``, taken only
    from ``records_from``, the sender's tunnel address).
    """
    items = []
    for entry in host.appmon:
        if entry.mechanism == "sniffer":
            item = _spec_item(
                entry,
                entry.interface,
                sender=host.name,
                send_to=entry.to,
            )
            if entry.to is not None:  # ``appmon run --send-records`` to the analysis host
                item["send_records"] = _record_endpoint(plan, entry.to, host.name)
                item["send_records_from"] = tunnel_ip(
                    plan, host.name, f"its sniffer sends compact records to {entry.to}"
                )
            items.append(item)
    for sender, other in sorted(plan.hosts.items()):
        for entry in other.appmon:
            if entry.to == host.name and entry.mechanism == "sniffer":
                item = _spec_item(entry, None, sender=sender, send_to=None)
                item["receive_records"] = _record_endpoint(plan, host.name, sender)
                item["records_from"] = tunnel_ip(  # the only address records are taken from
                    plan, sender, f"its sniffer sends compact records to {host.name}"
                )
                items.append(item)
            elif entry.to == host.name:
                items.append(
                    _spec_item(
                        entry, f"{RECEIVE_PREFIX}-{short_hash(sender)}", sender=sender, send_to=None
                    )
                )
    return tuple(items)


def _record_endpoint(plan: Plan, analysis: str, sender: str) -> str:
    """``ADDRESS:PORT`` where ``analysis`` receives the compact records of ``sender``'s sniffer."""
    address = tunnel_ip(plan, analysis, f"{sender}'s sniffer sends compact records to it")
    return (f"[{address}]" if ":" in address else address) + f":{RECORD_PORT}"


def bpf_filter(address: str, port: int, segments: str, selected: int = 1 << SHARE_BITS) -> str:
    """A libpcap filter for the service's TCP segments (both directions) with ``segments``;
    with ``selected`` < 256 only the connections whose client port's low ``SHARE_BITS`` bits are
    below it (the selective mirror's rule, ``client_port_masks``)."""
    six = ipaddress.ip_address(address).version == 6
    response = request = ""
    if selected < 1 << SHARE_BITS:  # libpcap's tcp[] is IPv4 only: a bare IPv6 header is 40 bytes
        low = (1 << SHARE_BITS) - 1
        client_src, client_dst = ("ip6[40:2]", "ip6[42:2]") if six else ("tcp[0:2]", "tcp[2:2]")
        response = f" and ({client_dst} & {low}) < {selected}"
        request = f" and ({client_src} & {low}) < {selected}"
    text = (
        f"{'ip6 and ' if six else ''}tcp and ((src host {address} and src port {port}"
        f"{response}) or (dst host {address} and dst port {port}{request}))"
    )
    if segments != "all":
        text += (
            f" and (ip6[53] & {_BPF_FLAGS6[segments]} != 0)"
            if six
            else f" and (tcp[tcpflags] & ({_BPF_FLAGS4[segments]}) != 0)"
        )
    return text


def flow_text(priority: int, match: str, actions: str) -> str:
    """One flow as ``ovs-ofctl --no-stats --no-names dump-flows`` prints it, cookie left out."""
    return f"priority={priority},{match} actions={actions}"


def rule_actions(ofport: int, max_len: int | None) -> str:
    out = f"output(port={ofport},max_len={max_len})" if max_len else f"output:{ofport}"
    return f"{out},NORMAL"


def summary(desired: DesiredAppmon | None) -> dict:
    """The appmon part of the agent's status (report.summarise)."""
    if desired is None or not (desired.devices or desired.spec):
        return {}
    return {
        "tunnels": {d.peer: d.name for d in desired.devices if d.attach},
        "receives": {d.peer: d.name for d in desired.devices if not d.attach},
        "selective_flows": sum(len(r.matches) for r in desired.rules),
        "port_mirrors": {m.peer: list(m.ports) for m in desired.mirrors},
        "kernel_mirrors": sorted({f"{f.interface}>{f.peer}" for f in desired.kernel_filters}),
        "analyser": list(desired.spec),
    }


# pieces ----------------------------------------------------------------------------------------
def _rule(entry: AppmonEntry) -> SelectiveRule:
    address, port = entry.service.address, entry.service.port
    six = ipaddress.ip_address(address).version == 6
    proto, field_ = ("tcp6", "ipv6") if six else ("tcp", "nw")
    matches = []
    for flag in _FLAGS[entry.copied_segments]:
        suffix = f",tcp_flags=+{flag}" if flag else ""
        for client in client_port_masks(selected_share(entry.share)):
            # OVS prints tp_src before tp_dst; the client's port is the other end's
            matches.append(
                (
                    FLAG_PRIORITY[flag],
                    f"{proto},{field_}_dst={address},"
                    + (f"tp_src={client},tp_dst={port}" if client else f"tp_dst={port}")
                    + suffix,
                )
            )
            matches.append(
                (
                    FLAG_PRIORITY[flag],
                    f"{proto},{field_}_src={address},tp_src={port}"
                    + (f",tp_dst={client}" if client else "")
                    + suffix,
                )
            )
    cookie = APPMON_COOKIE_TAG | RULE_BIT | zlib.crc32(f"{address}:{port}>{entry.to}".encode())
    assert entry.to is not None  # (``AppmonEntry``: a mirror has its analysis host)
    return SelectiveRule(
        peer=entry.to,
        cookie=cookie,
        matches=tuple(matches),
        max_len=entry.truncate_bytes,
    )


def client_port_masks(selected: int) -> tuple[str, ...]:
    """Masked matches (as OVS prints them) on the client port's low ``SHARE_BITS`` bits that
    together select the residues ``0 .. selected - 1`` (one per bit set in ``selected``: the
    hash of the 5-tuple a plan's ``share`` stands for is the client's ephemeral port); ``("",)``
    when every connection is copied."""
    whole = 1 << SHARE_BITS
    if selected >= whole:
        return ("",)
    masks = []
    for bit in range(SHARE_BITS - 1, -1, -1):
        if selected >> bit & 1:
            value = selected >> (bit + 1) << (bit + 1)
            masks.append(f"0x{value:x}/0x{(whole - 1) & ~((1 << bit) - 1):x}")
    return tuple(masks)


def _spec_item(entry: AppmonEntry, interface: str | None, sender: str, send_to: str | None) -> dict:
    segments = entry.copied_segments
    # the sniffer selects connections itself; a selective mirror's copies arrive selected
    selected = selected_share(entry.share if entry.mechanism != "port_mirror" else None)
    return {
        "service": {
            "address": entry.service.address,
            "port": entry.service.port,
            "protocol": entry.service.protocol,
        },
        "mechanism": entry.mechanism,
        "from": sender,
        "interface": interface,
        "bpf": bpf_filter(
            entry.service.address,
            entry.service.port,
            segments,
            selected if entry.mechanism == "sniffer" else 1 << SHARE_BITS,
        ),
        "segments": segments,
        "snaplen": entry.truncate_bytes,
        "send_to": send_to,
        "share": selected / (1 << SHARE_BITS),
    }
