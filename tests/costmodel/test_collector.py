"""The counting sFlow collector: header arithmetic, and a real UDP socket."""

from __future__ import annotations

import socket
import struct
import time

from cosample.costmodel.collector import SampleCounter, samples_in_datagram


def _header(samples: int, ipv6: bool = False) -> bytes:
    address = bytes(16) if ipv6 else bytes([127, 0, 0, 1])
    return struct.pack("!II", 5, 2 if ipv6 else 1) + address + struct.pack("!IIII", 0, 7, 1000, samples)


def test_counts_samples_in_v4_and_v6_headers():
    assert samples_in_datagram(_header(9)) == 9
    assert samples_in_datagram(_header(3, ipv6=True) + b"rest") == 3
    assert samples_in_datagram(b"\0\0\0\4" + _header(1)[4:]) is None  # sFlow v4
    assert samples_in_datagram(_header(1)[:20]) is None


def test_counter_receives_real_datagrams():
    with SampleCounter() as counter, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for count in (4, 5, 0):
            sender.sendto(_header(count), (counter.host, counter.port))
        sender.sendto(b"junk", (counter.host, counter.port))
        deadline = time.monotonic() + 3
        while counter.datagrams + counter.malformed < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert (counter.samples, counter.datagrams, counter.malformed) == (9, 3, 1)
    assert counter.target == f"127.0.0.1:{counter.port}"
