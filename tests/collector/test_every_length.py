"""Issue 41, item 4: every datagram length from 0 to 65,535 against a real daemon, and every
counter counts only what its name says.

The report: each zero-length UDP datagram added its arrival time in Unix seconds to
``receive_queue_overflow`` (the receive process used length 0 as its in-band overflow report),
100 of them read 179,653,691,000, and none appeared as dropped. Here one datagram of each
length goes to a daemon listening on both families (``--listen [::]:0``): a cut or padded
sFlow datagram from a planned agent's own address, IPv4 up to the largest UDP payload IPv4
carries (65,507 bytes), IPv6 above it up to IPv6's (65,527); the kernel refuses the last eight
lengths at the sender, so they reach no counter. The expected verdict of each length follows
from the layout (not from the decoder): shorter than the header, ``truncated``; a header whose
one announced sample cannot fit, ``bad_count``; cut inside the sample, ``truncated``; whole
(zero bytes after it are not read), counted; longer than any IPv4 datagram, ``oversized``. The
daemon's counters must add up to exactly that: nothing overflowed, nothing lost in the kernel
(the sender waits for the daemon), no other reason counted.
"""

from __future__ import annotations

import errno
import json
import socket
import struct

import pytest
from collector_daemon import Daemon, counter
from collector_plans import plan_document
from waiting import wait_for

from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import frame, vm_address

AGENT4, AGENT6 = "127.41.1.1", "::1"
V4_MAX, V6_MAX = 65_507, 65_527  # the largest UDP payloads (no IPv6 jumbograms)
RATE = 16
PACE_BYTES = 16 << 20  # the sender waits for the daemon after this many bytes


def sample(number: int) -> bytes:
    header, length = frame(vm_address(0), vm_address(1, 2), 500)
    return flow_sample(SampleSpec(number, RATE, RATE * number, header, length, input_port=1))


def ipv4(number: int) -> bytes:
    return datagram(AGENT4, number, 1000 + number, [sample(number)])


def ipv6(number: int) -> bytes:
    head = struct.pack(
        "!II16sIIII", 5, 2, socket.inet_pton(socket.AF_INET6, AGENT6), 0, number, number, 1
    )
    return head + sample(number)


def of_length(length: int, base: bytes) -> bytes:
    """``base`` cut to ``length`` bytes, or followed by zero bytes up to it."""
    return base[:length] if length <= len(base) else base + bytes(length - len(base))


def ipv6_loopback() -> str | None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        return f"no IPv6 loopback ({exc.strerror})"
    return None


@pytest.mark.slow
@pytest.mark.skipif(ipv6_loopback() is not None, reason=str(ipv6_loopback()))
def test_every_length_is_counted_by_what_it_is(tmp_path):
    whole = len(ipv4(1))
    expected = {
        "truncated": 28 + (whole - 36),  # 0-27: the header; 36..whole-1: the sample
        "bad_count": 8,  # 28-35: one sample announced in fewer than its 8 bytes
        "oversized": V6_MAX - V4_MAX,  # IPv6 only: longer than any IPv4 datagram
    }
    counted = V4_MAX - whole + 1
    document = plan_document({"s1": (RATE, {}), "s2": (RATE, {})})
    document["hosts"]["s1"]["agent_ip"], document["hosts"]["s2"]["agent_ip"] = AGENT4, AGENT6
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    daemon = Daemon(
        path, "--insecure-unsigned", "--listen", "[::]:0", "--receive-buffer", str(64 << 20)
    )
    refused, sent, unsent = [], 0, 0

    def accounted() -> int:
        status = json.loads(daemon.get("/status"))
        return status["datagrams"] + sum(status["dropped"].values())

    try:
        port = daemon.listen[1]
        with AgentSender() as four, socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as six:
            six.bind((AGENT6, 0))
            for length in range(65_536):
                try:
                    if length <= V4_MAX:
                        four.send(of_length(length, ipv4(length + 1)), ("127.0.0.1", port))
                    else:
                        six.sendto(of_length(length, ipv6(length + 1)), ("::1", port))
                except OSError as exc:
                    refused.append((length, exc.errno))
                    continue
                sent += 1
                unsent += length
                if unsent >= PACE_BYTES:  # bounded: wait until the daemon has them all
                    wait_for(lambda: accounted() >= sent, timeout_s=60.0)
                    unsent = 0
        wait_for(lambda: accounted() >= sent, timeout_s=60.0)
        status = json.loads(daemon.get("/status"))
        wait_for(lambda: daemon.snapshot().servers["s1"].samples == counted, timeout_s=30.0)
        snapshot, metrics = daemon.snapshot(), daemon.metrics()
    finally:
        daemon.stop()
    assert refused == [(length, errno.EMSGSIZE) for length in range(V6_MAX + 1, 65_536)]
    assert sent == V6_MAX + 1
    assert status["receive_queue_overflow"] == 0  # was the empty datagram's arrival time
    assert counter(metrics, "cosample_collector_receive_queue_overflow_total") == 0
    assert status["kernel_receive_drops"] == 0
    assert status["datagrams"] == counted and status["samples"] == counted
    assert dict(snapshot.dropped) == expected  # each length under what it is, nothing else
    assert counter(metrics, "cosample_collector_datagrams_total") == counted
    for reason, count in expected.items():
        assert counter(metrics, "cosample_collector_dropped_total", reason=reason) == count
    assert snapshot.servers["s1"].samples == counted and snapshot.servers["s2"].samples == 0
    assert not snapshot.ignored and not snapshot.sequence  # no reset, restart or late sample
