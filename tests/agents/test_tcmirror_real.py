"""The tc random mirror on real veth links: measured shares match the requested ones."""

from __future__ import annotations

import sys

import pytest

from cosample.dataplane.run import run
from cosample.dataplane.tcmirror import chain_filter_argvs, clsact_add_argv
from cosample.lab.netns import Lab, netns_available

REASON = netns_available()
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(REASON is not None, reason=f"real tc mirror: {REASON}"),
]

FRAMES = 4000
#: Send raw frames with an experimental EtherType so nothing answers or routes them.
SENDER = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
frame = b"\\xff" * 6 + b"\\x02\\x00\\x00\\x00\\x00\\x01" + b"\\x88\\xb5" + bytes(46)
for _ in range(int(sys.argv[1])):
    s.send(frame)
"""


def rx_packets(lab: Lab, namespace: str) -> int:
    argv = lab.exec_argv(namespace, ["cat", "/sys/class/net/eth0/statistics/rx_packets"])
    return int(run(argv).stdout)


def test_chain_mirrors_exclusive_shares_of_real_packets():
    shares = [0.30, 0.35]
    with Lab.unique("ccT") as lab:
        source = lab.namespace("src")
        sinks = [lab.namespace("k1"), lab.namespace("k2")]
        port = lab.veth(f"{lab.prefix}src", source)
        targets = [lab.veth(f"{lab.prefix}k1", sinks[0]), lab.veth(f"{lab.prefix}k2", sinks[1])]
        run(clsact_add_argv(port))
        for argv in chain_filter_argvs(port, targets, shares, first_prio=10):
            run(argv)
        before = [rx_packets(lab, sink) for sink in sinks]
        run(lab.exec_argv(source, [sys.executable, "-c", SENDER, str(FRAMES)]), timeout=30)
        counts = [rx_packets(lab, sink) - b for sink, b in zip(sinks, before)]
    measured = [c / FRAMES for c in counts]
    # binomial sd at 4000 frames is < 0.8 points; 4 points is > 5 sd, plus a few stray frames.
    assert measured == pytest.approx(shares, abs=0.04)
    assert sum(counts) <= FRAMES + 10  # exclusive: never more copies than frames
