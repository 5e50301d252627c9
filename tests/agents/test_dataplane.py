"""Real packets through a plan applied by the agent: sFlow and mirror rates as planned, no packet twice.

Host s1 is the network namespace ``caDs1``: its own userspace ovs-vswitchd (one userspace
datapath per namespace) with bridge ``cabr2``, and the agent, run as ``cosample agent apply``
inside it like on a real host. Two VM namespaces hang off the bridge; two receiver namespaces
(s2, s3) are reached over veth links and terminate the mirror tunnels in a kernel VXLAN device;
the sFlow collector listens in the root namespace::

    caD1 (VM1 10.213.0.1) --caDh1--+                  +--caDu2 10.213.2.1 -- caDr2 (s2 10.213.2.2, vx)
                                   cabr2 (sFlow 1-in-8)
    caD2 (VM2 10.213.0.2) --caDh2--+  tc on caDh* ingress -> VXLAN devices to s2 and s3
                                                      +--caDu3 10.213.3.1 -- caDr3 (s3 10.213.3.2, vx)
    root: collector 10.213.9.1 --caDc/caDcp-- 10.213.9.2 (s1's sFlow agent address)

VM1 sends K UDP packets, each carrying a unique id, to VM2. The collector counts sFlow samples
of them; a sniffer in each receiver namespace records the ids arriving through its tunnel.
Tolerance: every count within 5 binomial standard deviations of K * planned share (a false
alarm about once in 1.7 million runs per count); ids at s2 and s3 are disjoint and never
repeated. Needs root (namespaces, userspace OVS); about 15 s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from cosample.agents.state import pair_vni
from cosample.lab.netns import Lab, disable_tx_offload, netns_available
from cosample.lab.ovs import OvsInstance, ovs_available
from cosample.lab.run import run
from cosample.lab.sflow import SflowCollector

pytestmark = [pytest.mark.root, pytest.mark.slow]
PACKETS, PPS, PORT, SAMPLING = 12000, 8000, 9999, 8
SHARES = {"s2": 0.2, "s3": 0.3}
TOLERANCE_SD = 5.0

SENDER = r"""
import socket, struct, sys, time
dst, port, count, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic()
for i in range(count):
    sock.sendto(struct.pack("!Q", i) + b"cosample" * 4, (dst, port))
    if i % 100 == 99:
        delay = start + (i + 1) / pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
"""

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
    ihl = (frame[14] & 15) * 4
    udp = 14 + ihl
    if struct.unpack_from("!H", frame, udp + 2)[0] == port:
        ids.append(struct.unpack_from("!Q", frame, udp + 8)[0])
print(json.dumps(ids), flush=True)
"""


def plan_for_dataplane(collector: str) -> dict:
    def host(role, ip, **extra):
        doc = {"role": role, "local_rate": 1.0, "sflow_sampling": 1, "mirrors": [],
               "receives": [], "tunnel_ip": ip}
        doc.update(extra)
        return doc
    hosts = {
        "s1": host("sender", "10.213.2.1", local_rate=1 / SAMPLING, sflow_sampling=SAMPLING,
                   mirrors=[{"to": to, "rate": rate} for to, rate in sorted(SHARES.items())],
                   bridge="cabr2", vm_ports=["caDh1", "caDh2"]),
        "s2": host("receiver", "10.213.2.2",
                   receives=[{"from": "s1", "rate": SHARES["s2"], "pps": 1.0}]),
        "s3": host("receiver", "10.213.3.2",
                   receives=[{"from": "s1", "rate": SHARES["s3"], "pps": 1.0}]),
    }
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    return {"format": "cosample.plan", "format_version": 1, "version": 1,
            "created": stamp(now - 60), "expires": stamp(now + 3600), "plan_id": "dataplane",
            "sflow": {"collector": collector, "agent": "10.213.9.2", "polling_s": 0},
            "hosts": hosts}


def udp_dst(frame: bytes) -> int | None:
    """UDP destination port of an Ethernet/IPv4/UDP frame header (as sFlow reports it)."""
    if len(frame) < 38:
        return None
    offset = 14 + (frame[14] & 15) * 4
    return int.from_bytes(frame[offset + 2:offset + 4], "big") if len(frame) >= offset + 4 \
        else None


def within(observed: int, trials: int, p: float) -> bool:
    return abs(observed - trials * p) <= TOLERANCE_SD * math.sqrt(trials * p * (1 - p))


class NamespacedOvs(OvsInstance):
    """A private OVS whose ovs-vswitchd (and so its userspace datapath) lives in ``namespace``."""

    def __init__(self, directory, namespace: str) -> None:
        super().__init__(directory, dummy=False)
        self.namespace = namespace

    def start_vswitchd(self) -> None:
        run(["ip", "netns", "exec", self.namespace, "ovs-vswitchd", self.remote,
             f"--pidfile={self._path('ovs-vswitchd.pid')}",
             f"--unixctl={self._path('ovs-vswitchd.ctl')}",
             f"--log-file={self._path('ovs-vswitchd.log')}", "--detach", "--disable-system"],
            timeout=self.timeout, env=self._env())


@pytest.fixture
def lab():
    reason = ovs_available() or netns_available()
    if reason:
        pytest.skip(f"data-plane test needs root, namespaces and OVS: {reason}")
    with Lab(prefix="ca") as lab:
        yield lab


def veth_between(host_ns: str, host_end: str, other_ns: str, address: str | None = None,
                 host_address: str | None = None) -> None:
    """A veth with ``host_end`` in ``host_ns`` and ``eth0`` in ``other_ns`` (both go with them)."""
    run(["ip", "-n", host_ns, "link", "add", host_end, "type", "veth", "peer", "name", "eth0",
         "netns", other_ns])
    for ns, name, addr in ((host_ns, host_end, host_address), (other_ns, "eth0", address)):
        if addr:
            run(["ip", "-n", ns, "addr", "add", addr, "dev", name])
        run(["ip", "-n", ns, "link", "set", name, "up"])
        disable_tx_offload(name, ns)


def agent_cli(lab: Lab, host_ns: str, *args: str) -> str:
    result = run(lab.exec_argv(host_ns, [sys.executable, "-m", "cosample", "agent", *args]),
                 timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_planned_rates_on_real_traffic(lab, tmp_path):
    host = lab.namespace("Ds1")
    for vm in (1, 2):
        veth_between(host, f"caDh{vm}", lab.namespace(f"D{vm}"), address=f"10.213.0.{vm}/24")
    receivers = {}
    for k, name in ((2, "s2"), (3, "s3")):
        ns = lab.namespace(f"Dr{k}")
        veth_between(host, f"caDu{k}", ns, address=f"10.213.{k}.2/24",
                     host_address=f"10.213.{k}.1/24")
        run(["ip", "-n", ns, "route", "add", "default", "via", f"10.213.{k}.1"])
        run(["ip", "-n", ns, "link", "add", "vx", "type", "vxlan", "id", pair_vni("s1", name),
             "dstport", "4789", "local", f"10.213.{k}.2"])
        run(["ip", "-n", ns, "link", "set", "vx", "up"])
        receivers[name] = ns
    lab.veth("caDc", host, peer="caDcp", address="10.213.9.2/24")
    run(["ip", "addr", "add", "10.213.9.1/24", "dev", "caDc"])
    with NamespacedOvs(tmp_path / "ovs", host) as ovs, \
            SflowCollector(host="10.213.9.1") as collector:
        ovs.vsctl("add-br", "cabr2", "--", "set", "Bridge", "cabr2", "datapath_type=netdev")
        for vm in (1, 2):
            ovs.vsctl("add-port", "cabr2", f"caDh{vm}")
        ovs.wait_for_ports("caDh1", "caDh2")
        plan_path, config_path = tmp_path / "plan.json", tmp_path / "agent.toml"
        plan_path.write_text(json.dumps(plan_for_dataplane(collector.target)))
        config_path.write_text(f'host = "s1"\nplan = "{plan_path}"\novsdb = "{ovs.remote}"\n'
                               f'state_dir = "{tmp_path / "state"}"\n')
        try:
            output = agent_cli(lab, host, "apply", "--once", "--config", str(config_path))
            assert "ok: plan version 1" in output
            assert "0 command(s)" in agent_cli(lab, host, "apply", "--config", str(config_path))
            run(lab.exec_argv("caD1", [sys.executable, "-c", SENDER, "10.213.0.2",
                                       str(PORT + 1), "20", "100"]), timeout=30)  # ARP warm-up
            sniffers = {name: subprocess.Popen(
                lab.exec_argv(ns, [sys.executable, "-c", SNIFFER, "vx", str(PORT)]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for name, ns in receivers.items()}
            for sniffer in sniffers.values():
                assert sniffer.stdout.readline().strip() == "ready"
            collector.clear()
            run(lab.exec_argv("caD1", [sys.executable, "-c", SENDER, "10.213.0.2", str(PORT),
                                       str(PACKETS), str(PPS)]), timeout=60)
            time.sleep(1.5)  # sFlow datagrams are batched; let the last ones arrive
            ids = {name: json.loads(sniffer.communicate("stop\n", timeout=20)[0])
                   for name, sniffer in sniffers.items()}
        finally:
            agent_cli(lab, host, "remove", "--config", str(config_path))
    samples = [s for s in collector.snapshot()
               if s.src_ip == "10.213.0.1" and s.ip_protocol == 17 and udp_dst(s.header) == PORT]
    counts = {name: len(got) for name, got in ids.items()}
    print(f"\n{PACKETS} packets: sFlow samples {len(samples)} (planned {PACKETS / SAMPLING:.0f}), "
          f"mirrored {counts} (planned "
          f"{ {name: PACKETS * share for name, share in SHARES.items()} })")
    assert all(s.sampling_rate == SAMPLING for s in samples)
    assert within(len(samples), PACKETS, 1 / SAMPLING)
    for name, share in SHARES.items():
        assert within(counts[name], PACKETS, share), (name, counts[name])
        assert len(set(ids[name])) == len(ids[name])  # no packet twice through one tunnel
    assert not set(ids["s2"]) & set(ids["s3"])  # exclusive shares: no packet to both targets
    assert sum(counts.values()) <= PACKETS
