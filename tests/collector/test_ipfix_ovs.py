"""The collector on real OVS's ``sample`` action with the IPFIX flow cache (issue 24, item 4).

One userspace ovs-vswitchd in a namespace of its own, "VM" A and B on its bridge; A's UDP
packets to PORT go through ``sample(probability=P, collector_set_id=0xC05A, obs_domain_id=D,
obs_point_id=P),NORMAL`` towards a ``Flow_Sample_Collector_Set`` whose IPFIX row has the flow
cache (``cache_active_timeout=1``, ``cache_max_flows=64``) and targets the namespace's
loopback, where the real daemon (``collector run --ipfix``, in the namespace) listens and
tcpdump captures. A sends N packets over FLOWS flows. Then:

- the daemon's sampled packets for the host equal OVS's own count (``dump-ipfix-flow``) and
  tshark's decoding of the captured IPFIX (``packetDeltaCount / (65535 // P)`` summed: OVS
  multiplies each sample by that integer factor), and its records equal tshark's;
- every record carries ``observationPointId = P`` (what the collector weighs with);
- the daemon's estimate of the host's packets is N within 4.5 binomial standard deviations.

Needs root, OVS, tcpdump and tshark; about 15 s.
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
from ipfix_messages import sample_plan
from waiting import wait_for

from cosample.dataplane.ipfix import IPFIX_PORT, SAMPLE_COLLECTOR_SET_ID
from cosample.dataplane.run import run
from cosample.lab.netns import Lab
from cosample.lab.ovs import OvsInstance

pytestmark = [pytest.mark.root, pytest.mark.slow]
PACKETS, PPS, FLOWS, PORT = 4000, 1000, 4, 9978
PROBABILITY, DOMAIN = 26214, 2130706433  # 0.4 (OVS's factor 2); 127.0.0.1 as an integer
ADDRESS = {"a": "10.219.0.1", "b": "10.219.0.2"}

SENDER = r"""
import socket, sys, time
dst, port, count, pps, flows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(flows)]
start = time.monotonic()
for i in range(count):
    socks[i % flows].sendto(b"sample-ipfix" + bytes(i % flows), (dst, port))
    delay = start + (i + 1) / pps - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""


def tshark(capture: Path, *fields: str) -> list[list[str]]:
    argv = [
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
    ]
    for field in fields:
        argv += ["-e", field]
    out = run(argv, timeout=60).stdout
    return [line.split("|") for line in out.splitlines()]


def sampled_by_ovs(ovs: OvsInstance, bridge: str) -> int:
    text = ovs.ofctl("dump-ipfix-flow", bridge)
    return int(text.split("sampled pkts=", 1)[1].split(",", 1)[0])


@pytest.fixture
def lab(dataplane):
    with Lab.unique("ci") as lab:
        yield lab


def test_the_collector_estimates_a_sample_host_from_real_ovs(lab, tmp_path):
    host = lab.namespace("h")
    spaces = {}
    for name in ("a", "b"):
        spaces[name] = lab.namespace(name)
        lab.veth(f"ci{name}", spaces[name], address=f"{ADDRESS[name]}/24", host_namespace=host)
    plan = tmp_path / "plan.json"  # s1's agent (and IPFIX exporter) address: the loopback's
    plan.write_text(json.dumps(sample_plan(PROBABILITY, DOMAIN, agents="127.0.0").raw))
    state = tmp_path / "state"
    daemon = Daemon(
        plan,
        "--insecure-unsigned",
        "--ipfix",
        f"127.0.0.1:{IPFIX_PORT}",
        "--state-dir",
        str(state),
        prefix=("ip", "netns", "exec", host),
    )
    capture_path = tmp_path / "ipfix.pcap"
    capture, captured = None, ""
    try:
        capture = subprocess.Popen(
            lab.exec_argv(
                host,
                [  # before the exporter: its templates
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
        with OvsInstance(tmp_path / "ovs", dummy=False, namespace=host) as ovs:
            ovs.vsctl(
                "add-br",
                "cibr",
                "--",
                "set",
                "bridge",
                "cibr",
                "datapath_type=netdev",
                "--",
                "add-port",
                "cibr",
                "cia",
                "--",
                "add-port",
                "cibr",
                "cib",
            )
            ovs.vsctl(
                "--",
                "--id=@br",
                "get",
                "Bridge",
                "cibr",
                "--",
                "--id=@i",
                "create",
                "IPFIX",
                f'targets="127.0.0.1:{IPFIX_PORT}"',
                "cache_active_timeout=1",
                "cache_max_flows=64",
                "--",
                "create",
                "Flow_Sample_Collector_Set",
                f"id={SAMPLE_COLLECTOR_SET_ID}",
                "bridge=@br",
                "ipfix=@i",
            )
            ovs.ofctl(
                "add-flow",
                "cibr",
                f"priority=10,udp,in_port=cia,tp_dst={PORT},actions=sample(probability="
                f"{PROBABILITY},collector_set_id={SAMPLE_COLLECTOR_SET_ID},obs_domain_id="
                f"{DOMAIN},obs_point_id={PROBABILITY}),NORMAL",
            )
            ovs.wait_for_ports("cia", "cib")
            for name, peer in (("a", "b"), ("b", "a")):  # ARP and MAC learning, not sampled
                run(
                    lab.exec_argv(
                        spaces[name],
                        [
                            sys.executable,
                            "-c",
                            SENDER,
                            ADDRESS[peer],
                            str(PORT + 1),
                            "20",
                            "100",
                            "1",
                        ],
                    ),
                    timeout=30,
                )
            run(
                lab.exec_argv(
                    spaces["a"],
                    [
                        sys.executable,
                        "-c",
                        SENDER,
                        ADDRESS["b"],
                        str(PORT),
                        str(PACKETS),
                        str(PPS),
                        str(FLOWS),
                    ],
                ),
                timeout=60,
            )
            sampled = sampled_by_ovs(ovs, "cibr")
            factor = 65535 // PROBABILITY

            def snapshot_counts():
                try:
                    snapshot = json.loads((state / "snapshot.json").read_text())
                except (OSError, ValueError):
                    return None
                table = snapshot["servers"]
                k = table["name"].index("s1")
                return snapshot if table["samples"][k] == sampled else None

            snapshot = wait_for(snapshot_counts, timeout_s=20)  # the cache's last records
            time.sleep(0.5)
    finally:
        if capture is not None:
            capture.terminate()
            capture.wait(timeout=10)
            captured = capture.stderr.read().decode(errors="replace")
        log = daemon.stop()
    table = snapshot["servers"]
    k = table["name"].index("s1")
    estimate = table["packets_per_s"][k] * snapshot["window_s"]
    p = PROBABILITY / 65535
    spread = math.sqrt(PACKETS * (1 - p) / p)
    frames = tshark(capture_path, "cflow.od_id", "cflow.packets", "cflow.observation_point_id")
    rows = [row for row in frames if row[1]]
    records = [
        (int(domain), int(packets), int(point))
        for row in rows
        for domain, packets, point in zip(*(cell.split(",") for cell in row))
    ]
    print(
        f"sample action + IPFIX cache: {PACKETS} packets, OVS sampled {sampled} "
        f"(expected {PACKETS * p:.0f}); {len(records)} records, packetDeltaCount sum "
        f"{sum(r[1] for r in records)} (= {factor} x sampled); collector: "
        f"{table['samples'][k]} samples, estimate {estimate:.0f} "
        f"[{table['packets_per_s_ci95_low'][k] * snapshot['window_s']:.0f}, "
        f"{table['packets_per_s_ci95_high'][k] * snapshot['window_s']:.0f}]; "
        f"{len(frames)} IPFIX messages captured"
    )
    assert "\n0 packets dropped by kernel" in captured, captured  # else tshark misses records
    assert records and all(
        domain == DOMAIN and point == PROBABILITY for domain, _, point in records
    ), records
    assert sum(packets for _, packets, _ in records) == sampled * factor
    assert table["samples"][k] == sampled
    assert abs(sampled - PACKETS * p) <= 4.5 * math.sqrt(PACKETS * p * (1 - p))
    assert abs(estimate - PACKETS) <= 4.5 * spread, (estimate, PACKETS, spread)
    assert estimate == pytest.approx(sampled * 65535 / PROBABILITY, rel=1e-9)
    assert not {key for key in snapshot["dropped"] if key.startswith("ipfix")}, (
        snapshot["dropped"],
        log,
    )
