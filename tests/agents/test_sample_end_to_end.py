"""The ``sample`` local mechanism end to end on real parts (issue 24, item 4).

A description gives server s1 an ``alpha_sample`` and an ``observation_domain``, no mirror room
(``mirror_cap_bytes_per_s: 0``) and a capacity that leaves it a local share of 0.4; ``cosample
plan`` (a real process) plans it with the ``sample`` mechanism at some probability P/65535
(asserted, not assumed); ``cosample agent sign`` signs the plan; in a namespace of its own a
userspace ovs-vswitchd carries s1's bridge with two "VM" ports; the real collector daemon
(``cosample collector run --ipfix`` with the signed plan and its public key) listens on s1's
tunnel address there **before** the agent creates the exporter (OVS sends its templates only
at the start and every 600 s), so it is also what stays bound at the exporter's connected UDP
target; ``cosample agent apply --once`` with the public key converges the signed plan; VM A
sends PACKETS UDP packets to VM B through the bridge. Then the collector's estimate of s1's
packets is the N packets that met the agents' sample flow (its OpenFlow counter: the PACKETS,
the MAC-learning packets, B's ICMP errors) within 4.5 binomial standard deviations
(``sqrt(N (1-p) / p)``), its sampled
count equals OVS's own (``dump-ipfix-flow``) and tshark's decoding of the same IPFIX
(``packetDeltaCount / (65535 // P)`` summed), every record in s1's domain with the observation
point P, and no IPFIX message dropped. Then the collector is restarted on the same
``--state-dir`` and VM A sends PACKETS more: OVS sends no templates for 600 s, so the restarted
collector reads these records only with the templates it saved (``collector/ipfixtemplates.py``;
with its ``ipfix`` folder removed it counted none), and its estimate is within the same
tolerance of the datagrams VM B received (bound to the port: no ICMP errors either). Needs
root, namespaces, OVS, tcpdump, tshark; names randomised per run (no lock); about 25 s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from collector_daemon import Daemon
from waiting import wait_for

from cosample.agents.sample import SAMPLE_COOKIE
from cosample.dataplane.ipfix import IPFIX_PORT, SAMPLE_PROBABILITY_SCALE
from cosample.dataplane.run import run
from cosample.lab.netns import Lab
from cosample.lab.ovs import OvsInstance

pytestmark = [pytest.mark.root, pytest.mark.slow]

PACKETS, PPS, FLOWS, PORT = 4000, 1000, 4, 9977
TUNNEL, DOMAIN = "10.222.0.1", 0x0ADE0001  # s1's tunnel (and agent) address; its IPFIX domain
VM = {"a": "10.223.0.1", "b": "10.223.0.2"}

#: Counts the datagrams to its port; prints the count 3 s after the last one (60 s at most).
SINK = r"""
import socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((sys.argv[1], int(sys.argv[2])))
print("bound", flush=True)
count, deadline = 0, time.monotonic() + 60
sock.settimeout(30)
while time.monotonic() < deadline:
    try:
        sock.recv(2048)
    except socket.timeout:
        break
    count += 1
    sock.settimeout(3)
print(count, flush=True)
"""
SENDER = r"""
import socket, sys, time
dst, port, count, pps, flows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(flows)]
start = time.monotonic()
for i in range(count):
    socks[i % flows].sendto(b"sample-e2e" + bytes(i % flows), (dst, port))
    delay = start + (i + 1) / pps - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""


def description(bridge: str, ports: list[str]) -> dict:
    """s1 sends 2,000 pps to s2; capacity 2,400 at alpha_sample 0.5 leaves it a local share of
    0.4 and no mirror room; s2 has no room either. IPFIX to s1's own tunnel address."""
    return {
        "name": "e2esample",
        "cost": {"alpha": 1.54, "beta": 0.46},
        "ipfix": {
            "collector": f"{TUNNEL}:{IPFIX_PORT}",
            "cache_active_timeout_s": 1,
            "cache_max_flows": 64,
        },
        "servers": [
            {
                "name": "s1",
                "capacity_pps": 2400,
                "alpha_sample": 0.5,
                "observation_domain": DOMAIN,
                "tunnel_ip": TUNNEL,
                "bridge": bridge,
                "vm_ports": ports,
                "packet_bytes": 100,
                "mirror_cap_bytes_per_s": 0,
            },
            {"name": "s2", "capacity_pps": 2000, "tunnel_ip": "10.222.0.2"},
        ],
        "traffic_pps": {"s1": {"s2": 2000}},
    }


def cosample(*args: str, prefix: tuple[str, ...] = ()) -> str:
    result = run([*prefix, sys.executable, "-m", "cosample", *args], timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def tshark_records(capture: Path) -> list[tuple[int, int, int]]:
    """(domain, observation point, packetDeltaCount) of every data record tshark decodes."""
    out = run(
        [
            "tshark",
            "-r",
            str(capture),
            "-d",
            f"udp.port=={IPFIX_PORT},cflow",
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "occurrence=a",
            "-e",
            "cflow.od_id",
            "-e",
            "cflow.observation_point_id",
            "-e",
            "cflow.packets",
        ],
        timeout=60,
    ).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return [
        (int(domain), int(point), int(packets))
        for row in rows
        if row[2]
        for domain, point, packets in zip(*(cell.split(",") for cell in row))
    ]


@pytest.fixture
def lab(dataplane):
    with Lab.unique("ce") as lab:
        yield lab


def test_a_planned_sample_host_is_estimated_from_its_ipfix(lab, tmp_path):
    p = lab.prefix
    host = lab.namespace("h")
    vms = {name: lab.namespace(name) for name in VM}
    for namespace in vms.values():  # no IPv6 chatter: the bridge takes in only what we send
        for scope in ("all", "default"):
            run(
                lab.exec_argv(
                    namespace, ["sysctl", "-q", "-w", f"net.ipv6.conf.{scope}.disable_ipv6=1"]
                )
            )
    ports = [
        lab.veth(f"{p}{name}", vms[name], address=f"{VM[name]}/24", host_namespace=host)
        for name in VM
    ]
    mac = {
        name: run(lab.exec_argv(vms[name], ["cat", "/sys/class/net/eth0/address"])).stdout.strip()
        for name in VM
    }
    for name, peer in (("a", "b"), ("b", "a")):  # no ARP either (UDP alone re-probes)
        run(
            lab.exec_argv(
                vms[name],
                [
                    "ip",
                    "neigh",
                    "replace",
                    VM[peer],
                    "lladdr",
                    mac[peer],
                    "dev",
                    "eth0",
                    "nud",
                    "permanent",
                ],
            )
        )
    run(["ip", "-n", host, "addr", "add", f"{TUNNEL}/32", "dev", "lo"])
    bridge = f"{p}br"
    (tmp_path / "dc.json").write_text(json.dumps(description(bridge, ports)))
    plan_path = tmp_path / "plan.json"
    cosample("plan", str(tmp_path / "dc.json"), "--margin", "0", "-o", str(plan_path), "--quiet")
    planned = json.loads(plan_path.read_text())["hosts"]["s1"]
    assert planned["local_mechanism"] == "sample" and planned["observation_domain"] == DOMAIN
    probability = planned["sample_probability"]
    assert 0 < probability < SAMPLE_PROBABILITY_SCALE
    cosample("agent", "keygen", str(tmp_path / "plan.pem"), str(tmp_path / "plan.pub"))
    cosample("agent", "sign", str(plan_path), "--key", str(tmp_path / "plan.pem"))
    config = tmp_path / "agent.toml"
    with OvsInstance(tmp_path / "ovs", dummy=False, namespace=host) as ovs:
        config.write_text(
            f'host = "s1"\nplan = "{plan_path}"\novsdb = "{ovs.remote}"\n'
            f'state_dir = "{tmp_path / "agent"}"\n'
            f'public_key = "{tmp_path / "plan.pub"}"\n'
        )
        ovs.vsctl(
            "add-br",
            bridge,
            "--",
            "set",
            "Bridge",
            bridge,
            "datapath_type=netdev",
            *[arg for port in ports for arg in ("--", "add-port", bridge, port)],
        )
        ovs.wait_for_ports(*ports)
        state = tmp_path / "collector"

        def collector() -> Daemon:
            return Daemon(
                plan_path,
                "--public-key",
                str(tmp_path / "plan.pub"),
                "--ipfix",
                f"{TUNNEL}:{IPFIX_PORT}",
                "--state-dir",
                str(state),
                prefix=("ip", "netns", "exec", host),
            )

        daemon = collector()
        capture_path, capture, captured = tmp_path / "ipfix.pcap", None, ""
        try:
            capture = subprocess.Popen(
                lab.exec_argv(
                    host,
                    [  # before the exporter: templates
                        "tcpdump",
                        "--immediate-mode",
                        "-B",
                        "16384",
                        "-i",
                        "lo",
                        "-U",
                        "-w",
                        str(capture_path),
                        "udp",
                        "port",
                        str(IPFIX_PORT),
                    ],
                ),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            capture.stderr.readline()  # listening: the capture is open
            applied = cosample(
                "agent",
                "apply",
                "--once",
                "--config",
                str(config),
                prefix=("ip", "netns", "exec", host),
            )
            assert "ok: plan version" in applied, applied
            for name, peer in (("a", "b"), ("b", "a")):  # MAC learning
                run(
                    lab.exec_argv(
                        vms[name],
                        [sys.executable, "-c", SENDER, VM[peer], str(PORT + 1), "20", "100", "1"],
                    ),
                    timeout=30,
                )
            run(
                lab.exec_argv(
                    vms["a"],
                    [
                        sys.executable,
                        "-c",
                        SENDER,
                        VM["b"],
                        str(PORT),
                        str(PACKETS),
                        str(PPS),
                        str(FLOWS),
                    ],
                ),
                timeout=60,
            )

            def settled(before: int = 0):
                """The snapshot once the collector counts what OVS sampled since ``before``."""
                sampled = _sampled_by_ovs(ovs, bridge) - before  # afresh: the last upcalls lag
                try:
                    snapshot = json.loads((state / "snapshot.json").read_text())
                    k = snapshot["servers"]["name"].index("s1")
                except (OSError, ValueError):
                    return None
                return (snapshot, sampled) if snapshot["servers"]["samples"][k] == sampled else None

            snapshot, sampled = wait_for(settled, timeout_s=20)  # the cache's last records
            through = _through_sample_flow(ovs, bridge)
            assert _sampled_by_ovs(ovs, bridge) == sampled  # nothing sampled since

            # a restarted collector: OVS sends no templates for 600 s, the state directory has them
            first_log = daemon.stop()
            daemon = collector()
            # the truth now: what B received (bound, B sends no ICMP errors: A's are all)
            sink = subprocess.Popen(
                lab.exec_argv(vms["b"], [sys.executable, "-c", SINK, VM["b"], str(PORT)]),
                stdout=subprocess.PIPE,
                text=True,
            )
            assert sink.stdout.readline().strip() == "bound"
            run(
                lab.exec_argv(
                    vms["a"],
                    [
                        sys.executable,
                        "-c",
                        SENDER,
                        VM["b"],
                        str(PORT),
                        str(PACKETS),
                        str(PPS),
                        str(FLOWS),
                    ],
                ),
                timeout=60,
            )
            again, resampled = wait_for(lambda: settled(sampled), timeout_s=20)
            rethrough = int(sink.communicate(timeout=30)[0])
            passed = _through_sample_flow(ovs, bridge) - through
        finally:
            if capture is not None:
                capture.terminate()
                capture.wait(timeout=10)
                captured = capture.stderr.read().decode(errors="replace")
            log = daemon.stop()
            cosample(
                "agent", "remove", "--config", str(config), prefix=("ip", "netns", "exec", host)
            )
    table = snapshot["servers"]
    k = table["name"].index("s1")
    window = snapshot["window_s"]
    estimate = table["packets_per_s"][k] * window
    share = probability / SAMPLE_PROBABILITY_SCALE
    spread = math.sqrt(through * (1 - share) / share)
    records = tshark_records(capture_path)
    factor = SAMPLE_PROBABILITY_SCALE // probability
    print(
        f"\nplanned P = {probability}/65535 ({share:.4f}), domain {DOMAIN}; {PACKETS} packets "
        f"sent, {through} through the sample flow; OVS sampled {sampled}; tshark: "
        f"{len(records)} records, packetDeltaCount sum {sum(r[2] for r in records)} "
        f"(x{factor}); collector: "
        f"{table['samples'][k]} samples, estimate {estimate:.0f} "
        f"[{table['packets_per_s_ci95_low'][k] * window:.0f}, "
        f"{table['packets_per_s_ci95_high'][k] * window:.0f}], "
        f"{(estimate - through) / spread:+.2f} sd"
    )
    assert "\n0 packets dropped by kernel" in captured, captured  # else tshark misses records
    assert records and {(d, pt) for d, pt, _ in records} == {(DOMAIN, probability)}, records
    assert sum(count for _, _, count in records) == (sampled + resampled) * factor
    assert table["samples"][k] == sampled
    assert PACKETS <= through <= PACKETS + 200, through  # the run, learning, link start-up
    assert abs(estimate - through) <= 4.5 * spread, (estimate, through, spread)
    assert estimate == pytest.approx(sampled * SAMPLE_PROBABILITY_SCALE / probability, rel=1e-9)
    assert not {key for key in snapshot["dropped"] if key.startswith("ipfix")}, (
        snapshot["dropped"],
        first_log,
    )
    # the restarted collector read the second run with the templates it restored
    k = again["servers"]["name"].index("s1")
    reestimate = again["servers"]["packets_per_s"][k] * again["window_s"]
    print(
        f"restarted collector: {passed} through the sample flow, {rethrough} received by B, "
        f"OVS sampled {resampled}, collector {again['servers']['samples'][k]} samples, "
        f"estimate {reestimate:.0f}, "
        f"{(reestimate - passed) / math.sqrt(passed * (1 - share) / share):+.2f} sd"
    )
    assert "IPFIX template(s) restored from" in log
    # the truth is the flow's count, as above: on a loaded machine the userspace datapath or B's
    # socket may drop a few of the packets (seen: 3,836 of 4,000 received by B)
    assert 0 < rethrough <= passed <= PACKETS + 200, (rethrough, passed)
    assert resampled > 0 and again["servers"]["samples"][k] == resampled
    assert abs(reestimate - passed) <= 4.5 * math.sqrt(passed * (1 - share) / share)
    assert not {key for key in again["dropped"] if key.startswith("ipfix")}, (again["dropped"], log)


def _sampled_by_ovs(ovs: OvsInstance, bridge: str) -> int:
    text = ovs.ofctl("dump-ipfix-flow", bridge)
    return int(text.split("sampled pkts=", 1)[1].split(",", 1)[0])


def _through_sample_flow(ovs: OvsInstance, bridge: str) -> int:
    """Packets that met the agents' sample flow: every packet the bridge took in (the truth),
    once the count stands still for a second (the revalidators push the datapath's counts
    every 0.5 s, later on a loaded machine)."""

    def count() -> int:
        out = ovs.ofctl("dump-flows", bridge, f"cookie={SAMPLE_COOKIE:#x}/-1")
        [line] = [line for line in out.splitlines() if "cookie=" in line]
        return int(line.split("n_packets=", 1)[1].split(",", 1)[0])

    last = [count()]

    def still() -> int | None:
        time.sleep(1.0)
        now = count()
        steady, last[0] = now == last[0], now
        return now if steady else None

    return wait_for(still, timeout_s=30)
