"""What monitoring each protocol costs beside HTTP/1.x: copies, fabric bytes and analyser CPU.

One secure web rig (``cosample.lab.webtls``, root), one backend URL (3 ms mean, 2000-byte
bodies), four services: HTTP/1.x (80) and HTTP/1.1 over TLS (443) loaded by wrk, h2c (8080) and
h2 (8443) by h2load with one stream at a time per connection (4 connections each, as wrk's).
Each phase's capture (tcpdump on the client's veth end) gives, per request of the access log:

- the segments a mirror copies under the plan's rule for the protocol (``DEFAULT_SEGMENTS``:
  PSH segments for HTTP/1.x, every segment for the others) and their bytes on the fabric, whole
  and cut to ``TRUNCATE_BYTES`` where the protocol allows it, with VXLAN's 50 bytes each;
- the analyser's CPU per request (``Analyser.ingest`` over the frames in memory, best of 3,
  the protocols declared) on what the mirror copies (behind a mirror) and on every packet (the
  on-site sniffer), and their ratios to HTTP/1.x's in the same run.

The ratios to HTTP/1.x are what the planner multiplies the calibrated HTTP/1.x costs by
where a calibration has no costs of the protocol's own (``planner.appmon_costs.PROTOCOL_FACTORS``,
the fallback): fabric bytes and analyser CPU are measured here; the sender's CPU
(ovs-vswitchd copying and encapsulating) is *estimated* as proportional to the segments
copied, as OVS's copy cost is per packet. Each protocol's costs measured as HTTP/1.x's are
(the sender's CPU included): ``python -m cosample.experiments.appmon_protocol_calibration``.

    python -m cosample.experiments.appmon_protocol_costs [--seconds 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from cosample.appmon.analyser import Analyser
from cosample.appmon.decode import PSH, Segment, decode
from cosample.appmon.pcap import frames, read_link
from cosample.plan.appmon import DEFAULT_SEGMENTS, UNCUT

TRUNCATE_BYTES = 96
VXLAN_OVERHEAD = 50
PORTS = {"http": 80, "tls": 443, "h2c": 8080, "h2": 8443}


def record(rig, protocol: str, seconds: float, directory: Path) -> tuple[Path, int]:
    """One phase: its capture and the requests nginx logged."""
    from cosample.lab.webtls import H2C_PORT

    port = PORTS[protocol]
    path = directory / f"{protocol}.pcap"
    log = (lambda: rig.access_log()) if protocol == "http" else (lambda: rig.port_log(port))
    before = len(log())
    dump = rig.tcpdump(path)
    time.sleep(0.3)
    if protocol in ("http", "tls"):
        url = (
            rig.url(mean_ms=3, size=2000)
            if protocol == "http"
            else rig.secure_url(port, mean_ms=3, size=2000)
        )
        rig.load(url, duration_s=seconds, connections=4)
    else:
        url = rig.secure_url(H2C_PORT if protocol == "h2c" else port, mean_ms=3, size=2000)
        rig.h2load(url, int(seconds * 500), clients=4, streams=1)
    time.sleep(0.5)
    rig.stop(dump)
    return path, len(log()) - before


def copies(path: Path, protocol: str, requests: int) -> dict:
    """Segments and fabric bytes per request a mirror copies under the protocol's rule."""
    port, rule = PORTS[protocol], DEFAULT_SEGMENTS[protocol]
    link, count, whole, cut, every = read_link(path), 0, 0, 0, 0
    for _, frame in frames(path):
        segment = decode(frame, link)
        if segment.__class__ is not Segment or port not in (segment.sport, segment.dport):
            continue
        every += 1
        if rule != "all" and not segment.flags & PSH:
            continue
        count += 1
        whole += len(frame) + VXLAN_OVERHEAD
        cut += min(len(frame), TRUNCATE_BYTES) + VXLAN_OVERHEAD
    return {
        "packets_per_request": every / requests,
        "copied_per_request": count / requests,
        "segments": rule,
        "fabric_bytes_per_request": whole / requests,
        "truncated_bytes_per_request": None if protocol in UNCUT else cut / requests,
    }


def analyser_cpu(
    path: Path, protocol: str, requests: int, copied_only: bool = False, rounds: int = 3
) -> float:
    """The analyser's CPU seconds per request on the capture (best of ``rounds``), or on what
    the protocol's mirror copies of it (``copied_only``: HTTP/1.x's PSH segments)."""
    data, link = list(frames(path)), read_link(path)
    if copied_only and DEFAULT_SEGMENTS[protocol] == "psh":
        data = [
            (when, frame)
            for when, frame in data
            if (segment := decode(frame, link)).__class__ is Segment and segment.flags & PSH
        ]
    protocols = {port: name for name, port in PORTS.items() if name != "http"}
    best = float("inf")
    for _ in range(rounds):
        analyser = Analyser(3600.0, link=link, protocols=protocols)
        started = time.process_time()
        for when, frame in data:
            analyser.ingest(frame, when)
        analyser.finish()
        best = min(best, time.process_time() - started)
    counted = sum(stats.requests for stats in analyser.totals.values())
    if counted != requests:
        print(
            f"appmon_protocol_costs: the analyser counted {counted} of {requests}", file=sys.stderr
        )
    return best / requests


def measure(seconds: float, directory: Path) -> dict:
    from cosample.lab.webtls import SecureWebRig

    out = {}
    with SecureWebRig(directory / "web", seed=4) as rig:
        for protocol in PORTS:
            path, requests = record(rig, protocol, seconds, directory)
            out[protocol] = {
                "requests": requests,
                **copies(path, protocol, requests),
                "onsite_cpu_s_per_request": analyser_cpu(path, protocol, requests),
                "analyser_cpu_s_per_request": analyser_cpu(
                    path, protocol, requests, copied_only=True
                ),
            }
    http = out["http"]
    for entry in out.values():
        entry["factors"] = {
            "sender_estimated": entry["copied_per_request"] / http["copied_per_request"],
            "fabric_bytes": entry["fabric_bytes_per_request"] / http["fabric_bytes_per_request"],
            "truncated_bytes": None
            if entry["truncated_bytes_per_request"] is None
            else entry["truncated_bytes_per_request"] / http["truncated_bytes_per_request"],
            "analyser": entry["analyser_cpu_s_per_request"] / http["analyser_cpu_s_per_request"],
            "onsite": entry["onsite_cpu_s_per_request"] / http["onsite_cpu_s_per_request"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="load per protocol (default 2)")
    parser.add_argument("--out", type=Path, help="directory for appmon_protocol_costs.json")
    args = parser.parse_args(argv)
    from cosample.lab.webtls import secure_available

    reason = secure_available()
    if reason:
        print(f"appmon_protocol_costs: cannot run here: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="appmon-protocol-costs-") as scratch:
        result = measure(args.seconds, Path(scratch))
    print(
        f"{'protocol':<9}{'requests':>9}{'segments':>9}{'pkts/req':>9}{'copied':>8}"
        f"{'B/req':>8}{'cut B/req':>10}{'analyser us':>12}{'on-site us':>11}   factors (sender "
        "est., bytes, cut bytes, analyser, on-site)"
    )
    for name, row in result.items():
        cut = row["truncated_bytes_per_request"]
        factors = row["factors"]
        print(
            f"{name:<9}{row['requests']:>9}{row['segments']:>9}{row['packets_per_request']:>9.2f}"
            f"{row['copied_per_request']:>8.2f}{row['fabric_bytes_per_request']:>8.0f}"
            f"{'-' if cut is None else f'{cut:.0f}':>10}"
            f"{row['analyser_cpu_s_per_request'] * 1e6:>12.1f}"
            f"{row['onsite_cpu_s_per_request'] * 1e6:>11.1f}   "
            + ", ".join("-" if v is None else f"{v:.2f}" for v in factors.values())
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "appmon_protocol_costs.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
