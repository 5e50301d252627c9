"""Beyond sFlow's 1-in-N: does OVS's per-flow ``sample`` action draw any probability here?

Issue 24, item 4, a functional probe only (no cost measured): one userspace ovs-vswitchd in a
namespace ``cqh``, "VM" A (10.217.0.1) and B (10.217.0.2) on bridge ``cqi``; the flow of A's
UDP packets to PORT carries ``sample(probability=P)`` towards a ``Flow_Sample_Collector_Set``
exporting IPFIX (to the namespace's loopback: nothing needs to listen, OVS counts what it
sampled). A sends N packets; ``ovs-ofctl dump-ipfix-flow`` must report about ``N P/65535``
sampled (binomial, 5 standard deviations), a share no 1-in-N gives. Needs root; a few seconds.

The second test puts the agents' tc random mirror on the same port and decodes, with tshark, the
IPFIX records of the samples and the mirrored copies: every packet has its own UDP source port,
so the packets both drew are counted. They are about ``N p m``: the sample action draws apart
from the tc chain, as sFlow does (local and mirrored shares overlap, ``l + m - l m``), not
exclusively as the chain's own filters do.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_for

from cosample.dataplane.run import run
from cosample.dataplane.tcmirror import clsact_add_argv, mirror_filter_argv
from cosample.lab.netns import Lab
from cosample.lab.ovs import OvsInstance

pytestmark = [pytest.mark.root, pytest.mark.slow]
PACKETS, PPS, PORT = 3000, 3000, 9978
PROBABILITY = 26214  # of 65535: 0.4, between 1-in-2 and 1-in-3
COOKIE = 0x5A  # the sample flow's, to read its n_packets
MIRROR_SHARE, IPFIX_PORT = 0.3, 4739
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


IPFIX_SINK = r"""
import socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", int(sys.argv[1])))
print("bound", flush=True)
time.sleep(120)
"""
#: One packet per UDP source port (``base + i``), so both samplers' records name the packet.
PER_PORT_SENDER = r"""
import socket, sys, time
dst, port, base, count, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
start = time.monotonic()
for i in range(count):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("", base + i))
        sock.sendto(b"sample-and-mirror", (dst, port))
    delay = start + (i + 1) / pps - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""


@pytest.fixture
def lab(dataplane):
    with Lab.unique("cq") as lab:
        yield lab


def sampled_packets(ovs: OvsInstance, bridge: str) -> int:
    """The collector set's ``sampled pkts`` from ``ovs-ofctl dump-ipfix-flow``."""
    text = ovs.ofctl("dump-ipfix-flow", bridge)
    found = re.search(r"sampled pkts=(\d+)", text)
    assert found, text
    return int(found.group(1))


def settled_counts(ovs: OvsInstance, bridge: str, cookie: int) -> tuple[int, int]:
    """The packets that went through the flow ``cookie`` (its ``n_packets``) and the collector
    set's sampled packets, once no packet is in flight: the same over a full revalidation
    cycle (``revalidator/wait``: the datapath's statistics pushed to the OpenFlow flow)."""
    seen: list[tuple[int, int]] = []

    def settled() -> tuple[int, int] | None:
        ovs.appctl("revalidator/wait")
        flows = ovs.ofctl("dump-flows", bridge, f"cookie={cookie:#x}/-1")
        found = re.search(r"n_packets=(\d+)", flows)
        assert found, flows
        seen.append((int(found.group(1)), sampled_packets(ovs, bridge)))
        return seen[-1] if len(seen) > 1 and seen[-1] == seen[-2] else None

    return wait_for(settled, timeout_s=30)


def test_the_sample_action_draws_a_probability_no_interval_gives(lab, tmp_path):
    host = lab.namespace("h")
    for name in ("a", "b"):
        lab.veth(
            f"cq{name}", lab.namespace(name), address=f"{ADDRESS[name]}/24", host_namespace=host
        )
    with OvsInstance(tmp_path / "ovs", dummy=False, namespace=host) as ovs:
        ovs.vsctl(
            "add-br",
            "cqi",
            "--",
            "set",
            "bridge",
            "cqi",
            "datapath_type=netdev",
            "--",
            "add-port",
            "cqi",
            "cqa",
            "--",
            "add-port",
            "cqi",
            "cqb",
        )
        ovs.vsctl(
            "--",
            "--id=@br",
            "get",
            "Bridge",
            "cqi",
            "--",
            "--id=@i",
            "create",
            "IPFIX",
            'targets="127.0.0.1:4739"',
            "--",
            "create",
            "Flow_Sample_Collector_Set",
            "id=7",
            "bridge=@br",
            "ipfix=@i",
        )
        ovs.ofctl(
            "add-flow",
            "cqi",
            f"cookie={COOKIE:#x},priority=10,udp,in_port=cqa,tp_dst={PORT},"
            f"actions=sample(probability="
            f"{PROBABILITY},collector_set_id=7,obs_domain_id=1,obs_point_id=1),NORMAL",
        )
        ovs.wait_for_ports("cqa", "cqb")
        for name, peer in (("a", "b"), ("b", "a")):  # ARP and MAC learning, on another port
            run(
                lab.exec_argv(
                    f"{lab.prefix}{name}",
                    [sys.executable, "-c", SENDER, ADDRESS[peer], str(PORT + 1), "20", "100"],
                ),
                timeout=30,
            )
        before = settled_counts(ovs, "cqi", COOKIE)
        run(
            lab.exec_argv(
                f"{lab.prefix}a",
                [sys.executable, "-c", SENDER, ADDRESS["b"], str(PORT), str(PACKETS), str(PPS)],
            ),
            timeout=30,
        )
        after = settled_counts(ovs, "cqi", COOKIE)
    # the draw is over the packets that went through the flow: a userspace OVS starved of CPU
    # loses some of A's packets before any flow sees them
    passed, sampled = after[0] - before[0], after[1] - before[1]
    share = PROBABILITY / 65535
    print(
        f"sample action: {sampled} of the {passed} packets through the flow ({PACKETS} sent) "
        f"sampled, expected {passed * share:.0f}"
    )
    assert passed >= PACKETS // 2, (passed, PACKETS)  # enough draws to tell the shares apart
    spread = 5 * (passed * share * (1 - share)) ** 0.5
    assert abs(sampled - passed * share) <= spread, (sampled, passed, passed * share)
    assert abs(sampled / passed - 1 / 2) > 0.05 and abs(sampled / passed - 1 / 3) > 0.02


def source_ports(capture: Path, *extra: str, field: str = "udp.srcport") -> list[int]:
    """Every ``field`` value tshark decodes from ``capture`` (one per record)."""
    out = run(
        ["tshark", "-r", str(capture), *extra, "-T", "fields", "-e", field], timeout=60
    ).stdout
    return [int(value) for line in out.split() for value in line.split(",") if value]


def start_capture(lab: Lab, namespace: str, device: str, path: Path, *expression: str):
    process = subprocess.Popen(
        lab.exec_argv(namespace, ["tcpdump", "-i", device, "-U", "-w", str(path), *expression]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    process.stderr.readline()  # "listening on ...": the capture is open
    return process


def stop_capture(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def test_the_sample_action_draws_independently_of_the_tc_mirror(lab, tmp_path):
    count, base = 2000, 20000
    host = lab.namespace("h")
    for name in ("a", "b"):
        lab.veth(
            f"cq{name}", lab.namespace(name), address=f"{ADDRESS[name]}/24", host_namespace=host
        )
    lab.veth("cqs", lab.namespace("s"), host_namespace=host)  # the mirror's sink
    with OvsInstance(tmp_path / "ovs", dummy=False, namespace=host) as ovs:
        ovs.vsctl(
            "add-br",
            "cqi",
            "--",
            "set",
            "bridge",
            "cqi",
            "datapath_type=netdev",
            "--",
            "add-port",
            "cqi",
            "cqa",
            "--",
            "add-port",
            "cqi",
            "cqb",
        )
        ovs.vsctl(
            "--",
            "--id=@br",
            "get",
            "Bridge",
            "cqi",
            "--",
            "--id=@i",
            "create",
            "IPFIX",
            f'targets="127.0.0.1:{IPFIX_PORT}"',
            "--",
            "create",
            "Flow_Sample_Collector_Set",
            "id=7",
            "bridge=@br",
            "ipfix=@i",
        )
        ovs.ofctl(
            "add-flow",
            "cqi",
            f"priority=10,udp,in_port=cqa,tp_dst={PORT},actions=sample(probability="
            f"{PROBABILITY},collector_set_id=7,obs_domain_id=1,obs_point_id=1),NORMAL",
        )
        ovs.wait_for_ports("cqa", "cqb")
        run(clsact_add_argv("cqa", netns=host))
        run(mirror_filter_argv("cqa", "cqs", MIRROR_SHARE, prio=7, netns=host))
        for name, peer in (("a", "b"), ("b", "a")):  # ARP and MAC learning, on another port
            run(
                lab.exec_argv(
                    f"{lab.prefix}{name}",
                    [sys.executable, "-c", SENDER, ADDRESS[peer], str(PORT + 1), "20", "100"],
                ),
                timeout=30,
            )
        # a socket that only exists: with no listener, each ICMP "port unreachable" makes OVS's
        # next send on its connected socket fail (ECONNREFUSED), losing every other message
        sink = subprocess.Popen(
            lab.exec_argv(host, [sys.executable, "-c", IPFIX_SINK, str(IPFIX_PORT)]),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        sink.stdout.readline()  # bound
        captures = [
            sink,
            start_capture(lab, host, "lo", tmp_path / "ipfix.pcap", "udp", "port", str(IPFIX_PORT)),
            start_capture(
                lab, host, "cqs", tmp_path / "mirror.pcap", "udp", "dst", "port", str(PORT)
            ),
        ]
        try:
            run(
                lab.exec_argv(
                    f"{lab.prefix}a",
                    [
                        sys.executable,
                        "-c",
                        PER_PORT_SENDER,
                        ADDRESS["b"],
                        str(PORT),
                        str(base),
                        str(count),
                        "1000",
                    ],
                ),
                timeout=60,
            )
            time.sleep(1.0)
        finally:
            for process in captures:
                stop_capture(process)
        counted = sampled_packets(ovs, "cqi")
    sampled = source_ports(
        tmp_path / "ipfix.pcap", "-d", f"udp.port=={IPFIX_PORT},cflow", field="cflow.srcport"
    )
    mirrored = source_ports(tmp_path / "mirror.pcap")
    sampled_set, mirrored_set = set(sampled) & set(range(base, base + count)), set(mirrored)
    both = len(sampled_set & mirrored_set)
    p, m = PROBABILITY / 65535, MIRROR_SHARE
    print(
        f"of {count} packets: sampled {len(sampled_set)} (OVS counted {counted}), mirrored "
        f"{len(mirrored_set)}, both {both}; independent draws give {count * p * m:.0f}"
    )
    assert len(sampled_set) == len(sampled) == counted  # tshark decodes one record per sample
    for observed, share in ((len(sampled_set), p), (len(mirrored_set), m), (both, p * m)):
        assert abs(observed - count * share) <= 5 * (count * share * (1 - share)) ** 0.5
    assert both > 0.5 * count * p * m  # exclusive draws would give none
