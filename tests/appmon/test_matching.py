"""Reassembly and request/response matching on synthetic conversations (pure logic).

The real-traffic counterpart is tests/appmon/test_ground_truth.py (nginx, wrk, a live capture).
"""

from __future__ import annotations

import json
import random

import pytest
from appmon_traffic import Conversation, request, response, run
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon import connections, http, streams
from cosample.appmon.decode import ACK, RST
from cosample.appmon.pcap import tcp_frame

KEY = (bytes([10, 0, 0, 2]), 80)


def only(windows):
    """The single service's statistics merged over the windows."""
    from cosample.appmon.windows import ServiceStats

    total = ServiceStats()
    for window in windows:
        for key, stats in window.services.items():
            assert key == KEY
            total.merge(stats)
    return total


def test_keep_alive_requests_match_their_responses():
    c = Conversation()
    frames = c.handshake(100.0)
    expected = []
    for i in range(5):
        start = 100.0 + i
        frames += [
            c.send(start, request(f"/{i}")),
            c.ack(start + 0.001, False),
            c.send(start + 0.01 * (i + 1), response(200 + 100 * (i % 2), b"x" * 2000), False),
            c.ack(start + 0.2),
        ]
        expected.append(0.01 * (i + 1))
    analyser, windows = run(frames + c.fin(106.0))
    stats = only(windows)
    assert (stats.requests, stats.responses, stats.matched) == (5, 5, 5)
    assert stats.statuses == [0, 3, 2, 0, 0]
    assert stats.total_s == pytest.approx(sum(expected))
    assert stats.min_s == pytest.approx(0.01) and stats.max_s == pytest.approx(0.05)
    assert analyser.dropped() == {}


def test_pipelined_requests_are_matched_oldest_first():
    c = Conversation()
    frames = c.handshake(10.0)
    frames.append(c.send(10.0, request("/a") + request("/b") + request("/c", "POST", b"body")))
    frames.append(c.send(10.5, response(200) + response(404), False))
    frames.append(c.send(11.0, response(500, chunked=True), False))
    _, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (3, 3)
    assert stats.statuses == [0, 1, 0, 1, 1]
    assert stats.total_s == pytest.approx(0.5 + 0.5 + 1.0)
    assert stats.success_rate() == pytest.approx(1 / 3)


def test_request_split_over_segments_counts_once_at_its_first_byte():
    c = Conversation()
    frames = c.handshake(1.0) + c.segments(1.0, request("/split", "POST", b"z" * 300), 7)
    frames[-1] = (1.2, frames[-1][1])
    frames.append(c.send(1.5, response(200), False))
    _, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (1, 1)
    assert stats.total_s == pytest.approx(0.5)


def test_retransmissions_and_overlaps_are_not_counted_twice():
    c = Conversation()
    frames = c.handshake(1.0)
    first = c.send(1.0, request("/1"))
    frames += [first, first, c.send(1.1, response(200), False)]
    # the client resends its next request together with a little of what went before
    overlap_start = c.cseq - 5
    data = request("/1")[-5:] + request("/2")
    frames.append((2.0, tcp_frame(c.client, c.server, c.cport, c.port, overlap_start, ACK, data)))
    c.cseq += len(request("/2"))
    frames.append(c.send(2.3, response(200), False))
    frames.append(frames[-1])
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.responses, stats.matched) == (2, 2, 2)
    assert stats.total_s == pytest.approx(0.1 + 0.3)
    assert analyser.ignored()["retransmitted_segments"] == 2
    assert analyser.ignored()["overlapping_segments"] == 1


def test_out_of_order_segments_wait_for_the_hole():
    c = Conversation()
    frames = c.handshake(1.0)
    parts = c.segments(1.0, request("/a") + request("/b"), 10)
    random.Random(7).shuffle(parts)
    frames += [(1.0 + 0.001 * i, frame) for i, (_, frame) in enumerate(parts)]
    frames += [c.send(2.0, response(200), False), c.send(2.1, response(201), False)]
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (2, 2)
    assert stats.statuses[1] == 2
    assert analyser.dropped() == {}


def test_head_and_interim_responses():
    c = Conversation()
    frames = c.handshake(1.0)
    frames.append(c.send(1.0, request("/", "HEAD")))
    # a HEAD response announces a length but has no body: the next status line follows at once
    frames.append(c.send(1.1, b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n", False))
    frames.append(c.send(2.0, request("/upload", "POST", b"abc")))
    frames.append(c.send(2.05, b"HTTP/1.1 100 Continue\r\n\r\n", False))
    frames.append(c.send(2.2, response(201), False))
    _, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.responses, stats.matched) == (2, 2, 2)
    assert stats.total_s == pytest.approx(0.1 + 0.2)


def test_connection_picked_up_mid_stream():
    c = Conversation()
    frames = [
        c.send(1.0, b"tail of an earlier body"),
        c.send(1.0, b"more body", False),
        c.send(2.0, request()),
        c.send(2.5, response(), False),
    ]
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (1, 1)
    assert analyser.ignored()["not_tracked"] == 2


def test_truncated_capture_hunts_for_the_next_message():
    """A mirror that keeps 200 bytes of each frame: bodies are lost, first lines are not."""
    c = Conversation()
    frames = c.handshake(1.0)
    for i in range(3):
        data = response(200, b"y" * 3000)
        frames += [c.send(1.0 + i, request()), c.send(1.1 + i, data[:1400], False)]
        c.sseq += len(data) - 1410  # a segment without PSH: a selective mirror does not copy it
        frames.append(c.send(1.1 + i, data[-10:], False))
    frames = [(t, f[:200]) for t, f in frames]
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (3, 3)
    assert analyser.ignored()["truncated_segments"] == 3
    assert analyser.ignored()["body_holes_skipped"] == 3
    assert analyser.dropped() == {}


def test_lost_framing_resyncs_at_the_next_message():
    """Chunk boundaries lost: the parser hunts, and the next status line that begins a segment
    is found at once instead of waiting for a hole that will never fill."""
    c = Conversation()
    frames = c.handshake(1.0)
    chunks = b"".join(b"64\r\n" + b"y" * 100 + b"\r\n" for _ in range(30)) + b"0\r\n\r\n"
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    for i in range(3):
        frames += [c.send(1.0 + i, request()), c.send(1.1 + i, data[:100], False)]
        c.sseq += len(data) - 110  # lost: chunk boundaries among them
        frames.append(c.send(1.1 + i, data[-10:], False))
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (3, 3)
    assert stats.total_s == pytest.approx(0.3)
    # rounds 1 and 2: the client's next request acknowledges the lost bytes; round 3: the end
    assert analyser.dropped()["holes_acknowledged"] == 2
    assert analyser.dropped()["stream_gaps"] == 3


def test_a_hole_nobody_acknowledges_is_given_up_after_the_reorder_wait():
    c = Conversation()
    frames = c.handshake(1.0) + [c.send(1.0, request("/1"))]
    c.cseq += 50  # lost, and the server's segments below acknowledge nothing new
    frames += [c.send(1.01, request("/2")), c.send(1.5, request("/3"))]
    analyser, windows = run(frames)
    assert analyser.dropped()["reorder_wait_expired"] == 1
    assert only(windows).requests == 3  # /2 waited 0.49 s, then counted once


def test_memory_bounds_have_named_drops(monkeypatch):
    monkeypatch.setattr(connections, "MAX_PENDING", 3)
    monkeypatch.setattr(streams, "MAX_EARLY_SEGMENTS", 2)
    monkeypatch.setattr(http, "MAX_HEADER", 100)
    c = Conversation()
    frames = c.handshake(1.0) + [c.send(1.0, request() * 5)]
    held = Conversation(cport=40001)
    frames += held.handshake(1.0)
    held.cseq += 10  # a hole of 10 bytes, then three early segments
    frames += [held.send(1.0, b"x" * 10) for _ in range(3)]
    long = Conversation(cport=40002)
    frames += long.handshake(1.0) + [long.send(1.0, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 30)]
    frames += Conversation(cport=40003).handshake(1.0)
    analyser, windows = run(frames, max_connections=3)
    dropped = analyser.dropped()
    assert dropped["pending_requests_full"] == 2
    assert only(windows).requests == 5 + 1  # a full queue loses no load (the long header's too)
    assert dropped["reorder_buffer_full"] >= 1
    assert dropped["header_too_long"] == 1
    assert dropped["connection_table_full"] == 2  # its SYN and SYN-ACK
    assert analyser.table.budget.used == sum(
        stream.early_bytes
        for connection, side in analyser.table.table.values()
        if side == 0
        for stream in connection.streams
    )


def test_early_segments_of_all_connections_share_one_budget():
    frames = []
    for k in range(4):
        c = Conversation(cport=41000 + k)
        frames += c.handshake(1.0) + [c.send(1.0, request())]
        c.cseq += 100  # a hole, then 3 early segments of 1000 bytes
        frames += [c.send(1.0, b"x" * 1000) for _ in range(3)]
    from cosample.appmon.analyser import Analyser

    analyser = Analyser(10.0)
    analyser.table.budget.limit = 7000
    for time, frame in frames:
        analyser.ingest(frame, time)
    assert analyser.counters["reorder_memory_full"] == 2  # connections 3 and 4 hit the limit
    assert analyser.table.budget.used <= 7000
    analyser.finish()
    assert analyser.table.budget.used == 0


def test_reset_closes_and_late_segments_are_not_counted():
    c = Conversation()
    frames = c.handshake(1.0) + [c.send(1.0, request())]
    rst = (1.1, tcp_frame(c.server, c.client, c.port, c.cport, c.sseq, RST))
    late = (1.2, tcp_frame(c.client, c.server, c.cport, c.port, c.cseq, ACK, request()))
    analyser, windows = run(frames + [rst, late])
    stats = only(windows)
    assert (stats.requests, stats.matched) == (1, 0)
    assert analyser.dropped()["requests_unanswered"] == 1
    assert analyser.ignored()["segments_after_close"] == 1


def test_windows_are_aligned_and_keep_known_services():
    c = Conversation()
    frames = c.handshake(100.0) + [
        c.send(100.5, request()),
        c.send(101.5, response(), False),
        c.send(113.0, request()),
        c.send(113.2, response(), False),
    ]
    _, windows = run(frames, window_s=5.0)
    assert [w.start for w in windows] == [100.0, 110.0]
    first, second = (w.services[KEY] for w in windows)
    assert (first.requests, first.responses, second.requests, second.responses) == (1, 1, 1, 1)
    assert first.min_s == pytest.approx(1.0) and second.min_s == pytest.approx(0.2)


def test_service_per_address_and_port():
    a, b = Conversation(), Conversation(server="2001:db8::9", client="2001:db8::1", port=8080)
    frames = (
        a.handshake(1.0)
        + b.handshake(1.0)
        + [a.send(1.0, request()), b.send(1.0, request()), b.send(1.3, response(503), False)]
    )
    analyser, windows = run(frames, ports=frozenset({8080}))
    (window,) = windows
    from cosample.appmon.windows import service_name

    assert [service_name(key) for key in window.services] == ["[2001:db8::9]:8080"]
    assert analyser.ignored()["other_port"] == 3


def test_a_lost_response_does_not_shift_the_matching():
    """Keep-alive, one request at a time; the capture lost response 2 and request 4: every other
    response is matched to its own request (the acknowledgement numbers tell)."""
    c = Conversation()
    frames = c.handshake(1.0)
    for i in range(6):
        start = 1.0 + i
        req = c.send(start, request(f"/{i}"))
        resp = c.send(start + 0.01 * (i + 1), response(200), False)
        frames += [f for f, lost in ((req, i == 4), (resp, i == 2)) if not lost]
        frames.append(c.ack(start + 0.5))
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.responses, stats.matched) == (5, 5, 4)
    assert stats.total_s == pytest.approx(0.01 + 0.02 + 0.04 + 0.06)
    assert analyser.dropped()["requests_answer_lost"] == 1
    assert analyser.dropped()["responses_without_request"] == 1


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.booleans(), st.integers(6, 60)), min_size=1, max_size=6
    ),  # segments of 6 bytes or more: within the 32 held segments
    st.randoms(use_true_random=False),
)
def test_any_segmentation_reordering_and_duplication_counts_each_message_once(exchanges, draw):
    """Each message cut into random segments, shuffled and partly sent twice: the same counts
    and service times as the plain conversation."""
    c = Conversation()
    frames, expected = c.handshake(1.0), []
    for index, (kind, chunked, size) in enumerate(exchanges):
        start = 2.0 + index
        method, body = (("GET", b""), ("POST", b"p" * 50), ("HEAD", b""))[kind]
        answer = {
            0: response(200, b"r" * 90, chunked=chunked),
            1: b"HTTP/1.1 204 No Content\r\n\r\n",  # no body, whatever it announces
            2: b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n",
        }[kind]  # HEAD
        for data, from_client, when in (
            (request(f"/{index}", method, body), True, start),
            (answer, False, start + 0.001 * (index + 1)),
        ):
            segments = c.segments(when, data, size, from_client)
            shuffled = segments[:1] + draw.sample(segments[1:], len(segments) - 1)
            frames += shuffled + draw.sample(segments, min(2, len(segments)))
        expected.append(0.001 * (index + 1))
    analyser, windows = run(frames)
    stats = only(windows)
    assert (stats.requests, stats.responses, stats.matched) == (len(exchanges),) * 3
    assert stats.total_s == pytest.approx(sum(expected))
    assert analyser.dropped() == {}


def test_first_lines_cut_by_a_short_snap_length_still_count():
    """78 bytes per frame (Ethernet, IPv4, TCP with 12 bytes of options, 12 of payload): the
    method and ``HTTP/1.1 DDD`` are enough for load, status and service time."""
    c = Conversation()
    frames = c.handshake(1.0)
    for i, status in enumerate((200, 503, 404)):
        frames += [
            c.send(1.0 + i, request(f"/a/long/path/{i}")),
            c.send(1.2 + i, response(status, b"z" * 500), False),
        ]
    analyser, windows = run([(t, f[:66]) for t, f in frames])  # 12 bytes of payload (no options)
    stats = only(windows)
    assert (stats.requests, stats.matched) == (3, 3)
    assert stats.statuses == [0, 1, 0, 1, 1]
    assert stats.total_s == pytest.approx(0.6)
    assert analyser.ignored()["first_lines_cut"] == 6


def test_a_share_of_connections_by_client_port_and_requests_per_connection():
    """``--share-residues``: only connections whose client port's low 8 bits are below it, as
    the selective mirror's flows select; each window counts requests per connection (what the
    rate's connection-level interval needs, ``appmon.rateinterval``)."""
    frames = []
    for k, cport in enumerate((40000, 40001, 40100, 40127)):  # low bytes 64, 65, 164, 191
        c = Conversation(cport=cport)
        frames += c.handshake(100.0 + k)
        for i in range(k + 1):
            start = 100.2 + k + 0.1 * i
            frames += [c.send(start, request(f"/{i}")), c.send(start + 0.01, response(200), False)]
    frames.sort(key=lambda frame: frame[0])
    analyser, windows = run(frames, selected=165)  # residues 0-164: the first three
    stats = only(windows)
    assert stats.requests == 1 + 2 + 3 and stats.matched == 6
    assert analyser.counters["not_selected"] >= 1 and "not_selected" in analyser.ignored()
    (window,) = windows
    assert window.services[KEY].connection_counts() == (3, 1 + 4 + 9)
    _, every = run(frames)
    (window,) = every
    assert window.services[KEY].connection_counts() == (4, 1 + 4 + 9 + 16)


def test_each_window_counts_final_and_successful_responses_per_connection():
    """What the success rate's connection-level interval needs (``appmon.successinterval``):
    per connection n_i final responses, ok_i of them 2xx/3xx, summed as n_i^2, ok_i n_i, ok_i^2;
    the snapshot carries them and an interval holding the rate seen."""
    from cosample.appmon.snapshot import parse_snapshot, snapshot

    frames = []
    for k, (cport, statuses) in enumerate(
        ((40000, (200, 503)), (40001, (500, 500)), (40002, (302, 200, 404)))
    ):
        c = Conversation(cport=cport)
        frames += c.handshake(100.0 + k)
        for i, status in enumerate(statuses):
            start = 100.2 + k + 0.1 * i
            frames += [
                c.send(start, request(f"/{i}")),
                c.send(start + 0.01, response(status), False),
            ]
    frames.sort(key=lambda frame: frame[0])
    _, windows = run(frames)
    (window,) = windows
    assert window.services[KEY].success_sums() == (3, 4 + 4 + 9, 2 + 0 + 6, 1 + 0 + 4)
    snap = snapshot(
        window, analyser="a", frames=len(frames), connections=3, dropped={}, ignored={}, share=0.5
    )
    (entry,) = parse_snapshot(snap.to_json()).services
    assert (
        entry.final_connections,
        entry.final_squares,
        entry.final_ok_products,
        entry.ok_squares,
    ) == (3, 17, 8, 5)
    assert entry.final_df >= 1  # residuals 1 - 6/7, -6/7 and 2 - 9/7
    low, high = entry.success_rate_ci95
    assert entry.success_rate == pytest.approx(3 / 7) and low < 3 / 7 < high
    every = snapshot(
        window, analyser="a", frames=len(frames), connections=3, dropped={}, ignored={}
    )
    assert every.services[0].success_rate_ci95 == [3 / 7, 3 / 7]  # share 1: counted
    old = json.loads(snap.to_json())  # a snapshot written before these fields reads back
    for name in (
        "final_connections",
        "final_squares",
        "final_ok_products",
        "ok_squares",
        "final_df",
        "success_rate_ci95",
    ):
        del old["services"][0][name]
    assert parse_snapshot(json.dumps(old)).services[0].success_rate_ci95 is None
