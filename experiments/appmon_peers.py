"""tshark as the peer of the analyser on HTTP/2 and TLS captures, and the analyser's own pairs.

- ``tshark_h2``: per HTTP/2 stream (cleartext, or decrypted with a key log), the time of the
  frame that carries the request's HEADERS and of the one with the final response's HEADERS,
  and its ``:status``;
- ``tshark_tls``: per TLS connection decrypted with the session keys (``SSLKEYLOGFILE``), the
  ClientHello's and the client's Finished's times (the handshake), and each HTTP/1.1 request's
  and response's time, taken at the first segment of the record that carries it (tshark reports
  a message where its record ends; the analyser where it begins);
- ``pairs``: the analyser's (connection table's) requests, answers and handshakes per client
  port, from the same capture.

All times are capture times (seconds); client ports name connections.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

from cosample.appmon.connections import ConnectionTable
from cosample.appmon.decode import Segment, decode
from cosample.appmon.pcap import frames as read_frames
from cosample.appmon.pcap import read_link


def _tshark(capture: Path, options: list[str], fields: list[str], display: str) -> list[dict]:
    argv = ["tshark", "-n", "-r", str(capture), *options, "-Y", display, "-T", "json"]
    for field in fields:
        argv += ["-e", field]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    return [packet["_source"]["layers"] for packet in json.loads(result.stdout or "[]")]


def _keys(keylog: Path | None) -> list[str]:
    return ["-o", f"tls.keylog_file:{keylog}"] if keylog else []


def tshark_h2(capture: Path, server_port: int, keylog: Path | None = None) -> dict:
    """(client port, stream id) -> {"request": time, "response": time, "status": int}. In
    clear text the port is read as HTTP/1.x, which tshark follows into HTTP/2 on a 101 to h2c
    (the Upgrade request is then stream 1's request) as well as from a preface."""
    options = _keys(keylog) + ["-d", f"tcp.port=={server_port},http"] * (keylog is None)
    layers = _tshark(
        capture,
        options,
        [
            "frame.time_epoch",
            "tcp.srcport",
            "tcp.dstport",
            "http.upgrade",
            "http2.type",
            "http2.streamid",
            "http2.headers.status",
        ],
        f"tcp.port=={server_port} && (http2.type==1 || http.upgrade)",
    )
    streams: dict[tuple[int, int], dict] = {}
    for packet in layers:
        time = float(packet["frame.time_epoch"][0])
        source, destination = int(packet["tcp.srcport"][0]), int(packet["tcp.dstport"][0])
        if destination == server_port and "h2c" in packet.get("http.upgrade", []):
            streams.setdefault((source, 1), {"request": time})  # the Upgrade request
        kinds, ids = packet.get("http2.type", []), packet.get("http2.streamid", [])
        statuses = iter(packet.get("http2.headers.status", []))
        for kind, stream in zip(kinds, ids):
            if kind != "1":
                continue
            if destination == server_port:
                streams.setdefault((source, int(stream)), {"request": time})
                continue
            entry = streams.get((destination, int(stream)))
            status = next(statuses, None)
            if entry is None or status is None or "status" in entry:
                continue  # trailers, or a stream opened before the capture
            if int(status) >= 200:
                entry |= {"response": time, "status": int(status)}
    return streams


def tshark_tls(capture: Path, server_port: int, keylog: Path) -> dict:
    """client port -> {"hello", "finished": times, "requests": [times], "responses":
    [(time, status)]} for the connections the key log decrypts (the others have no requests)."""
    fields = [
        "frame.number",
        "frame.time_epoch",
        "tcp.srcport",
        "tcp.dstport",
        "tcp.segment",
        "tls.handshake.type",
        "http.request.method",
        "http.response.code",
    ]
    layers = _tshark(capture, _keys(keylog), fields, f"tcp.port=={server_port} && tls")
    times = {int(p["frame.number"][0]): float(p["frame.time_epoch"][0]) for p in layers}
    out: dict[int, dict] = {}
    for packet in layers:
        time = float(packet["frame.time_epoch"][0])
        first = min((int(n) for n in packet.get("tcp.segment", [])), default=None)
        start = times.get(first, time) if first is not None else time
        source, destination = int(packet["tcp.srcport"][0]), int(packet["tcp.dstport"][0])
        client = source if destination == server_port else destination
        entry = out.setdefault(
            client, {"hello": None, "finished": None, "requests": [], "responses": []}
        )
        kinds = packet.get("tls.handshake.type", [])
        if destination == server_port:
            if "1" in kinds and entry["hello"] is None:
                entry["hello"] = time
            if "20" in kinds:
                entry["finished"] = time
            entry["requests"] += [start] * len(packet.get("http.request.method", []))
        else:
            entry["responses"] += [(start, int(c)) for c in packet.get("http.response.code", [])]
    return out


def pairs(capture: Path, protocols: dict[int, str]) -> dict[int, dict]:
    """``frame_pairs`` of a capture file."""
    return frame_pairs(list(read_frames(capture)), read_link(capture), protocols)


def frame_pairs(data: list[tuple[float, bytes]], link: int, protocols: dict[int, str]) -> dict:
    """client port -> {"requests": [times], "answers": [(time, status or None, request time
    or None)], "handshakes": [(start, seconds)]}, as the analyser's connection table sees them."""
    seen: dict[object, dict] = {}

    def entry(connection):
        return seen.setdefault(connection, {"requests": [], "answers": [], "handshakes": []})

    def on_request(service, time, connection):
        entry(connection)["requests"].append(time)

    def on_response(service, time, status, service_time, connection):
        requested = None if service_time is None else time - service_time
        entry(connection)["answers"].append((time, status, requested))

    handshakes: list[tuple[tuple, float, float]] = []

    def on_connection(service, time, protocol, handshake_s):
        if handshake_s is not None:
            handshakes.append((service, time, handshake_s))

    table = ConnectionTable(
        Counter(), on_request, on_response, protocols=protocols, on_connection=on_connection
    )
    for when, frame in data:
        segment = decode(frame, link)
        if segment.__class__ is Segment:
            count = len(handshakes)
            table.segment(segment, when)
            if len(handshakes) > count:  # the handshake this segment completed: its connection
                connection = table.table[(segment.src, segment.dst, segment.sport, segment.dport)]
                entry(connection[0])["handshakes"].append(handshakes[-1][1:])
    ports = {connection: key[2] for key, (connection, side) in table.table.items() if side == 0}
    table.close_all()
    return {ports[connection]: value for connection, value in seen.items() if connection in ports}
