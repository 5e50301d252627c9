"""The mirror tunnels' keys (one function every party computes them with) and the one port
between hosts that is not a tunnel: where an analysis host receives the sniffers' records.

A sender's agent mirrors a share of its VM traffic to a receiver through a VXLAN tunnel whose
key (VNI) is derived from the ordered pair of host names; the receiver's agent creates the
matching tunnel port, and the collector recognises mirrored copies (and their sender) by the
VNI that OVS reports with each sample taken on a tunnel port.
"""

from __future__ import annotations

import zlib

#: UDP port an analysis host receives the off-site sniffers' compact records on
#: (``cosample.appmon.records``; the agents' analyser spec names it).
RECORD_PORT = 9555
#: VNIs are 24 bits; 0 and 2**24 - 1 are avoided.
VNI_SPACE = 2**24 - 2


def pair_vni(sender: str, receiver: str) -> int:
    """The VXLAN key of the mirror tunnel sender -> receiver; both ends compute it alike."""
    return 1 + zlib.crc32(f"{sender}>{receiver}".encode()) % VNI_SPACE


def appmon_vni(sender: str, receiver: str) -> int:
    """The VXLAN key of the application-monitoring tunnel sender -> analysis host.

    Distinct from ``pair_vni`` of the same pair (the sFlow mirror tunnel), so both tunnels can
    exist between two hosts; the analysis host's device uses the same key.
    """
    return pair_vni(sender, f"{receiver}#appmon")
