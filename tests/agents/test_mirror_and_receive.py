"""Two hosts that each mirror a share of their VMs' traffic to the other and take the other's
copies, on real OVS, applied by real agents (issue 44: a plan may let a server send and receive).

Each host is a network namespace with its own userspace ovs-vswitchd: a bridge with two "VM"
ports, the agents' sFlow (A 1-in-2, B 1-in-3), tc mirrors on the VM ports into a VXLAN device
toward the other host, and the agents' VXLAN port + drop flow for the other's copies; the
tunnel addresses sit on a "br-phy" bridge, so that OVS itself terminates the copies that come
in (as in test_dataplane.py), while the host's own copies leave by the kernel's VXLAN device:

    VM a1 --+ bridge of A: sFlow 1-in-2, mirrors 30 % to B   A 10.233.0.1 (br-phy) --- underlay
    VM a2 --+   takes B's copies on its VXLAN port, drops     B 10.233.0.2 (br-phy) ---'
    VM b1 --+ bridge of B: sFlow 1-in-3, mirrors 25 % to A
    VM b2 --+   takes A's copies on its VXLAN port, drops
    root: a collector per host (10.234.1.1 for A, 10.234.2.1 for B)

VM a1 sends K UDP packets to a2, VM b1 K to b2, each with a unique id (A's and B's apart).
Checked, each count within 5 binomial standard deviations of its planned value: A samples K/2
of its own packets (no tunnel records); it samples the copies B mirrors to it at its own
1-in-2 (K x 0.25/2), all of them B's packets, each at most once, and never one of its own
(a copy taken in is never mirrored back: the tc filters sit on the VM ports only); likewise
for B (K/3 own, K x 0.3/3 of A's copies). Then the collector's estimator, fed both hosts'
datagrams with the plan, credits every copy to its sender (mirrored samples under A are the
copies B sampled) and estimates each host's K packets within its 95 % interval (widened by
the few packets not in the test: ARP). Needs root, namespaces and OVS; about 25 s.
"""

from __future__ import annotations

import json
import math
import sys
import time

import pytest
from dataplane_rig import PORT, SENDER, agent_cli, collector_link, udp_payload_id, write_config

from cosample.collector.attribution import build
from cosample.collector.estimate import Estimator
from cosample.dataplane.run import run
from cosample.lab.netns import Lab, netns_available, silence_uplink
from cosample.lab.ovs import OvsInstance, ovs_available
from cosample.lab.sflow import SflowCollector
from cosample.plan.document import parse_plan

pytestmark = [pytest.mark.root, pytest.mark.slow]
PACKETS, PPS = 8000, 4000
SAMPLING = {"A": 2, "B": 3}
SHARE = {"A": 0.3, "B": 0.25}  # of its own traffic each host mirrors to the other
OTHER = {"A": "B", "B": "A"}
TUNNEL = {"A": "10.233.0.1", "B": "10.233.0.2"}
VM_NET = {"A": "10.235.1", "B": "10.235.2"}
COLLECTOR_NET = {"A": "10.234.1", "B": "10.234.2"}
ID_BASE = {"A": 0, "B": 1_000_000}  # B's packets carry ids from a million on
TOLERANCE_SD = 5.0
#: The test's sender with the ids from a base (argument 5): the two hosts' packets apart.
SENDER_FROM = SENDER.replace('struct.pack("!Q", i)', 'struct.pack("!Q", base + i)').replace(
    "size = int(sys.argv[5]) if len(sys.argv) > 5 else 40", "size, base = 40, int(sys.argv[5])"
)


def plan(prefix: str) -> dict:
    hosts = {}
    for me in ("A", "B"):
        other = OTHER[me]
        hosts[me] = {
            "role": "sender",
            "local_rate": 1 / SAMPLING[me],
            "sflow_sampling": SAMPLING[me],
            "mirrors": [{"to": other, "rate": SHARE[me]}],
            "receives": [{"from": other, "rate": SHARE[other], "pps": 1.0}],
            "tunnel_ip": TUNNEL[me],
            "agent_ip": f"{COLLECTOR_NET[me]}.2",
            "bridge": f"{prefix}i{me}",
            "vm_ports": [f"{prefix}{me}1", f"{prefix}{me}2"],
        }
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    return {
        "format": "cosample.plan",
        "format_version": 1,
        "version": 1,
        "created": stamp(now - 60),
        "expires": stamp(now + 3600),
        "plan_id": "mirror-and-receive",
        "sflow": {"polling_s": 0},
        "hosts": hosts,
    }


def within(observed: int, trials: int, p: float) -> bool:
    return abs(observed - trials * p) <= TOLERANCE_SD * math.sqrt(trials * p * (1 - p))


@pytest.fixture
def lab():
    reason = ovs_available() or netns_available()
    if reason:
        pytest.skip(f"data-plane test needs root, namespaces and OVS: {reason}")
    with Lab.unique("mr") as lab:
        yield lab


def build_host(lab: Lab, me: str, ovs: OvsInstance) -> None:
    """A's (or B's) two VMs on its bridge, and its br-phy with the underlay port."""
    p, host = lab.prefix, f"{lab.prefix}h{me}"
    ovs.vsctl("add-br", f"{p}i{me}", "--", "set", "Bridge", f"{p}i{me}", "datapath_type=netdev")
    ovs.vsctl("add-br", f"{p}p{me}", "--", "set", "Bridge", f"{p}p{me}", "datapath_type=netdev")
    for vm in (1, 2):
        ovs.vsctl("add-port", f"{p}i{me}", f"{p}{me}{vm}")
    ovs.vsctl("add-port", f"{p}p{me}", f"{p}u{me}")
    silence_uplink(f"{p}u{me}", host)
    run(["ip", "-n", host, "addr", "add", f"{TUNNEL[me]}/24", "dev", f"{p}p{me}"])
    run(["ip", "-n", host, "link", "set", f"{p}p{me}", "up"])
    ovs.wait_for_ports(f"{p}{me}1", f"{p}{me}2", f"{p}u{me}")


def test_hosts_that_mirror_and_receive(lab, tmp_path):
    p = lab.prefix
    hosts = {me: lab.namespace(f"h{me}") for me in ("A", "B")}
    for me, host in hosts.items():
        for vm in (1, 2):
            lab.veth(
                f"{p}{me}{vm}",
                lab.namespace(f"{me}{vm}"),
                address=f"{VM_NET[me]}.{vm}/24",
                host_namespace=host,
            )
        collector_link(lab, f"{p}c{me}", host, COLLECTOR_NET[me])
    lab.veth(f"{p}uA", hosts["B"], peer=f"{p}uB", host_namespace=hosts["A"])  # the underlay
    document = plan(p)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(document))
    with (
        OvsInstance(tmp_path / "ovsA", dummy=False, namespace=hosts["A"]) as ovs_a,
        OvsInstance(tmp_path / "ovsB", dummy=False, namespace=hosts["B"]) as ovs_b,
        SflowCollector(host=f"{COLLECTOR_NET['A']}.1", keep_raw=True) as sflow_a,
        SflowCollector(host=f"{COLLECTOR_NET['B']}.1", keep_raw=True) as sflow_b,
    ):
        ovs = {"A": ovs_a, "B": ovs_b}
        sflow = {"A": sflow_a, "B": sflow_b}
        configs = {}
        for me in ("A", "B"):
            build_host(lab, me, ovs[me])
            configs[me] = write_config(
                tmp_path / f"{me}.toml",
                me,
                plan_path,
                ovs[me],
                tmp_path / f"state{me}",
                sflow[me],
                f"{COLLECTOR_NET[me]}.2",
            )
        try:
            for me in ("A", "B"):
                out = agent_cli(lab, hosts[me], "apply", "--once", "--config", configs[me])
                assert "ok: plan version 1" in out
            for me in ("A", "B"):  # converged: nothing left to do on either host
                assert "0 command(s)" in agent_cli(lab, hosts[me], "apply", "--config", configs[me])
            for me in ("A", "B"):  # ARP warm-up, VMs and tunnel addresses
                run(
                    lab.exec_argv(
                        f"{p}{me}1",
                        [
                            sys.executable,
                            "-c",
                            SENDER,
                            f"{VM_NET[me]}.2",
                            str(PORT + 1),
                            "20",
                            "100",
                        ],
                    ),
                    timeout=30,
                )
            run(lab.exec_argv(hosts["A"], ["ping", "-c", "2", "-W", "1", TUNNEL["B"]]), check=False)
            time.sleep(1.0)
            for me in ("A", "B"):
                sflow[me].clear()
            for me in ("A", "B"):
                run(
                    lab.exec_argv(
                        f"{p}{me}1",
                        [
                            sys.executable,
                            "-c",
                            SENDER_FROM,
                            f"{VM_NET[me]}.2",
                            str(PORT),
                            str(PACKETS),
                            str(PPS),
                            str(ID_BASE[me]),
                        ],
                    ),
                    timeout=60,
                )
            time.sleep(1.5)  # sFlow datagrams are batched: let the last ones arrive
            mirror_tx = {
                me: sum(
                    link["stats64"]["tx"]["packets"]
                    for link in json.loads(
                        run(
                            [
                                "ip",
                                "-n",
                                hosts[me],
                                "-j",
                                "-s",
                                "-d",
                                "link",
                                "show",
                                "type",
                                "vxlan",
                            ]
                        ).stdout
                    )
                )
                for me in ("A", "B")
            }
        finally:
            for me in ("A", "B"):
                agent_cli(lab, hosts[me], "remove", "--config", configs[me])
        samples = {me: sflow[me].snapshot() for me in ("A", "B")}
        datagrams = sorted(sflow["A"].raw_datagrams() + sflow["B"].raw_datagrams())

    def ids(me: str, tunnel: bool) -> list[int]:
        return [
            i
            for s in samples[me]
            if (s.vni is not None) == tunnel and (i := udp_payload_id(s.header)) is not None
        ]

    own = {me: ids(me, False) for me in ("A", "B")}
    copies = {me: ids(me, True) for me in ("A", "B")}
    print(
        f"\n{PACKETS} packets from each host's VM; mirror devices sent {mirror_tx}; "
        + "; ".join(
            f"{me} sampled {len(own[me])} own (planned {PACKETS / SAMPLING[me]:.0f}) and "
            f"{len(copies[me])} copies of {OTHER[me]}'s (planned "
            f"{PACKETS * SHARE[OTHER[me]] / SAMPLING[me]:.0f})"
            for me in ("A", "B")
        )
    )
    for me in ("A", "B"):
        other = OTHER[me]
        mine = range(ID_BASE[me], ID_BASE[me] + PACKETS)
        theirs = range(ID_BASE[other], ID_BASE[other] + PACKETS)
        assert all(i in mine for i in own[me])  # its sFlow on its own VMs' packets
        assert within(len(own[me]), PACKETS, 1 / SAMPLING[me])
        # the copies it takes are the other's packets, sampled at its own 1-in-N, once each
        assert copies[me] and all(i in theirs for i in copies[me])
        assert len(set(copies[me])) == len(copies[me])
        assert within(len(copies[me]), PACKETS, SHARE[other] / SAMPLING[me])
        # never mirrored again: what its mirror device sent is its own share (and a few ARP)
        assert within(mirror_tx[me], PACKETS, SHARE[me]) or (
            0 <= mirror_tx[me] - PACKETS * SHARE[me] <= 40
        )
    # the collector credits the copies to their senders and estimates both hosts
    estimator = Estimator(build(parse_plan(json.dumps(document).encode())), window_s=None)
    for when, data in datagrams:
        estimator.ingest(data, when)
    snapshot = estimator.snapshot()
    assert snapshot.dropped == {}
    for me in ("A", "B"):
        estimate = snapshot.servers[me]
        assert estimate.mirrored_samples >= len(copies[OTHER[me]])  # the other host's samples
        assert estimate.local_samples >= len(own[me])
        low, high = (bound * snapshot.window_s for bound in estimate.packets_per_s_ci95)
        slack = 0.02 * PACKETS  # ARP and the like: packets of the VMs not in the test
        assert low - slack <= PACKETS <= high + slack, (me, low, high)
