"""Truncated copies against the full one: the analyser on a capture cut at every length.

``record`` writes a capture of real traffic that pipelines and splits requests: nginx and its
backend (``cosample.lab.web``, root) answering the raw-socket client ``cosample.lab.httpclient``
(pipelined groups of 4, requests written in two parts, POST bodies in a segment of their own,
HEAD, chunked answers, keep-alive), tcpdump keeping whole frames on the client's veth end.

``cuts`` analyses a capture whole and cut to each length (what a truncating mirror's ``snaplen``
delivers; the IP header still gives each segment's length), and prints per length: requests,
final responses with a status, pairs (a response matched to a request) and how many of them are
the full copy's own pairs, the mean service time beside the full copy's.

    python -m cosample.experiments.appmon_truncation record tests/data/appmon/mixed-nginx.pcap
    python -m cosample.experiments.appmon_truncation cuts CAPTURE [--lengths 64-200] [--step 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from cosample.appmon.connections import ConnectionTable
from cosample.appmon.decode import LINK_ETHERNET, Segment, decode
from cosample.appmon.pcap import frames as read_frames
from cosample.appmon.pcap import read_link


def load(path: Path) -> tuple[list[tuple[float, bytes]], int]:
    """The capture's frames (time, bytes) and link type."""
    return list(read_frames(path)), read_link(path)


def cut(data: list[tuple[float, bytes]], length: int) -> list[tuple[float, bytes]]:
    """Every frame cut to ``length`` bytes, as a truncating mirror copies it."""
    return [(when, frame[:length]) for when, frame in data]


def analyse(
    data: list[tuple[float, bytes]], link: int = LINK_ETHERNET, protocols: dict | None = None
) -> dict:
    """Requests counted, final statuses counted, the pairs (request µs, response µs) -> status,
    the counters, and per connection (by client port) its request times and its responses
    (time, status, request time or None), from the connection table alone (no windows)."""
    counters, statuses, pairs = Counter(), Counter(), {}
    requests = [0]
    seen: dict[object, dict] = {}

    def on_request(service, time, connection):
        requests[0] += 1
        seen.setdefault(connection, {"requests": [], "responses": []})["requests"].append(time)

    def on_response(service, time, status, service_time, connection):
        statuses[status] += 1
        requested = None if service_time is None else time - service_time
        if requested is not None:
            pairs[(round(requested * 1e6), round(time * 1e6))] = status
        entry = seen.setdefault(connection, {"requests": [], "responses": []})
        entry["responses"].append((time, status, requested))

    table = ConnectionTable(counters, on_request, on_response, protocols=protocols)
    for when, frame in data:
        segment = decode(frame, link)
        if segment.__class__ is Segment:
            table.segment(segment, when)
        else:
            counters[segment] += 1
    table.close_all()
    ports = {connection: key[2] for key, (connection, side) in table.table.items() if side == 0}
    return {
        "requests": requests[0],
        "statuses": statuses,
        "pairs": pairs,
        "counters": counters,
        "connections": {ports[connection]: entry for connection, entry in seen.items()},
    }


def compare(full: dict, copy: dict) -> dict:
    """The copy's figures beside the full copy's: pairs right (the full copy's own, with the
    same status class: a cut may keep only the class) and wrong."""

    def kind(status):  # a status class; None: an answer without status (TLS)
        return None if status is None else status // 100

    right = sum(
        pair in full["pairs"] and kind(full["pairs"][pair]) == kind(status)
        for pair, status in copy["pairs"].items()
    )

    def mean(pairs):
        return sum(r - q for q, r in pairs) / len(pairs) / 1e6 if pairs else float("nan")

    return {
        "requests": copy["requests"],
        "responses": sum(n for status, n in copy["statuses"].items() if status is not None),
        "pairs": len(copy["pairs"]),
        "right": right,
        "wrong": len(copy["pairs"]) - right,
        "mean_s": mean(copy["pairs"]),
        "full_mean_s": mean(full["pairs"]),
    }


def cuts(path: Path, lengths: range, protocols: dict | None = None) -> list[tuple[int, dict]]:
    data, link = load(path)
    full = analyse(data, link, protocols)
    return [
        (length, compare(full, analyse(cut(data, length), link, protocols))) for length in lengths
    ]


def record(out: Path, rounds: int = 12, seed: int = 1) -> tuple[int, int]:
    """Run the client against the web rig while tcpdump writes ``out``: (requests the client
    made, access-log entries)."""
    from cosample.dataplane.run import run
    from cosample.lab.web import SERVER_ADDRESS, WebRig

    with tempfile.TemporaryDirectory(prefix="appmon-truncation-") as scratch:
        with WebRig(Path(scratch) / "web", seed=seed) as rig:
            before = len(rig.access_log())
            dump = rig.tcpdump(out)
            time.sleep(0.5)
            result = run(
                rig.lab.exec_argv(
                    rig.client,
                    [
                        sys.executable,
                        "-m",
                        "cosample.lab.httpclient",
                        SERVER_ADDRESS,
                        "--rounds",
                        str(rounds),
                        "--seed",
                        str(seed),
                    ],
                ),
                timeout=120,
            )
            time.sleep(0.5)
            rig.stop(dump)
            made = len([line for line in result.stdout.splitlines() if line.startswith("{")])
            return made, len(rig.access_log()) - before


def _lengths(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record a capture (root)")
    rec.add_argument("out", type=Path)
    rec.add_argument("--rounds", type=int, default=12)
    rec.add_argument("--seed", type=int, default=1)
    show = sub.add_parser("cuts", help="analyse a capture cut at each length")
    show.add_argument("capture", type=Path)
    show.add_argument("--lengths", type=_lengths, default=(64, 200), help="LOW-HIGH bytes")
    show.add_argument("--step", type=int, default=1)
    show.add_argument("--json", action="store_true", help="one JSON object per length")
    show.add_argument("--protocol", action="append", default=[], metavar="PORT=PROTOCOL")
    args = parser.parse_args(argv)
    if args.command == "record":
        from cosample.lab.web import web_available

        reason = web_available()
        if reason:
            print(f"appmon_truncation: cannot record here: {reason}", file=sys.stderr)
            return 2
        made, served = record(args.out, args.rounds, args.seed)
        print(f"{made} requests made, {served} served; wrote {args.out}")
        return 0
    low, high = args.lengths
    from cosample.appmon.protocols import parse_declarations

    rows = cuts(args.capture, range(low, high + 1, args.step), parse_declarations(args.protocol))
    if not args.json:
        print(
            f"{'bytes':>6}{'requests':>9}{'statuses':>9}{'pairs':>7}{'right':>7}{'wrong':>7}"
            f"{'mean ms':>9}{'full ms':>9}"
        )
    for length, row in rows:
        if args.json:
            print(json.dumps({"length": length} | row))
        else:
            print(
                f"{length:>6}{row['requests']:>9}{row['responses']:>9}{row['pairs']:>7}"
                f"{row['right']:>7}{row['wrong']:>7}{row['mean_s'] * 1e3:>9.3f}"
                f"{row['full_mean_s'] * 1e3:>9.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
