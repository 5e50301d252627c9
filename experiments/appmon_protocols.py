"""How exactly the analyser reads HTTP/2 and HTTP over TLS: real traffic against its references.

The secure web rig (``cosample.lab.webtls``, root): nginx with h2c (8080), TLS (443) and h2
(8443) in front of the backend (exponential service times, 500s at a chosen rate). Each phase
records its own capture (tcpdump on the client's veth end), which ``cosample appmon replay``'s
analyser reads with the ports declared, and is compared with:

- nginx's access log of the port (requests, statuses, connections, ``$request_time``: from
  reading the request to the last byte sent, so not the wire's service time);
- tshark, per stream (h2c in clear; h2 decrypted) or per request (HTTP/1.1 over TLS, decrypted)
  and per handshake, with the session keys curl wrote (``SSLKEYLOGFILE``): the peer on the
  decrypted side (``cosample.experiments.appmon_peers``).

Phases: ``h2c`` (h2load, 8 streams at once per connection), ``tls_wrk`` (wrk over https),
``tls_curl`` (curl, TLS 1.3 and 1.2, keys logged), ``h2_one`` (h2load, one stream at a time),
``h2_many`` (h2load, 8 streams at once: what the record layer cannot separate), ``h2_curl``
(curl over h2, keys logged). Prints one row per phase and metric and writes them as CSV.

    python -m cosample.experiments.appmon_protocols [--requests 400] [--out DIR]
    python -m cosample.experiments.appmon_protocols --sample tests/data/appmon/protocols-nginx.pcap
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cosample.appmon.replay import replay
from cosample.experiments.appmon_peers import pairs, tshark_h2, tshark_tls
from cosample.lab.webtls import H2_PORT, H2C_PORT, PORTS, TLS_PORT

PROTOCOLS = {port: name for name, port in PORTS.items()}
COLUMNS = ("phase", "protocol", "metric", "analyser", "reference", "difference", "against")


@dataclass(frozen=True)
class Phase:
    name: str
    port: int
    load: str  # h2load, wrk or curl
    streams: int = 1
    tls12: bool = False


PHASES = (
    Phase("h2c", H2C_PORT, "h2load", streams=8),
    Phase("tls_wrk", TLS_PORT, "wrk"),
    Phase("tls_curl", TLS_PORT, "curl"),
    Phase("h2_one", H2_PORT, "h2load"),
    Phase("h2_many", H2_PORT, "h2load", streams=8),
    Phase("h2_curl", H2_PORT, "curl"),
)


def drive(rig, phase: Phase, requests: int, keylog: Path) -> None:
    """The phase's load, bounded."""
    url = rig.secure_url(phase.port, mean_ms=3, error=0.2, size=2000)
    if phase.load == "h2load":
        rig.h2load(url, requests, clients=4, streams=phase.streams)
    elif phase.load == "wrk":
        rig.load(url, duration_s=max(1.0, requests / 400), connections=4)
    else:
        urls = [
            rig.secure_url(phase.port, "/fast" if k % 5 == 4 else "/", mean_ms=2, error=0.2, i=k)
            for k in range(max(4, requests // 16))
        ]
        extra = ("--http2",) if phase.port == H2_PORT else ()
        rig.curl(urls, keylog, extra)  # TLS 1.3
        if phase.port == TLS_PORT:
            rig.curl(urls, keylog, ("--tlsv1.2", "--tls-max", "1.2"))


def record(rig, phase: Phase, requests: int, directory: Path) -> dict:
    """Run one phase: its capture, key log and the access-log entries it added."""
    capture, keylog = directory / f"{phase.name}.pcap", directory / f"{phase.name}.keys"
    before = len(rig.port_log(phase.port))
    dump = rig.tcpdump(capture)
    time.sleep(0.3)
    drive(rig, phase, requests, keylog)
    time.sleep(0.5)
    rig.stop(dump)
    return {
        "capture": capture,
        "keylog": keylog if keylog.exists() else None,
        "log": rig.port_log(phase.port)[before:],
    }


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _largest(values) -> float | None:
    values = [abs(v) for v in values]
    return max(values) if values else None


def compare(phase: Phase, recorded: dict) -> list[dict]:
    """The phase's rows: each metric beside its reference."""
    protocol = PROTOCOLS[phase.port]
    capture, keylog, log = recorded["capture"], recorded["keylog"], recorded["log"]
    snaps = list(
        replay(capture, window_s=3600.0, ports=frozenset({phase.port}), protocols=PROTOCOLS)
    )
    services = [s for snap in snaps for s in snap.services]
    requests = sum(s.requests for s in services)
    matched = sum(s.matched for s in services)
    timed = [(s.service_time_s.mean, s.matched) for s in services if s.service_time_s]
    mean = sum(m * n for m, n in timed) / matched if matched else None
    statuses = [sum(s.status_classes[c] for s in services) for c in ("2xx", "5xx")]
    success = [s.success_rate for s in services]
    handshakes = sum(s.handshakes for s in services)
    answered = [e for e in log if e.status != 499]
    rows = [
        ("requests", requests, len(log), "access log"),
        ("answers paired", matched, len(answered), "access log"),
        ("2xx", statuses[0], sum(200 <= e.status < 300 for e in log), "access log"),
        ("5xx", statuses[1], sum(500 <= e.status < 600 for e in log), "access log"),
        (
            "success rate",
            success[0] if success else None,
            sum(e.status < 400 for e in answered) / len(answered) if answered else None,
            "access log",
        ),
        ("mean service time (s)", mean, _mean(e.request_time for e in answered), "access log"),
        (
            "connections",
            sum(s.connections_opened for s in services),
            len({e.connection for e in log}),
            "access log",
        ),
    ]
    mine = pairs(capture, PROTOCOLS)
    if protocol == "h2c" or (protocol == "h2" and keylog):
        peer = tshark_h2(capture, phase.port, keylog)
        rows += _per_stream(phase, mine, peer)
    if protocol == "tls" and keylog:
        rows += _per_request(mine, tshark_tls(capture, phase.port, keylog))
    if protocol in ("tls", "h2"):
        rows.append(("handshakes", handshakes, len({e.connection for e in log}), "access log"))
    out = []
    for metric, analyser, reference, against in rows:
        difference = (
            analyser - reference
            if isinstance(analyser, (int, float)) and isinstance(reference, (int, float))
            else None
        )
        out.append(
            dict(
                zip(
                    COLUMNS,
                    (phase.name, protocol, metric, analyser, reference, difference, against),
                )
            )
        )
    return out


def _per_stream(phase: Phase, mine: dict, peer: dict) -> list[tuple]:
    """h2: the analyser's answers beside tshark's streams (same capture, same clock), per
    connection as multisets of (request time, answer time, status): streams opened in one
    segment share a request time, and the analyser's pairs name no stream."""
    truth: dict[int, list] = {}
    for (port, _), v in peer.items():
        if "response" in v:
            truth.setdefault(port, []).append((v["request"], v["response"], v["status"]))
    found = statuses = 0
    differences = []
    for port, reference in truth.items():
        answers = sorted(
            (requested, time, status)
            for time, status, requested in mine.get(port, {}).get("answers", [])
            if requested is not None
        )
        reference.sort()
        times = Counter((round(q, 6), round(r, 6)) for q, r, _ in answers)
        found += sum(
            (times & Counter((round(q, 6), round(r, 6)) for q, r, _ in reference)).values()
        )
        full = Counter((round(q, 6), round(r, 6), c) for q, r, c in answers)
        statuses += sum(
            (full & Counter((round(q, 6), round(r, 6), c) for q, r, c in reference)).values()
        )
        if len(answers) == len(reference):
            differences += [
                (r - q) - (r2 - q2) for (q, r, _), (q2, r2, _) in zip(answers, reference)
            ]
        else:
            differences.append(float("inf"))
    total = sum(len(v) for v in truth.values())
    rows = [
        ("streams paired as tshark's", found, total, "tshark per stream"),
        ("largest service-time difference (s)", _largest(differences), 0.0, "tshark per stream"),
    ]
    if phase.port == H2C_PORT:
        rows.append(("statuses equal", statuses, total, "tshark per stream"))
    return rows


def _per_request(mine: dict, peer: dict) -> list[tuple]:
    """HTTP/1.1 over TLS: requests, answers and handshakes beside tshark's, decrypted."""
    differences, handshake, compared = [], [], 0
    for port, reference in peer.items():
        entry = mine.get(port)
        if entry is None or not reference["requests"]:
            continue
        for request, (response, _), (answered, _, requested) in zip(
            reference["requests"], reference["responses"], entry["answers"]
        ):
            compared += 1
            differences.append((answered - (requested or 0.0)) - (response - request))
        if reference["finished"] and entry["handshakes"]:
            handshake.append(
                entry["handshakes"][0][1] - (reference["finished"] - reference["hello"])
            )
    decrypted = sum(len(r["requests"]) for r in peer.values())
    return [
        ("requests compared with tshark", compared, decrypted, "tshark decrypted"),
        ("largest service-time difference (s)", _largest(differences), 0.0, "tshark decrypted"),
        ("largest handshake-time difference (s)", _largest(handshake), 0.0, "tshark decrypted"),
    ]


def run(requests: int, phases: tuple[Phase, ...], directory: Path) -> list[dict]:
    from cosample.lab.webtls import SecureWebRig

    rows = []
    with SecureWebRig(directory / "web", seed=9) as rig:
        for phase in phases:
            rows += compare(phase, record(rig, phase, requests, directory))
    return rows


def record_sample(out: Path, requests: int = 40) -> None:
    """One small capture of every protocol (h2c and h2 from h2load, TLS 1.3 and 1.2 and h2
    from curl) with curl's key log beside it (``OUT.keys``): the test data of
    tests/appmon/test_protocol_captures.py."""
    from cosample.lab.webtls import SecureWebRig

    keylog = out.with_suffix(".keys")
    keylog.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="appmon-protocols-") as scratch:
        with SecureWebRig(Path(scratch) / "web", seed=9) as rig:
            dump = rig.tcpdump(out)
            time.sleep(0.3)
            for phase in PHASES:
                if phase.name in ("h2c", "tls_curl", "h2_one", "h2_curl"):
                    drive(rig, phase, requests, keylog)
            time.sleep(0.5)
            rig.stop(dump)


def _text(value) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="per h2load phase (default 400)")
    parser.add_argument("--out", type=Path, help="directory for appmon_protocols.csv")
    parser.add_argument("--phases", nargs="+", choices=[p.name for p in PHASES])
    parser.add_argument(
        "--sample", type=Path, metavar="PCAP", help="only record a small capture (and PCAP.keys)"
    )
    args = parser.parse_args(argv)
    from cosample.lab.webtls import secure_available

    reason = secure_available()
    if reason:
        print(f"appmon_protocols: cannot run here: {reason}", file=sys.stderr)
        return 2
    if args.sample:
        record_sample(args.sample)
        print(f"wrote {args.sample} and {args.sample.with_suffix('.keys')}")
        return 0
    phases = tuple(p for p in PHASES if not args.phases or p.name in args.phases)
    with tempfile.TemporaryDirectory(prefix="appmon-protocols-") as scratch:
        rows = run(args.requests, phases, Path(scratch))
    print("| phase | protocol | metric | analyser | reference | against |")
    print("|---|---|---|---:|---:|---|")
    for row in rows:
        print(
            f"| {row['phase']} | {row['protocol']} | {row['metric']} | {_text(row['analyser'])} "
            f"| {_text(row['reference'])} | {row['against']} |"
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / "appmon_protocols.csv").open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
