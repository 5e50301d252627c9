"""h2c reached by HTTP/1.1's ``Upgrade: h2c`` (RFC 9113 section 3.2's predecessor, RFC 7540
3.2): the analyser follows the 101 into HTTP/2 and answers the Upgrade request on stream 1.

- A real exchange: ``tests/data/appmon/upgrade-nghttpx.pcap`` (``python -m
  cosample.experiments.appmon_upgrade --connections 4 --requests 6 --sample ...``): nghttpx
  (nginx takes no Upgrade) before the rig's backend, curl ``--http2`` and ``nghttp -u`` as
  clients; tshark, which follows the Upgrade too, is the peer per stream.
- Synthetic conversations for what a capture may do to it: every segmentation, the 101 and the
  server's first frames in one segment, the client's preface captured before the 101, a 101 to
  another protocol, a 101 whose header block a truncating copy cut.
- Root: the same against a live nghttpx and its access log.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from appmon_traffic import Conversation, run
from appmon_traffic import h2_frame as frame
from appmon_traffic import h2_request_block as request_block
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon.h2 import DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS
from cosample.appmon.pcap import frames as read_frames
from cosample.appmon.pcap import read_link
from cosample.experiments import appmon_upgrade
from cosample.experiments.appmon_peers import frame_pairs, tshark_h2

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "appmon" / "upgrade-nghttpx.pcap"
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
PORT = 8082
KEY = (bytes([10, 0, 0, 2]), PORT)
UPGRADE = (
    b"GET /a HTTP/1.1\r\nHost: rig\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
)
SWITCHED = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"


def exchange(encoder: Encoder | None = None) -> list[tuple[float, bool, bytes]]:
    """An Upgrade request answered 200 on stream 1 (30 ms), then stream 3 answered 503 (5 ms):
    (time, from client, bytes). The server's SETTINGS rides in the 101's segment, as
    nghttpx's does."""
    encoder = encoder or Encoder()
    return [
        (1.000, True, UPGRADE),
        (1.010, False, SWITCHED + frame(SETTINGS, 0, 0)),
        (1.011, True, PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, 1, 0)),
        (1.030, False, frame(HEADERS, END_HEADERS, 1, encoder.encode([(":status", "200")]))),
        (1.031, False, frame(DATA, END_STREAM, 1, b"x" * 3000)),
        (1.040, True, frame(HEADERS, END_HEADERS | END_STREAM, 3, request_block("/b"))),
        (1.045, False, frame(HEADERS, END_HEADERS, 3, encoder.encode([(":status", "503")]))),
        (1.046, False, frame(DATA, END_STREAM, 3, b"y" * 10)),
    ]


def frames(events, size: int | None = None, cport: int = 40000):
    c = Conversation(cport=cport, port=PORT)
    out = c.handshake(0.5)
    for time, from_client, data in events:
        out += c.segments(time, data, size or len(data), from_client)
    return out + c.fin(1.1)


def stats_of(windows):
    services = {key: stats for window in windows for key, stats in window.services.items()}
    return services[KEY]


@pytest.mark.parametrize("protocols", [{PORT: "h2c"}, None], ids=["declared", "undeclared"])
def test_the_upgrade_request_is_answered_on_stream_1(protocols):
    analyser, windows = run(frames(exchange()), protocols=protocols)
    stats = stats_of(windows)
    assert stats.protocol == "h2c"
    assert (stats.requests, stats.responses, stats.matched) == (2, 2, 2)
    assert stats.statuses == [0, 1, 0, 0, 1]  # 200 and 503: the 101 is no answer
    assert stats.total_s == pytest.approx(0.030 + 0.005)
    assert analyser.counters["h2c_upgrades"] == 1
    assert not analyser.dropped()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 120))
def test_any_segmentation_gives_the_same_pairs(size):
    """Down to one byte a segment, the port declared (an undeclared one needs three bytes of a
    first segment to tell HTTP/1.x from HTTP/2, docs/appmon.md)."""
    _, windows = run(frames(exchange(), size=size), protocols={PORT: "h2c"})
    stats = stats_of(windows)
    assert (stats.requests, stats.matched, stats.statuses) == (2, 2, [0, 1, 0, 0, 1])
    assert stats.total_s == pytest.approx(0.035)


def test_a_preface_captured_before_the_101_is_stepped_over():
    """A capture may show the client's preface before the server's 101 (copies of the two
    directions on two paths; the client sends it a round trip after the 101): framing resumes
    at the client's next segment that starts with a frame."""
    events = exchange()
    events.insert(1, events.pop(2))
    _, windows = run(frames(events), protocols={PORT: "h2c"})
    stats = stats_of(windows)
    assert (stats.requests, stats.matched) == (2, 2)
    assert stats.statuses == [0, 1, 0, 0, 1]


def test_a_101_to_another_protocol_is_the_answer():
    """A WebSocket's 101 answers its request (the service time to it, status class 1xx) and
    nothing after it is read as HTTP."""
    c = Conversation(port=PORT)
    socket = UPGRADE.replace(b"h2c", b"websocket")
    out = c.handshake(0.5) + [
        c.send(1.0, socket),
        c.send(1.002, SWITCHED.replace(b"h2c", b"websocket") + b"\x81\x05hello", False),
        c.send(1.003, b"\x81\x05GET /"),
    ]
    analyser, windows = run(out)
    stats = stats_of(windows)
    assert (stats.requests, stats.responses, stats.matched) == (1, 1, 1)
    assert stats.statuses == [1, 0, 0, 0, 0]
    assert stats.total_s == pytest.approx(0.002)
    assert analyser.counters["h2c_upgrades"] == 0


def test_a_101_cut_before_its_header_block_ends_is_the_answer():
    """A truncating copy (plans never truncate h2c; an HTTP/1.x service may still upgrade) that
    hides the 101's Upgrade header: the 101 answers, the connection is read no further."""
    events = frames(exchange())
    cut = []
    for time, data in events:
        cut.append((time, data[: 66 + 40] if b"101 Switching" in data else data))
    analyser, windows = run(cut)
    stats = stats_of(windows)
    assert (stats.requests, stats.matched) == (1, 1)
    assert stats.statuses[0] == 1
    assert analyser.counters["h2c_upgrades"] == 0


@pytest.fixture(scope="module")
def capture_pairs():
    link = read_link(CAPTURE)
    data = list(read_frames(CAPTURE))
    return {
        "declared": frame_pairs(data, link, {PORT: "h2c"}),
        "undeclared": frame_pairs(data, link, {}),
    }


def answered(pairs) -> list[tuple]:
    return sorted(
        (port, round(asked, 6), round(when, 6), status)
        for port, entry in pairs.items()
        for when, status, asked in entry["answers"]
        if asked is not None
    )


@pytest.mark.parametrize("how", ["declared", "undeclared"])
def test_nghttpx_capture_every_stream_as_recorded(capture_pairs, how):
    """The real exchange without a peer: 4 connections of 6 requests, each upgraded on its
    first, every one answered (6 of them 500: every fourth URL), no answer without a request."""
    pairs = capture_pairs[how]
    assert len(pairs) == 4
    assert all(len(entry["requests"]) == 6 for entry in pairs.values())
    answers = answered(pairs)
    assert len(answers) == 24
    assert sum(status == 500 for *_, status in answers) == 6
    assert all(status in (200, 500) for *_, status in answers)
    firsts = {port: round(min(entry["requests"]), 6) for port, entry in pairs.items()}
    assert sum(asked == firsts[port] for port, asked, _, _ in answers) == 4


@needs_tshark
@pytest.mark.parametrize("how", ["declared", "undeclared"])
def test_nghttpx_capture_against_tshark(capture_pairs, how):
    """Every stream, the Upgrade requests' included, paired as tshark pairs it: the same
    request and answer times (to the microsecond) and status."""
    peer = tshark_h2(CAPTURE, PORT)
    theirs = sorted(
        (port, round(entry["request"], 6), round(entry["response"], 6), entry["status"])
        for (port, _), entry in peer.items()
        if "response" in entry
    )
    assert len(theirs) == 24
    assert answered(capture_pairs[how]) == theirs


@pytest.mark.root
@pytest.mark.slow
def test_live_nghttpx_against_its_log_and_tshark(tmp_path):
    reason = appmon_upgrade.upgrade_available()
    if reason:
        pytest.skip(reason)
    capture = tmp_path / "upgrade.pcap"
    logged = appmon_upgrade.record(capture, connections=2, requests=5)
    assert len(logged) == 10
    assert sum(entry.version == "HTTP/1.1" for entry in logged) == 2  # the Upgrade requests
    rows = appmon_upgrade.compare(capture, logged)
    assert len(rows) == 10
    for row in rows:
        if row["analyser"] is not None:
            assert row["analyser"] == row["reference"], row
    requests = [row for row in rows if row["metric"] == "requests"]
    assert all(row["reference"] == 10 for row in requests)
