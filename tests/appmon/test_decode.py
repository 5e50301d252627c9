"""Decoding frames into TCP segments: each link and network layer, and hostile bytes."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon.analyser import Analyser
from cosample.appmon.decode import ACK, LINK_RAW, LINK_SLL, PSH, REASONS, SYN, Segment, decode
from cosample.appmon.pcap import tcp_frame


def test_ipv4_segment_fields():
    frame = tcp_frame("10.0.0.1", "10.0.0.2", 40000, 80, 123456, PSH | ACK, b"GET / HTTP/1.1\r\n")
    segment = decode(frame)
    assert isinstance(segment, Segment)
    assert segment.src == bytes([10, 0, 0, 1]) and segment.dst == bytes([10, 0, 0, 2])
    assert (segment.sport, segment.dport, segment.seq) == (40000, 80, 123456)
    assert segment.flags == PSH | ACK
    assert segment.payload == b"GET / HTTP/1.1\r\n" and segment.wire_length == 16


def test_ipv6_and_stacked_vlan_tags():
    frame = tcp_frame("2001:db8::1", "2001:db8::2", 1, 8080, 7, SYN, vlan=100)
    qinq = frame[:12] + struct.pack("!HH", 0x88A8, 5) + frame[12:]
    for candidate in (frame, qinq):
        segment = decode(candidate)
        assert isinstance(segment, Segment)
        assert len(segment.src) == 16 and segment.dport == 8080 and segment.flags == SYN


def test_ethernet_padding_is_not_payload():
    frame = tcp_frame("10.0.0.1", "10.0.0.2", 1, 2, 3, ACK) + b"\0" * 6  # padded to 60 bytes
    assert decode(frame).payload == b""


def test_truncated_capture_keeps_the_wire_length():
    frame = tcp_frame("10.0.0.1", "10.0.0.2", 1, 2, 3, ACK, b"x" * 1000)
    segment = decode(frame[:100])
    assert segment.wire_length == 1000 and len(segment.payload) == 100 - 54


def test_cooked_and_raw_links():
    frame = tcp_frame("10.0.0.1", "10.0.0.2", 1, 2, 3, ACK, b"abc")
    ip = frame[14:]
    sll = b"\0\0\0\1\0\6" + b"\0" * 8 + b"\x08\x00" + ip
    assert decode(sll, LINK_SLL).payload == b"abc"
    assert decode(ip, LINK_RAW).payload == b"abc"


def test_reasons_for_what_is_not_a_tcp_segment():
    frame = bytearray(tcp_frame("10.0.0.1", "10.0.0.2", 1, 2, 3, ACK, b"abc"))
    udp = bytearray(frame)
    udp[23] = 17
    fragment = bytearray(frame)
    fragment[20:22] = b"\x20\x00"  # more fragments
    arp = bytearray(frame)
    arp[12:14] = b"\x08\x06"
    bad_offset = bytearray(frame)
    bad_offset[14 + 20 + 12] = 0x20  # TCP data offset 2 words
    assert decode(bytes(udp)) == "not_tcp"
    assert decode(bytes(fragment)) == "ip_fragment"
    assert decode(bytes(arp)) == "not_ip"
    assert decode(bytes(bad_offset)) == "bad_header"
    assert decode(bytes(frame[:30])) == "truncated_header"
    assert decode(b"") == "truncated_header"


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([1, 101, 113, 276]))
def test_random_bytes_give_a_segment_or_a_named_reason(frame, link):
    result = decode(frame, link)
    assert isinstance(result, Segment) or result in REASONS


HTTP_BITS = st.sampled_from(
    [
        b"GET / HTTP/1.1\r\n",
        b"HTTP/1.1 200 OK\r\n",
        b"\r\n\r\n",
        b"Content-Length: 5\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"ffffffff\r\n",
        b"0\r\n\r\n",
        b"HTTP/1.1 101 X\r\n",
        b"Upgrade: h2c\r\n",  # a 101 with it switches the connection to HTTP/2
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"\x00\x00\x03\x01\x04\x00\x00\x00\x01\x88\x82\x84",  # HEADERS on stream 1
        b"x" * 40,
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, 2**32 - 1),
            st.integers(0, 63),
            st.lists(HTTP_BITS, max_size=6).map(b"".join),
            st.integers(0, 3),
        ),
        max_size=40,
    ),
    st.binary(max_size=64),
)
def test_hostile_conversations_never_raise(segments, noise):
    """Random flags, sequence numbers and HTTP fragments on few 4-tuples: counted, never raised."""
    analyser = Analyser(1.0, max_connections=2)
    for index, (from_client, seq, flags, payload, port) in enumerate(segments):
        ends = (
            ("10.0.0.1", "10.0.0.2", 40000 + port, 80)
            if from_client
            else ("10.0.0.2", "10.0.0.1", 80, 40000 + port)
        )
        frame = tcp_frame(*ends, seq, flags, payload)
        analyser.ingest(frame[: len(frame) - (index % 3) * 7], index * 0.25)
        analyser.ingest(noise, index * 0.25)
    windows = analyser.finish()
    for window in windows:
        for stats in window.services.values():
            assert stats.matched <= stats.responses
    assert analyser.frames == 2 * len(segments)
