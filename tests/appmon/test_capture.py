"""The live capture: the kernel BPF filter passes only the TCP ports asked for (real sockets on lo)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from cosample.appmon.capture import JEQ, JSET, PacketRing, tcp_filter
from cosample.appmon.decode import Segment, decode
from cosample.appmon.errors import AppmonError


def test_filter_jumps_stay_inside_the_program():
    for ports in (frozenset(), frozenset({80}), frozenset(range(8000, 8040))):
        program = tcp_filter(ports)
        for index, (code, true, false, _) in enumerate(program):
            if code in (JEQ, JSET):
                assert index + 1 + max(true, false) < len(program)
    with pytest.raises(AppmonError, match="too many ports"):
        tcp_filter(frozenset(range(1000, 1300)))


@pytest.mark.root
def test_only_tcp_of_the_given_port_reaches_the_socket():
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    listener, other = socket.socket(), socket.socket()
    for sock in (listener, other):
        sock.bind(("127.0.0.1", 0))
        sock.listen()
    port, other_port = listener.getsockname()[1], other.getsockname()[1]
    capture = PacketRing("lo", frozenset({port}))
    try:
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.sendto(b"x", ("127.0.0.1", port))
        udp.close()
        for target in (other_port, port):
            client = socket.create_connection(("127.0.0.1", target))
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")
            client.close()
        time.sleep(0.2)  # the blocks are handed over RETIRE_MS after their first frame
        frames = capture.batch()
        passed, drops = capture.statistics()
    finally:
        capture.close()
        listener.close()
        other.close()
    segments = [decode(frame) for _, frame in frames]
    assert segments and all(isinstance(s, Segment) for s in segments)
    assert all(port in (s.sport, s.dport) for s in segments)
    assert sum(s.payload.startswith(b"GET ") for s in segments) == 1
    assert sum(s.flags & 0x12 == 0x02 for s in segments) == 1  # one SYN: each frame seen once
    assert all(abs(when - time.time()) < 60 for when, _ in frames)  # kernel time stamps
    assert drops == 0 and passed == len(frames)  # lo: each frame once (outgoing copies left out)


def test_unknown_interface_is_one_clear_error():
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    with pytest.raises(AppmonError, match="--interface nosuchif0: cannot capture"):
        PacketRing("nosuchif0")
