"""The sFlow records the decoder gives: what one sample, one datagram, says (no parsing here).

``FlowSample`` decodes the addresses of its sampled packet when asked (``src_ip``, ``dst_ip``, ...):
through any number of VLAN tags (802.1Q, QinQ) of an Ethernet header, or a raw IPv4 or IPv6
header, as its ``header_protocol`` says; the collector's fast path never builds one
(``decode.parse_compact``'s tuples), only stages that want a record (re-export, traffic matrix).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from ipaddress import IPv6Address

ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
#: 802.1Q, 802.1ad (QinQ outer tag) and the pre-standard QinQ tag: skipped to find the IP header.
VLAN_TAGS = (0x8100, 0x88A8, 0x9100)
#: sFlow's header_protocol of a raw packet header record (sflow_version_5.txt).
HEADER_ETHERNET, HEADER_IPV4, HEADER_IPV6 = 1, 11, 12
_ntoa = socket.inet_ntoa


@dataclass(slots=True)
class FlowSample:
    """One sampled packet as an agent reported it.

    ``outer_src``/``outer_dst`` (raw 4 bytes) and ``vni`` come from the tunnel-ingress records,
    present only for packets that entered the bridge through a tunnel port; ``tunnel_src`` and
    ``tunnel_dst`` give the addresses as text.
    """

    agent: str
    sequence: int
    sampling_rate: int
    sample_pool: int
    drops: int
    input_port: int
    output_port: int
    frame_length: int = 0
    header: bytes = b""
    outer_src: bytes | None = None
    outer_dst: bytes | None = None
    vni: int | None = None
    source_index: int = 0
    header_protocol: int = HEADER_ETHERNET

    @property
    def tunnel_src(self) -> str | None:
        return _ntoa(self.outer_src) if self.outer_src is not None else None

    @property
    def tunnel_dst(self) -> str | None:
        return _ntoa(self.outer_dst) if self.outer_dst is not None else None

    @property
    def src_mac(self) -> str | None:
        ethernet = self.header_protocol == HEADER_ETHERNET and len(self.header) >= 14
        return self.header[6:12].hex(":") if ethernet else None

    @property
    def dst_mac(self) -> str | None:
        ethernet = self.header_protocol == HEADER_ETHERNET and len(self.header) >= 14
        return self.header[0:6].hex(":") if ethernet else None

    def _ip(self) -> tuple[int, int]:
        """(IP version, offset of its header in ``header``), or (0, -1): Ethernet with any
        number of VLAN tags (802.1Q, QinQ), or a raw IPv4 or IPv6 header."""
        header, kind = self.header, self.header_protocol
        if kind == HEADER_ETHERNET:
            if len(header) < 14:
                return 0, -1
            ethertype, offset = (header[12] << 8) | header[13], 14
            while ethertype in VLAN_TAGS and len(header) >= offset + 4:
                ethertype, offset = (header[offset + 2] << 8) | header[offset + 3], offset + 4
            version = 4 if ethertype == ETHERTYPE_IPV4 else 6 if ethertype == ETHERTYPE_IPV6 else 0
        elif kind in (HEADER_IPV4, HEADER_IPV6):
            version, offset = (4 if kind == HEADER_IPV4 else 6), 0
        else:
            return 0, -1
        if version == 4 and len(header) >= offset + 20 and header[offset] >> 4 == 4:
            return 4, offset
        if version == 6 and len(header) >= offset + 40 and header[offset] >> 4 == 6:
            return 6, offset
        return 0, -1

    def _address(self, where4: int, where6: int) -> str | None:
        version, at = self._ip()
        if version == 4:
            return _ntoa(self.header[at + where4 : at + where4 + 4])
        if version == 6:  # written as the inventory writes it (ipaddress, RFC 5952)
            return str(IPv6Address(self.header[at + where6 : at + where6 + 16]))
        return None

    @property
    def src_ip(self) -> str | None:
        return self._address(12, 8)

    @property
    def dst_ip(self) -> str | None:
        return self._address(16, 24)

    @property
    def ip_protocol(self) -> int | None:
        """IPv4's protocol or IPv6's next header (extension headers are not followed)."""
        version, at = self._ip()
        return self.header[at + (9 if version == 4 else 6)] if version else None


def flow_record(agent: str, compact: tuple, data: bytes) -> FlowSample:
    """The ``FlowSample`` of one tuple from ``parse_compact`` (when a stage needs the record)."""
    (
        sequence,
        index,
        rate,
        drops,
        frame_length,
        vni,
        outer,
        head,
        tail,
        header,
        input_port,
        output_port,
        protocol,
    ) = compact
    return FlowSample(
        agent,
        sequence,
        rate,
        0,
        drops,
        input_port,
        output_port,
        frame_length,
        header if header is not None else data[head:tail],
        outer,
        None,
        vni,
        index,
        protocol,
    )


@dataclass(frozen=True, slots=True)
class DiscardSample:
    """A packet the agent's switch dropped (format 5): where, why (``reason``: sFlow's drop
    reason code, 0-255 ICMP unreachable codes, 256 and up named reasons in sflow_drops.txt) and
    the start of the packet."""

    agent: str
    sequence: int
    source_index: int
    drops: int
    input_port: int
    output_port: int
    reason: int
    frame_length: int = 0
    header: bytes = b""


@dataclass(frozen=True, slots=True)
class InterfaceCounters:
    """Generic interface counters of one port (OVS: ``in`` = received by the switch port)."""

    agent: str
    if_index: int
    in_octets: int
    in_packets: int
    out_octets: int
    out_packets: int
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class Datagram:
    agent: str
    sub_agent: int
    sequence: int
    uptime_ms: int
    flow_samples: tuple[FlowSample, ...]
    counters: tuple[InterfaceCounters, ...] = ()
    discards: tuple[DiscardSample, ...] = ()

    @property
    def counter_samples(self) -> int:
        return len(self.counters)
