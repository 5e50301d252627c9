"""HTTP/2 in clear text (h2c) on synthetic conversations: per-stream pairing, HPACK, framing.

Frames are built here, header blocks with ``hpack``'s encoder (the one nginx's and h2load's
peers would decode alike); the real-traffic counterpart (nginx, h2load, tshark as the peer per
stream) is tests/appmon/test_protocols_real.py.
"""

from __future__ import annotations

import pytest
from appmon_traffic import Conversation, run
from appmon_traffic import h2_frame as frame
from appmon_traffic import h2_request_block as request_block
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon.h2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PADDED,
    PREFACE,
    PRIORITY_FLAG,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    plausible_frame,
)
from cosample.appmon.hpackwalk import first_status

KEY = (bytes([10, 0, 0, 2]), 8080)


class Exchange:
    """Client and server byte streams of one h2c connection, with the times messages begin."""

    def __init__(self) -> None:
        self.server_encoder = Encoder()
        self.events: list[tuple[float, bool, bytes]] = []  # (time, from client, bytes)

    def client(self, time: float, data: bytes) -> None:
        self.events.append((time, True, data))

    def server(self, time: float, data: bytes) -> None:
        self.events.append((time, False, data))

    def response(self, status: int, *more: tuple[str, str]) -> bytes:
        return self.server_encoder.encode([(":status", str(status)), *more])

    def frames(self, cport: int = 40000, size: int | None = None, port: int = 8080):
        """The events as TCP segments (each cut in pieces of ``size`` bytes when given)."""
        c = Conversation(cport=cport, port=port)
        out = c.handshake(0.5)
        for time, from_client, data in self.events:
            out += c.segments(time, data, size or len(data), from_client)
        return out


def conversation() -> tuple[Exchange, list[tuple[float, int]]]:
    """Three multiplexed streams answered out of order, with CONTINUATION, padding, priority,
    an interim 103, trailers, a body in DATA frames, and a stream the client resets."""
    x = Exchange()
    x.client(1.0, PREFACE + frame(SETTINGS, 0, 0, b"\x00\x03\x00\x00\x00\x64"))
    x.server(1.0005, frame(SETTINGS, 0, 0) + frame(SETTINGS, 1, 0))
    x.client(1.001, frame(HEADERS, END_HEADERS | END_STREAM, 1, request_block("/a")))
    block = request_block("/b")
    x.client(
        1.002,
        frame(HEADERS, END_STREAM, 3, block[:3]) + frame(CONTINUATION, END_HEADERS, 3, block[3:]),
    )
    x.client(1.003, frame(HEADERS, END_HEADERS | END_STREAM, 5, request_block("/c")))
    x.client(1.004, frame(HEADERS, END_HEADERS | END_STREAM, 7, request_block("/d")))
    x.client(1.0045, frame(RST_STREAM, 0, 7, b"\x00\x00\x00\x08"))
    # stream 3 first: 503 (a literal the encoder indexes), padded, with priority
    block = x.response(503, ("server", "nginx"))
    payload = bytes([4]) + b"\x00\x00\x00\x01\x10" + block + b"\x00" * 4
    x.server(1.020, frame(HEADERS, END_HEADERS | PADDED | PRIORITY_FLAG, 3, payload))
    x.server(1.021, frame(DATA, END_STREAM, 3, b"x" * 3000))
    # stream 1: an interim 103, then 200 split over HEADERS and CONTINUATION, a body, trailers
    x.server(1.030, frame(HEADERS, END_HEADERS, 1, x.response(103)))
    block = x.response(200, ("content-type", "text/plain"))
    x.server(
        1.040,
        frame(HEADERS, 0, 1, block[:2]) + frame(CONTINUATION, END_HEADERS, 1, block[2:]),
    )
    x.server(1.041, frame(DATA, 0, 1, b"y" * 20000) + frame(WINDOW_UPDATE, 0, 0, b"\0\0\1\0"))
    x.server(1.042, frame(HEADERS, END_HEADERS | END_STREAM, 1, trailers(x)))
    # stream 5: a second 503, from the dynamic table now
    x.server(1.050, frame(HEADERS, END_HEADERS | END_STREAM, 5, x.response(503)))
    expected = [(1.020, 503, 0.018), (1.040, 200, 0.039), (1.050, 503, 0.047)]
    return x, expected


def trailers(x: Exchange) -> bytes:
    return x.server_encoder.encode([("grpc-status", "0")])


def check(analyser, windows, expected) -> None:
    services = {key: stats for window in windows for key, stats in window.services.items()}
    stats = services[KEY]
    assert stats.protocol == "h2c"
    assert (stats.requests, stats.responses, stats.matched) == (4, 3, 3)
    assert stats.statuses == [0, 1, 0, 0, 2]
    assert stats.total_s == pytest.approx(sum(t for _, _, t in expected))
    assert stats.success_rate() == pytest.approx(1 / 3)
    assert analyser.counters["streams_reset"] == 1
    assert not analyser.dropped().keys() - {"streams_reset"}


def test_streams_pair_by_id_whatever_the_order():
    x, expected = conversation()
    analyser, windows = run(x.frames())
    check(analyser, windows, expected)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(3, 200))
def test_any_segmentation_gives_the_same_pairs(size):
    """Down to 3 bytes a segment (the preface's ``PRI`` is what tells h2c on an undeclared
    port; a client that sends fewer first is taken for HTTP/1.x, docs/appmon.md)."""
    x, expected = conversation()
    analyser, windows = run(x.frames(size=size))
    check(analyser, windows, expected)


def test_a_declared_port_needs_no_preface_in_one_piece():
    x, expected = conversation()
    analyser, windows = run(x.frames(size=1), protocols={8080: "h2c"})
    check(analyser, windows, expected)


def test_a_declared_port_and_a_detected_preface_agree():
    x, expected = conversation()
    analyser, windows = run(x.frames(port=9000), protocols={9000: "h2c"})
    services = {key: stats for window in windows for key, stats in window.services.items()}
    assert services[(KEY[0], 9000)].matched == 3


def test_a_lost_header_block_leaves_the_static_statuses_readable():
    """The segment with stream 1's response headers is lost: the dynamic table can no longer
    be trusted, so stream 5's 503 (a dynamic-table reference) has no status, yet it is paired
    (its service time is known); statuses sent as static entries or literals still read."""
    x = Exchange()
    x.client(1.0, PREFACE + frame(SETTINGS, 0, 0))
    for stream in (1, 3, 5, 7):
        x.client(1.0 + stream / 1000, frame(HEADERS, END_HEADERS | END_STREAM, stream, b"\x82"))
    x.server(1.01, frame(HEADERS, END_HEADERS, 1, x.response(503)))  # indexes 503
    x.server(1.02, frame(HEADERS, END_HEADERS, 3, x.response(200)))  # static 200
    x.server(1.03, frame(HEADERS, END_HEADERS, 5, x.response(503)))  # dynamic index
    x.server(1.04, frame(HEADERS, END_HEADERS, 7, Encoder().encode([(":status", "418")])))
    frames = x.frames()
    lost = next(i for i, (t, _) in enumerate(frames) if t == 1.01)
    analyser, windows = run(frames[:lost] + frames[lost + 1 :])
    stats = windows[0].services[KEY]
    assert (stats.requests, stats.matched, stats.responses, stats.unread) == (4, 3, 2, 1)
    assert stats.statuses == [0, 1, 0, 1, 0]  # the static 200 and the literal 418
    assert analyser.counters["statuses_unread"] == 1


def test_first_status_reads_static_entries_and_literals_only():
    encoder = Encoder()
    assert first_status(encoder.encode([(":status", "200")])) == 200
    literal = encoder.encode([(":status", "503")])
    assert literal[0] & 0xC0 == 0x40 and first_status(literal) == 503  # Huffman-coded literal
    assert first_status(encoder.encode([(":status", "503")])) is None  # now a dynamic entry
    assert first_status(b"\x08\x03204") == 204  # literal without indexing, plain text
    assert first_status(b"\x3f\xe1\x1f\x8d") == 404  # a table size update first
    assert first_status(b"") is None and first_status(b"\x48\x05") is None


def test_plausible_frames_for_hunting():
    assert plausible_frame(frame(HEADERS, 4, 1, b"\x82"))
    assert plausible_frame(frame(SETTINGS, 0, 0))
    assert not plausible_frame(frame(SETTINGS, 0, 1))  # control frames are on stream 0
    assert not plausible_frame(frame(DATA, 0, 0, b"x"))
    assert not plausible_frame(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")
    assert not plausible_frame(b"HTTP/1.1 200 OK\r\n")


HEADER = st.tuples(
    st.sampled_from(["server", "content-type", "date", "x-trace", "set-cookie"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 /:;=-", max_size=40),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([200, 201, 204, 302, 304, 404, 418, 500, 503]),
            st.lists(HEADER, max_size=6),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from([4096, 256, 64]),
)
def test_the_walk_reads_what_the_library_decodes(responses, table_size):
    """Blocks from the library's encoder (Huffman, incremental indexing, evictions in a small
    table): the walk reads each block's :status as a full decode does, handing only the blocks
    that change the table to the library (the analyser's use)."""
    from hpack import Decoder

    from cosample.appmon.hpackwalk import walk

    encoder, reference, ours = Encoder(), Decoder(), Decoder()
    encoder.header_table_size = table_size
    for status, headers in responses:
        block = encoder.encode([(":status", str(status)), *headers])
        truth = dict(reference.decode(block))[":status"]
        found, changes = walk(block, ours.header_table)
        if changes:
            ours.decode(block)
        assert found == int(truth)
