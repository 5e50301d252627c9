"""Frames -> TCP segments: Ethernet (802.1Q/802.1ad tags), Linux cooked or raw IP; IPv4, IPv6; TCP.

Decoding is a layer of its own (goflow2's shape): bytes in, one plain tuple out, nothing else. A
frame that is not a TCP segment this layer can read gives back the *reason* as a string, which
the caller counts under that name; nothing here raises on any input (a property test feeds it
random bytes). IP fragments are not reassembled (HTTP request and status lines travel in the
first bytes of a segment, and TCP over Ethernet does not fragment in practice): counted.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

LINK_ETHERNET, LINK_RAW, LINK_RAW_ALT, LINK_SLL, LINK_SLL2 = 1, 101, 12, 113, 276
LINKS = (LINK_ETHERNET, LINK_RAW, LINK_RAW_ALT, LINK_SLL, LINK_SLL2)
ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
VLAN_TAGS = (0x8100, 0x88A8, 0x9100)
TCP = 6
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

#: The reasons ``decode`` gives for frames it does not turn into segments.
REASONS = ("not_ip", "not_tcp", "ip_fragment", "truncated_header", "bad_header")

_IPV4 = struct.Struct("!BxHxxHxB")  # version/ihl, total length, flags/fragment, protocol
_TCP = struct.Struct("!HHIIBB")  # ports, sequence, acknowledgement, offset, flags
_H = struct.Struct("!H")


class Segment(NamedTuple):
    """One TCP segment: addresses as packed bytes (4 or 16), the payload captured and its length
    on the wire (larger when the capture truncated the frame: the bytes between are unseen), and
    the acknowledgement number (which request bytes the sender had received)."""

    src: bytes
    dst: bytes
    sport: int
    dport: int
    seq: int
    flags: int
    payload: bytes
    wire_length: int
    ack: int


def decode(frame: bytes, link: int = LINK_ETHERNET) -> Segment | str:
    """The TCP segment in ``frame``, or the reason (one of ``REASONS``) it has none."""
    length = len(frame)
    if link == LINK_ETHERNET:
        if length < 14:
            return "truncated_header"
        ethertype, offset = _H.unpack_from(frame, 12)[0], 14
        while ethertype in VLAN_TAGS:
            if length < offset + 4:
                return "truncated_header"
            ethertype, offset = _H.unpack_from(frame, offset + 2)[0], offset + 4
    elif link == LINK_SLL:
        if length < 16:
            return "truncated_header"
        ethertype, offset = _H.unpack_from(frame, 14)[0], 16
    elif link == LINK_SLL2:
        if length < 20:
            return "truncated_header"
        ethertype, offset = _H.unpack_from(frame, 0)[0], 20
    else:  # raw IP
        if length < 1:
            return "truncated_header"
        ethertype, offset = (ETHERTYPE_IPV4 if frame[0] >> 4 == 4 else ETHERTYPE_IPV6), 0
    if ethertype == ETHERTYPE_IPV4:
        if length < offset + 20:
            return "truncated_header"
        version_ihl, total, fragment, protocol = _IPV4.unpack_from(frame, offset)
        header = (version_ihl & 0x0F) * 4
        if version_ihl >> 4 != 4 or header < 20 or total < header:
            return "bad_header"
        if protocol != TCP:
            return "not_tcp"
        if fragment & 0x3FFF:
            return "ip_fragment"
        src, dst = frame[offset + 12 : offset + 16], frame[offset + 16 : offset + 20]
        tcp, end = offset + header, offset + total
    elif ethertype == ETHERTYPE_IPV6:
        if length < offset + 40:
            return "truncated_header"
        if frame[offset] >> 4 != 6:
            return "bad_header"
        if frame[offset + 6] != TCP:  # extension headers are not followed
            return "not_tcp"
        src, dst = frame[offset + 8 : offset + 24], frame[offset + 24 : offset + 40]
        tcp, end = offset + 40, offset + 40 + _H.unpack_from(frame, offset + 4)[0]
    else:
        return "not_ip"
    if length < tcp + 20 or end < tcp + 20:
        return "truncated_header"
    sport, dport, seq, ack, data_offset, flags = _TCP.unpack_from(frame, tcp)
    start = tcp + (data_offset >> 4) * 4
    if start < tcp + 20 or start > end:
        return "bad_header"
    # a capture cut inside the TCP options (a truncating mirror's 64 bytes) still gives the
    # sequence number and, from the IP header, the payload's length: none of it seen
    return Segment(src, dst, sport, dport, seq, flags, frame[start:end], end - start, ack)
