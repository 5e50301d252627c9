"""Where a mirrored copy's service time gains on the access log (issue 27 item 3): the same
requests timed at the server's veth, at OVS's mirror output, at the analysis node behind OVS's
tunnel and behind a kernel (tc) mirror, and in nginx's log, at several loads.

The rig is the comparison's (``cosample.lab.appmirror``) with two mirrors on at once: the
selective OpenFlow flows (PSH segments of port 80 to OVS's VXLAN port; the analysis node's
``vx0``) and the kernel mirror (``tc``: the same segments copied on the server's switch port by
cls_bpf + mirred to a kernel VXLAN device; ``vx1``). tcpdump captures, per load level:

- ``server``: the server's own interface (its namespace's ``eth0``), what nginx sends and receives;
- ``ovs_out``: the switch's underlay port, where ovs-vswitchd sends its encapsulated copies;
- ``ovs_copy``: ``vx0`` on the analysis node (what the off-site analyser reads today);
- ``tc_copy``: ``vx1`` on the analysis node.

Each request is keyed by its client port and its number on the connection (wrk does not
pipeline), which nginx logs too (``$remote_port``, ``$connection_requests``), so every point's
service time is compared request by request with the log's ``$request_time``, and each copy's
request and response legs with the server's capture. Printed per level and point: requests
matched, mean service time minus the log's (mean, p95 of the per-request difference), and the
mean delay of the request and the response leg behind the server's capture.

    python -m research.appmon_timing [--seconds 10] [--connections 1 8 24]
        [--flood-pps 0 20000] [--json F]
    python -m research.appmon_timing --cost [--rounds 3] [--connections 8]

``--flood-pps``: a bounded UDP flood from the client namespace to the server's discard port
through the switch (not mirrored), to load ovs-vswitchd at a fixed web load.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from cosample.experiments.errors import ExperimentError

PORT = 80
VXLAN_HEADERS = 14 + 20 + 8 + 8
#: A bounded UDP flood from the client to the server's discard port, through the switch (not
#: the service, not mirrored): load on ovs-vswitchd at a fixed web load. argv: pps, seconds.
FLOOD = (
    "import socket, sys, time\n"
    "pps, seconds = float(sys.argv[1]), float(sys.argv[2])\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "start = time.monotonic(); sent = 0\n"
    "while (now := time.monotonic() - start) < seconds:\n"
    "    while sent < pps * now:\n"
    "        s.sendto(b'x' * 64, (sys.argv[3], 9)); sent += 1\n"
    "    time.sleep(0.002)\n"
)


def messages(path: Path, outer: int = 0) -> dict[str, dict[tuple[int, int], float]]:
    """Per request ``(client port, number on the connection from 1)``: when its first segment
    (``GET``) and its response's first segment (``HTTP/``) were captured. ``outer``: bytes of
    encapsulation before the inner Ethernet header. A segment seen again (same client port and
    sequence number) is a retransmission and counts once, at its first sighting."""
    from cosample.appmon.pcap import frames

    seen: dict[str, dict[tuple[int, int], float]] = {"request": {}, "response": {}}
    counts: dict[str, dict[int, int]] = {"request": {}, "response": {}}
    segments: set[tuple[str, int, int]] = set()  # a retransmission is not another message
    for stamp, frame in frames(path):
        frame = frame[outer:]
        if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ihl = (frame[14] & 15) * 4
        tcp = 14 + ihl
        sport, dport, seq = struct.unpack("!HHI", frame[tcp : tcp + 8])
        payload = frame[tcp + (frame[tcp + 12] >> 4) * 4 :]
        if dport == PORT and payload.startswith(b"GET "):
            kind, client = "request", sport
        elif sport == PORT and payload.startswith(b"HTTP/"):
            kind, client = "response", dport
        else:
            continue
        if (kind, client, seq) in segments:
            continue
        segments.add((kind, client, seq))
        number = counts[kind].get(client, 0) + 1
        counts[kind][client] = number
        seen[kind].setdefault((client, number), stamp)
    return seen


def log_times(path: Path, since: int) -> dict[tuple[int, int], float]:
    """nginx's ``$request_time`` per (client port, request number), lines from ``since`` on."""
    out = {}
    for line in path.read_text().splitlines()[since:]:
        fields = line.split()
        out[(int(fields[3]), int(fields[4]))] = float(fields[1])
    return out


def compare(points: dict[str, dict], log: dict[tuple[int, int], float]) -> dict[str, Any]:
    """Per point: its service times against the log's and its legs against the server's."""
    server = points["server"]
    rows = {}
    for name, seen in points.items():
        keys = [k for k in seen["request"] if k in seen["response"] and k in log]
        if not keys:
            rows[name] = {"matched": 0}
            continue
        service = np.array([seen["response"][k] - seen["request"][k] for k in keys])
        excess = service - np.array([log[k] for k in keys])
        row = {
            "matched": len(keys),
            "mean_ms": 1e3 * float(service.mean()),
            "log_mean_ms": 1e3 * float(np.mean([log[k] for k in keys])),
            "excess_mean_ms": 1e3 * float(excess.mean()),
            "excess_p95_ms": 1e3 * float(np.quantile(excess, 0.95)),
        }
        both = [k for k in keys if k in server["request"] and k in server["response"]]
        if both and name != "server":
            row["request_leg_ms"] = 1e3 * float(
                np.mean([seen["request"][k] - server["request"][k] for k in both])
            )
            row["response_leg_ms"] = 1e3 * float(
                np.mean([seen["response"][k] - server["response"][k] for k in both])
            )
        rows[name] = row
    return rows


def run(settings: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    from cosample.experiments.appmon_monitors import cpu_seconds, parse_wrk
    from cosample.lab.appmirror import MirrorRig, rig_unavailable
    from cosample.lab.web import SERVER_ADDRESS

    reason = rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_timing cannot run here: {reason}")
    levels = []
    with MirrorRig(scratch / "rig", seed=settings.seed) as rig:
        rig.set_mechanism("selective", service_port=PORT)
        rig._tc_mirror(PORT, "psh")  # both mirrors at once: the same requests through each
        for connections, flood in [
            (c, f) for f in settings.flood_pps for c in settings.connections
        ]:
            where = {
                "server": (rig.server, "eth0", 0),
                "ovs_out": (rig.switch, rig.uplink, VXLAN_HEADERS),
                "ovs_copy": (rig.analysis, "vx0", 0),
                "tc_copy": (rig.analysis, "vx1", 0),
            }
            captures = {}
            for name, (namespace, device, _) in where.items():
                captures[name] = rig._spawn(
                    namespace,
                    [
                        "tcpdump",
                        "-i",
                        device,
                        "-U",
                        "--immediate-mode",
                        "-B",
                        "16384",
                        "-n",
                        "-s",
                        "200",
                        "-w",
                        str(scratch / f"{name}-{connections}.pcap"),
                        "tcp or udp",
                    ],
                )
            time.sleep(1.5)
            since = len((rig.directory / "access.log").read_text().splitlines())
            load_before, cpu_before = os.getloadavg()[0], cpu_seconds(rig.vswitchd_pid())
            flooder = (
                rig._spawn(
                    rig.client,
                    [
                        sys.executable,
                        "-c",
                        FLOOD,
                        str(flood),
                        str(settings.seconds + 1),
                        SERVER_ADDRESS,
                    ],
                )
                if flood
                else None
            )
            report = parse_wrk(
                rig.load(
                    rig.url(mean_ms=settings.mean_ms, size=settings.size),
                    duration_s=settings.seconds,
                    connections=connections,
                    latency=True,
                )
            )
            cpu = cpu_seconds(rig.vswitchd_pid()) - cpu_before
            if flooder is not None:
                flooder.wait(timeout=30)
                rig._processes.remove(flooder)
            time.sleep(1.0)
            for process in captures.values():
                rig.stop(process)
                rig._processes.remove(process)
            log = log_times(rig.directory / "access.log", since)
            points = {
                name: messages(scratch / f"{name}-{connections}.pcap", outer)
                for name, (_, _, outer) in where.items()
            }
            level = {
                "connections": connections,
                "flood_pps": flood,
                "requests_per_s": report.requests_per_s,
                "wrk_latency_mean_ms": report.latency_mean_ms,
                "log_requests": len(log),
                "vswitchd_cpu_share": cpu / settings.seconds,
                "loadavg_1m": [load_before, os.getloadavg()[0]],
                "points": compare(points, log),
            }
            levels.append(level)
            print(json.dumps(level), flush=True)
        rig.set_mechanism("none")
    return {"settings": vars(settings) | {"json": None}, "levels": levels}


#: The cost arms (``--cost``): no copies, OpenFlow's selective copies, the kernel's; bare (no
#: analyser reads them), so what is counted is the sender's work and the fabric's bytes.
COST_ARMS = ("none", "selective", "tc")


def cost(settings: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Per arm and round (arms rotated per round): wrk's rate, CPU seconds of ovs-vswitchd and
    of the server's processes (nginx and its backend: the tc mirror's response copies are made
    in the kernel on their sends, its request copies on ovs-vswitchd's), bytes on each underlay."""
    from cosample.experiments.appmon_monitors import cpu_seconds, parse_wrk
    from cosample.lab.appmirror import MirrorRig, rig_unavailable

    reason = rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_timing cannot run here: {reason}")
    rows = []
    with MirrorRig(scratch / "rig", seed=settings.seed) as rig:
        servers = [process.pid for process in rig._processes]  # the backend and nginx
        for round_number in range(settings.rounds):
            shift = round_number % len(COST_ARMS)
            for arm in COST_ARMS[shift:] + COST_ARMS[:shift]:
                rig.set_mechanism(arm, service_port=PORT)
                time.sleep(0.5)
                since = len((rig.directory / "access.log").read_text().splitlines())
                before = (
                    cpu_seconds(rig.vswitchd_pid()),
                    sum(map(cpu_seconds, servers)),
                    rig.analysis_counters("eth0").bytes,
                    rig.analysis_counters("eth1").bytes,
                )
                report = parse_wrk(
                    rig.load(
                        rig.url(mean_ms=settings.mean_ms, size=settings.size),
                        duration_s=settings.seconds,
                        connections=settings.connections[0],
                        latency=True,
                    )
                )
                time.sleep(0.5)
                after = (
                    cpu_seconds(rig.vswitchd_pid()),
                    sum(map(cpu_seconds, servers)),
                    rig.analysis_counters("eth0").bytes,
                    rig.analysis_counters("eth1").bytes,
                )
                requests = len((rig.directory / "access.log").read_text().splitlines()) - since
                row = {
                    "round": round_number,
                    "arm": arm,
                    "requests": requests,
                    "requests_per_s": report.requests_per_s,
                    "vswitchd_us_per_request": 1e6 * (after[0] - before[0]) / requests,
                    "server_us_per_request": 1e6 * (after[1] - before[1]) / requests,
                    "underlay_bytes_per_request": (after[2] - before[2] + after[3] - before[3])
                    / requests,
                    "loadavg_1m": os.getloadavg()[0],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
        rig.set_mechanism("none")
    return {"settings": vars(settings) | {"json": None}, "cost": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8, 24])
    parser.add_argument(
        "--flood-pps",
        type=int,
        nargs="+",
        default=[0],
        help="UDP packets/s through the switch beside the web load (0: none)",
    )
    parser.add_argument("--mean-ms", type=float, default=2.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--cost",
        action="store_true",
        help="instead: the sender's CPU and the "
        "fabric's bytes per request of no mirror, the selective flows and the "
        "tc mirror (bare), at the first --connections",
    )
    parser.add_argument("--rounds", type=int, default=3, help="--cost: rounds (default 3)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if (
        not 0 < args.seconds <= 120
        or not all(0 < c <= 256 for c in args.connections)
        or not all(0 <= f <= 50000 for f in args.flood_pps)
    ):
        raise SystemExit(
            "--seconds: 0 < s <= 120; --connections: 1..256 each; --flood-pps: 0..50000"
        )
    with tempfile.TemporaryDirectory(prefix="cosample-appmon-timing-") as scratch:
        try:
            result = (cost if args.cost else run)(args, Path(scratch))
        except ExperimentError as exc:
            print(f"appmon_timing: {exc}", file=sys.stderr)
            return 1
    if args.cost:
        import pandas as pd

        frame = pd.DataFrame(result["cost"]).groupby("arm", sort=False).median(numeric_only=True)
        none = frame.loc["none"]
        for arm, row in frame.iterrows():
            print(
                f"{arm:<10} median of {args.rounds}: {row['requests_per_s']:.0f} req/s, "
                f"ovs-vswitchd {row['vswitchd_us_per_request']:.1f} us/request "
                f"({row['vswitchd_us_per_request'] - none['vswitchd_us_per_request']:+.1f}), "
                f"nginx+backend {row['server_us_per_request']:.1f} "
                f"({row['server_us_per_request'] - none['server_us_per_request']:+.1f}), "
                f"underlay {row['underlay_bytes_per_request']:.1f} B/request"
            )
    for level in result.get("levels", []):
        print(
            f"{level['connections']} connections, flood {level['flood_pps']} pps: "
            f"{level['requests_per_s']:.0f} req/s, "
            f"wrk mean {level['wrk_latency_mean_ms']:.2f} ms, ovs-vswitchd "
            f"{100 * level['vswitchd_cpu_share']:.0f} % of a core, load "
            f"{level['loadavg_1m'][0]:.1f}-{level['loadavg_1m'][1]:.1f}"
        )
        for name, row in level["points"].items():
            if not row["matched"]:
                print(f"  {name:<9} nothing matched")
                continue
            legs = (
                f"; request leg +{row['request_leg_ms']:.3f} ms, response leg "
                f"+{row['response_leg_ms']:.3f} ms"
                if "request_leg_ms" in row
                else ""
            )
            print(
                f"  {name:<9} {row['matched']:>6} matched, mean {row['mean_ms']:.3f} ms "
                f"(log {row['log_mean_ms']:.3f}), excess mean {row['excess_mean_ms']:+.3f} "
                f"p95 {row['excess_p95_ms']:+.3f} ms{legs}"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
