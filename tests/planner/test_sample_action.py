"""Beyond sFlow's 1-in-N: does OVS's per-flow ``sample`` action draw any probability here?

Issue 24, item 4, a functional probe only (no cost measured): one userspace ovs-vswitchd in a
namespace ``cqh``, "VM" A (10.217.0.1) and B (10.217.0.2) on bridge ``cqi``; the flow of A's
UDP packets to PORT carries ``sample(probability=P)`` towards a ``Flow_Sample_Collector_Set``
exporting IPFIX (to the namespace's loopback: nothing needs to listen, OVS counts what it
sampled). A sends N packets; ``ovs-ofctl dump-ipfix-flow`` must report about ``N P/65535``
sampled (binomial, 5 standard deviations), a share no 1-in-N gives. Needs root; a few seconds.
"""

from __future__ import annotations

import re
import sys
import time

import pytest

from cosample.dataplane.run import run
from cosample.lab.netns import Lab
from cosample.lab.ovs import OvsInstance

pytestmark = [pytest.mark.root, pytest.mark.slow]
PACKETS, PPS, PORT = 3000, 3000, 9978
PROBABILITY = 26214  # of 65535: 0.4, between 1-in-2 and 1-in-3
ADDRESS = {"a": "10.217.0.1", "b": "10.217.0.2"}

SENDER = r"""
import socket, sys, time
dst, port, count, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic()
for i in range(count):
    sock.sendto(i.to_bytes(8, "big") + b"sample-action", (dst, port))
    delay = start + (i + 1) / pps - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""


@pytest.fixture
def lab(dataplane):
    with Lab(prefix="cq") as lab:
        yield lab


def sampled_packets(ovs: OvsInstance, bridge: str) -> int:
    """The collector set's ``sampled pkts`` from ``ovs-ofctl dump-ipfix-flow``."""
    text = ovs.ofctl("dump-ipfix-flow", bridge)
    found = re.search(r"sampled pkts=(\d+)", text)
    assert found, text
    return int(found.group(1))


def test_the_sample_action_draws_a_probability_no_interval_gives(lab, tmp_path):
    host = lab.namespace("h")
    for name in ("a", "b"):
        lab.veth(f"cq{name}", lab.namespace(name), address=f"{ADDRESS[name]}/24", host_namespace=host)
    with OvsInstance(tmp_path / "ovs", dummy=False, namespace=host) as ovs:
        ovs.vsctl("add-br", "cqi", "--", "set", "bridge", "cqi", "datapath_type=netdev",
                  "--", "add-port", "cqi", "cqa", "--", "add-port", "cqi", "cqb")
        ovs.vsctl("--", "--id=@br", "get", "Bridge", "cqi",
                  "--", "--id=@i", "create", "IPFIX", 'targets="127.0.0.1:4739"',
                  "--", "create", "Flow_Sample_Collector_Set", "id=7", "bridge=@br", "ipfix=@i")
        ovs.ofctl("add-flow", "cqi",
                  f"priority=10,udp,in_port=cqa,tp_dst={PORT},actions=sample(probability="
                  f"{PROBABILITY},collector_set_id=7,obs_domain_id=1,obs_point_id=1),NORMAL")
        ovs.wait_for_ports("cqa", "cqb")
        for name, peer in (("a", "b"), ("b", "a")):  # ARP and MAC learning, on another port
            run(lab.exec_argv(f"cq{name}", [sys.executable, "-c", SENDER, ADDRESS[peer],
                                            str(PORT + 1), "20", "100"]), timeout=30)
        time.sleep(0.5)
        before = sampled_packets(ovs, "cqi")
        run(lab.exec_argv("cqa", [sys.executable, "-c", SENDER, ADDRESS["b"], str(PORT),
                                  str(PACKETS), str(PPS)]), timeout=30)
        time.sleep(1.0)
        sampled = sampled_packets(ovs, "cqi") - before
    share = PROBABILITY / 65535
    print(f"sample action: {sampled} of {PACKETS} packets sampled, expected {PACKETS * share:.0f}")
    spread = 5 * (PACKETS * share * (1 - share)) ** 0.5
    assert abs(sampled - PACKETS * share) <= spread, (sampled, PACKETS * share)
    assert abs(sampled / PACKETS - 1 / 2) > 0.05 and abs(sampled / PACKETS - 1 / 3) > 0.02
