"""Real packets through a plan applied by real agents: planned sFlow and mirror rates, no packet twice.

Every host is a network namespace with its own userspace ovs-vswitchd (one userspace datapath
per namespace) and its own agent, run as ``cosample agent apply`` inside it as on a real host:

    caD1 (VM1 10.213.0.1) --caDh1--+ caDs1: host s1, bridge cabr2, sFlow 1-in-8,
    caD2 (VM2 10.213.0.2) --caDh2--+   tc on caDh* ingress -> VXLAN devices toward s2 and s3
        caDs1 caDu2 10.213.2.1 --- eth0 in caDr2: host s2, br-phy cabp2 (10.213.2.2), bridge
                                   cabr3 with the agent's VXLAN port + drop flow, sFlow 1-in-1
        caDs1 caDu3 10.213.3.1 --- eth0 in caDr3 (10.213.3.2): a kernel VXLAN device ``vx``
                                   and a sniffer that records each mirrored packet's id
    root: collectors 10.213.9.1 (for s1, via PREFIXc) and 10.213.8.1 (for s2, via PREFIXc2)

VM1 sends K UDP packets to VM2, each carrying a unique id. Checked: s1's sFlow samples ~ K/8;
s2's sFlow samples of mirrored packets ~ K * 0.2 (s2 samples all it receives, and its drop flow
keeps the packets out of its bridge); ids reaching s3 ~ K * 0.3; the ids sampled at s2 and
received at s3 are disjoint and never repeated. Tolerance: each count within 5 binomial
standard deviations of K * planned share (a false alarm about once in 1.7 million runs per
count). Needs root (namespaces, userspace OVS); about 20 s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
from dataplane_rig import PORT, SENDER, agent_cli, collector_link, udp_payload_id, write_config

from cosample.agents.state import pair_vni
from cosample.dataplane.run import run
from cosample.lab.netns import Lab, disable_tx_offload, netns_available, silence_uplink
from cosample.lab.ovs import OvsInstance, ovs_available
from cosample.lab.sflow import SflowCollector

pytestmark = [pytest.mark.root, pytest.mark.slow]
PACKETS, PPS, SAMPLING = 12000, 8000, 8
SHARES = {"s2": 0.2, "s3": 0.3}
TOLERANCE_SD = 5.0

SNIFFER = r"""
import json, select, socket, struct, sys
device, port = sys.argv[1], int(sys.argv[2])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock.bind((device, 0))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
print("ready", flush=True)
ids = []
while True:
    ready, _, _ = select.select([sock, sys.stdin], [], [], 5.0)
    if sys.stdin in ready or not ready:
        break
    frame = sock.recv(2048)
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        continue
    udp = 14 + (frame[14] & 15) * 4
    if struct.unpack_from("!H", frame, udp + 2)[0] == port:
        ids.append(struct.unpack_from("!Q", frame, udp + 8)[0])
print(json.dumps(ids), flush=True)
"""


def dataplane_plan() -> dict:
    def host(role, ip, **extra):
        doc = {
            "role": role,
            "local_rate": 1.0,
            "sflow_sampling": 1,
            "mirrors": [],
            "receives": [],
            "tunnel_ip": ip,
        }
        doc.update(extra)
        return doc

    hosts = {
        "s1": host(
            "sender",
            "10.213.2.1",
            local_rate=1 / SAMPLING,
            sflow_sampling=SAMPLING,
            mirrors=[{"to": to, "rate": rate} for to, rate in sorted(SHARES.items())],
            bridge="cabr2",
            vm_ports=["caDh1", "caDh2"],
        ),
        "s2": host(
            "receiver",
            "10.213.2.2",
            bridge="cabr3",
            receives=[{"from": "s1", "rate": SHARES["s2"], "pps": 1.0}],
        ),
        "s3": host(
            "receiver", "10.213.3.2", receives=[{"from": "s1", "rate": SHARES["s3"], "pps": 1.0}]
        ),
    }
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    return {
        "format": "cosample.plan",
        "format_version": 1,
        "version": 1,
        "created": stamp(now - 60),
        "expires": stamp(now + 3600),
        "plan_id": "dataplane",
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
    with Lab.unique("ca") as lab:
        yield lab


def veth_between(
    host_ns: str,
    host_end: str,
    other_ns: str,
    address: str | None = None,
    host_address: str | None = None,
) -> None:
    """A veth with ``host_end`` in ``host_ns`` and ``eth0`` in ``other_ns`` (both go with them)."""
    run(
        [
            "ip",
            "-n",
            host_ns,
            "link",
            "add",
            host_end,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            other_ns,
        ]
    )
    for ns, name, addr in ((host_ns, host_end, host_address), (other_ns, "eth0", address)):
        if addr:
            run(["ip", "-n", ns, "addr", "add", addr, "dev", name])
        run(["ip", "-n", ns, "link", "set", name, "up"])
        disable_tx_offload(name, ns)


def neighbour_mac(ns: str, address: str) -> str | None:
    entries = json.loads(run(["ip", "-n", ns, "-j", "neigh", "show", address]).stdout or "[]")
    return entries[0].get("lladdr") if entries else None


def link_mac(ns: str, name: str) -> str:
    return json.loads(run(["ip", "-n", ns, "-j", "link", "show", name]).stdout)[0]["address"]


def run_rig(
    lab: Lab, tmp_path, packets: int, pps: int, size: int, underlay_mtu: int = 1500
) -> dict:
    """Apply the plan with real agents, send ``packets`` UDP packets of ``size`` payload bytes
    from VM1 to VM2; the ids sampled locally at s1, sampled at s2 and received at s3, s2's drop
    flow count, the s1 mirror devices' link statistics and s1's first ``apply`` output.
    ``underlay_mtu`` is the MTU of the underlay between s1 and s2 (both ends, and s2's br-phy)."""
    s1, s2, s3 = lab.namespace("Ds1"), lab.namespace("Dr2"), lab.namespace("Dr3")
    for vm in (1, 2):
        veth_between(s1, f"caDh{vm}", lab.namespace(f"D{vm}"), address=f"10.213.0.{vm}/24")
    veth_between(s1, "caDu2", s2, host_address="10.213.2.1/24")  # s2's eth0 goes into OVS
    run(["ip", "-n", s1, "link", "set", "caDu2", "mtu", str(underlay_mtu)])
    run(["ip", "-n", s2, "link", "set", "eth0", "mtu", str(underlay_mtu)])
    veth_between(s1, "caDu3", s3, address="10.213.3.2/24", host_address="10.213.3.1/24")
    run(["ip", "-n", s3, "route", "add", "default", "via", "10.213.3.1"])
    run(
        [
            "ip",
            "-n",
            s3,
            "link",
            "add",
            "vx",
            "type",
            "vxlan",
            "id",
            pair_vni("s1", "s3"),
            "dstport",
            "4789",
            "local",
            "10.213.3.2",
        ]
    )
    run(["ip", "-n", s3, "link", "set", "vx", "up"])
    collector_link(lab, f"{lab.prefix}c", s1, "10.213.9")
    collector_link(lab, f"{lab.prefix}c2", s2, "10.213.8")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(dataplane_plan()))
    with (
        OvsInstance(tmp_path / "ovs1", dummy=False, namespace=s1) as ovs1,
        OvsInstance(tmp_path / "ovs2", dummy=False, namespace=s2) as ovs2,
        SflowCollector(host="10.213.9.1") as sflow1,
        SflowCollector(host="10.213.8.1") as sflow2,
    ):
        ovs1.vsctl("add-br", "cabr2", "--", "set", "Bridge", "cabr2", "datapath_type=netdev")
        for vm in (1, 2):
            ovs1.vsctl("add-port", "cabr2", f"caDh{vm}")
        # s2: OVS's br-phy pattern, so that OVS itself terminates the mirror tunnel
        ovs2.vsctl("add-br", "cabp2", "--", "set", "Bridge", "cabp2", "datapath_type=netdev")
        ovs2.vsctl("add-port", "cabp2", "eth0")
        ovs2.vsctl("set", "Interface", "cabp2", f"mtu_request={underlay_mtu}")
        silence_uplink("eth0", s2)  # else s1 may learn eth0's MAC for 10.213.2.2 (ARP flux)
        ovs2.vsctl("add-br", "cabr3", "--", "set", "Bridge", "cabr3", "datapath_type=netdev")
        run(["ip", "-n", s2, "addr", "add", "10.213.2.2/24", "dev", "cabp2"])
        run(["ip", "-n", s2, "link", "set", "cabp2", "up"])
        ovs1.wait_for_ports("caDh1", "caDh2")
        ovs2.wait_for_ports("eth0")
        configs = {
            s2: write_config(
                tmp_path / "s2.toml",
                "s2",
                plan_path,
                ovs2,
                tmp_path / "state2",
                sflow2,
                "10.213.8.2",
            ),
            s1: write_config(
                tmp_path / "s1.toml",
                "s1",
                plan_path,
                ovs1,
                tmp_path / "state1",
                sflow1,
                "10.213.9.2",
            ),
        }
        applied = {}
        try:
            for ns, config in configs.items():  # the receiver first
                applied[ns] = agent_cli(lab, ns, "apply", "--once", "--config", config)
                assert "ok: plan version 1" in applied[ns]
                assert "0 command(s)" in agent_cli(lab, ns, "apply", "--config", config)
            run(
                lab.exec_argv(
                    f"{lab.prefix}D1",
                    [sys.executable, "-c", SENDER, "10.213.0.2", str(PORT + 1), "20", "100"],
                ),
                timeout=30,
            )  # ARP warm-up
            time.sleep(1.0)
            assert neighbour_mac(s1, "10.213.2.2") == link_mac(s2, "cabp2"), (
                "s1 must reach s2's tunnel address at the bridge's internal port"
            )
            sniffer = subprocess.Popen(
                lab.exec_argv(s3, [sys.executable, "-c", SNIFFER, "vx", str(PORT)]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert sniffer.stdout.readline().strip() == "ready"
            sflow1.clear()
            sflow2.clear()
            run(
                lab.exec_argv(
                    f"{lab.prefix}D1",
                    [
                        sys.executable,
                        "-c",
                        SENDER,
                        "10.213.0.2",
                        str(PORT),
                        str(packets),
                        str(pps),
                        str(size),
                    ],
                ),
                timeout=60,
            )
            time.sleep(1.5)  # sFlow datagrams are batched; let the last ones arrive
            at_s3 = json.loads(sniffer.communicate("stop\n", timeout=20)[0])
            dropped = ovs2.ofctl(
                "dump-flows",
                "unix:" + str(ovs2.directory / "cabr3.mgmt"),
                "cookie=0xc05a000000000000/0xffff000000000000",
            )
            links = json.loads(
                run(["ip", "-n", s1, "-j", "-s", "-d", "link", "show", "type", "vxlan"]).stdout
            )
        finally:
            for ns, config in configs.items():
                agent_cli(lab, ns, "remove", "--config", config)
    return {
        "local": [i for s in sflow1.snapshot() if (i := udp_payload_id(s.header)) is not None],
        "s2": [i for s in sflow2.snapshot() if (i := udp_payload_id(s.header)) is not None],
        "s3": at_s3,
        "dropped": int(dropped.split("n_packets=")[1].split(",")[0]),
        "links": links,
        "s1_apply": applied[s1],
    }


def test_planned_rates_on_real_traffic(lab, tmp_path):
    got = run_rig(lab, tmp_path, PACKETS, PPS, 40)
    local, at_s2, at_s3 = got["local"], got["s2"], got["s3"]
    print(
        f"\n{PACKETS} packets sent; s1 sFlow samples {len(local)} (planned "
        f"{PACKETS / SAMPLING:.0f}); s2 sampled {len(at_s2)} mirrored (planned "
        f"{PACKETS * SHARES['s2']:.0f}); s3 received {len(at_s3)} (planned "
        f"{PACKETS * SHARES['s3']:.0f}); in both: {len(set(at_s2) & set(at_s3))}"
    )
    assert within(len(local), PACKETS, 1 / SAMPLING)
    assert within(len(at_s2), PACKETS, SHARES["s2"])
    assert within(len(at_s3), PACKETS, SHARES["s3"])
    assert len(set(at_s2)) == len(at_s2) and len(set(at_s3)) == len(at_s3)
    assert not set(at_s2) & set(at_s3)  # exclusive shares: no packet mirrored twice
    assert got["dropped"] >= len(at_s2)  # s2's drop flow took every mirrored packet it sampled


#: UDP payload of a full-size packet: 1500-byte IP packets, 1514-byte frames on the VM port.
FULL_SIZE_PAYLOAD, FULL_SIZE_PACKETS, FULL_SIZE_PPS = 1472, 4000, 1000


@pytest.mark.parametrize("underlay_mtu", [1500, 1600])
def test_full_size_copies_need_underlay_room(lab, tmp_path, underlay_mtu):
    """Copies of full-size frames (1514 bytes; 1550-byte VXLAN packets): the mirror devices
    send them whatever their MTU, the 1500-byte underlay toward s3 fragments them and s3's
    kernel VXLAN device reassembles them: all arrive. s2's OVS VXLAN port (userspace datapath)
    does not pop fragmented tunnel packets: over a 1500-byte underlay none arrive there, and
    s1's agent says so; with 1600 bytes every planned copy arrives, and the agent is quiet
    about s2."""
    got = run_rig(
        lab,
        tmp_path,
        FULL_SIZE_PACKETS,
        FULL_SIZE_PPS,
        FULL_SIZE_PAYLOAD,
        underlay_mtu=underlay_mtu,
    )
    local, at_s2, at_s3 = got["local"], got["s2"], got["s3"]
    devices = {x["ifname"]: (x["mtu"], x["stats64"]["tx"]["packets"]) for x in got["links"]}
    print(
        f"\nunderlay s1-s2 MTU {underlay_mtu}: {FULL_SIZE_PACKETS} full-size packets sent; "
        f"s1 sFlow samples {len(local)}; s2 sampled {len(at_s2)} mirrored (planned "
        f"{FULL_SIZE_PACKETS * SHARES['s2']:.0f}; its drop flow took {got['dropped']}); s3 "
        f"received {len(at_s3)} (planned "
        f"{FULL_SIZE_PACKETS * SHARES['s3']:.0f}); mirror devices (MTU, tx packets): {devices}"
    )
    assert within(len(local), FULL_SIZE_PACKETS, 1 / SAMPLING)
    assert within(len(at_s3), FULL_SIZE_PACKETS, SHARES["s3"])  # kernel receiver: reassembled
    assert len(set(at_s3)) == len(at_s3) and not set(at_s2) & set(at_s3)
    warned = {
        peer: f"warning: mirror to {peer}: the underlay" in got["s1_apply"] for peer in ("s2", "s3")
    }
    assert warned["s3"]  # 1500 toward s3: its copies are fragmented (a kernel receiver copes)
    if underlay_mtu < 1550:
        assert warned["s2"] and "copies of frames over 1464 bytes" in got["s1_apply"]
        assert at_s2 == []  # every copy was fragmented, and OVS pops no fragment
    else:
        assert not warned["s2"]
        assert within(len(at_s2), FULL_SIZE_PACKETS, SHARES["s2"])
        assert len(set(at_s2)) == len(at_s2)
