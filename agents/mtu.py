"""Do copies of full-size frames reach the mirror receivers? The underlay's MTU against the VM ports'.

A frame of a VM port with MTU ``m`` is up to ``m + 14`` bytes; VXLAN makes its copy an IP packet
of ``m + 50`` bytes over IPv4 (``m + 70`` over IPv6). The agent's Linux VXLAN device sends it
whatever the device's own MTU (``mirred`` does not check it), and the underlay fragments it
(VXLAN's outer DF is unset). A kernel VXLAN receiver reassembles the fragments; a receiving
host's OVS VXLAN port on the userspace datapath does not pop fragmented tunnel packets, so
there the copy is lost (measured: docs/ovs-facts.md). The agent cannot change the underlay, so
it warns, naming the largest frame whose copy still arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cosample.agents.state import MirrorTarget

#: Outer Ethernet is not in the IP MTU: VXLAN 8 + UDP 8 + IP 20 (40 for IPv6) + inner Ethernet 14.
VXLAN_OVERHEAD = {4: 50, 6: 70}
#: The inner frame's Ethernet header: a frame is up to its port's MTU plus this.
ETHERNET_HEADER = 14


def overhead(remote_ip: str) -> int:
    """Bytes VXLAN adds to an IP packet sent on a VM port, toward ``remote_ip``."""
    return VXLAN_OVERHEAD[6 if ":" in remote_ip else 4]


def mirror_mtu_warnings(
    targets: Iterable[MirrorTarget],
    vm_mtus: Mapping[str, int],
    paths: Mapping[str, tuple[str, int]],
) -> list[str]:
    """One warning per mirror target whose underlay (``paths``: remote address -> (interface,
    MTU)) is too small for copies of the largest frames of the VM ports (``vm_mtus``)."""
    if not vm_mtus:
        return []
    port = max(sorted(vm_mtus), key=lambda name: vm_mtus[name])
    largest = vm_mtus[port]
    out = []
    for target in targets:
        if target.remote_ip not in paths:
            continue
        device, mtu = paths[target.remote_ip]
        need = largest + overhead(target.remote_ip)
        if mtu < need:
            fits = mtu - overhead(target.remote_ip) + ETHERNET_HEADER
            out.append(
                f"mirror to {target.peer}: the underlay toward {target.remote_ip} ({device}) has "
                f"MTU {mtu}, below the {need} bytes a VXLAN copy of a full-size frame of VM port "
                f"{port} (MTU {largest}) needs; copies of frames over {fits} bytes are "
                f"fragmented, and a receiver's OVS VXLAN port drops fragments: those copies are "
                f"lost there (raise the underlay MTU to {need})"
            )
    return out
