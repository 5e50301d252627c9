"""Truncated copies of real captures, cut at every length, against the full copy.

``tests/data/appmon/mixed-nginx.pcap`` (``python -m cosample.experiments.appmon_truncation
record``): nginx and its backend answering ``cosample.lab.httpclient``, which pipelines groups of
4 requests, splits requests in two segments at random bytes (down to ``GE`` + ``T /...``), sends
POST bodies in a segment of their own, HEAD requests (answers without a body), chunked answers
and plain keep-alive; 112 requests, each message starting a segment. ``pipelined-nginx.pcap``
(docs: test_pipelining.py) has frames of at most 256 bytes. A truncating mirror's copy is every
frame cut to one length; the IP header still tells each segment's length.

At every length from 64 bytes up to the longest frame:

- every pair the analyser makes (a response matched to a request) is one the full copy makes,
  with the same status class: never a wrong pair;
- once every data segment keeps 10 bytes of payload (``HTTP/1.1 2``, Linux's 12 bytes of TCP
  options: 76 bytes), the pairs are all the full copy's and requests and status classes equal
  it; once it keeps 5 (``POST ``), every request is counted.

The same frames without TCP options (the options cut out of each frame, as a capture written
without them) are exact from 64 bytes. Hypothesis adds retransmissions (copies of data segments
later in the capture) and reordering (a segment moved behind later ones of its direction, never
behind the other side's acknowledgement of it) and checks the same at a drawn length against the
edited capture's full copy.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon.decode import FIN, RST, Segment, decode
from cosample.experiments.appmon_truncation import analyse, compare, cut, load

DATA = Path(__file__).resolve().parents[1] / "data" / "appmon"
MIXED, PIPELINED = DATA / "mixed-nginx.pcap", DATA / "pipelined-nginx.pcap"


def payload_offset(frame: bytes) -> int:
    """Where the TCP payload starts in an Ethernet/IPv4 frame."""
    tcp = 14 + (frame[14] & 0x0F) * 4
    return tcp + (frame[tcp + 12] >> 4) * 4


def without_options(frame: bytes) -> bytes:
    """The frame with its TCP options removed (and the IP total length shortened)."""
    tcp = 14 + (frame[14] & 0x0F) * 4
    options = (frame[tcp + 12] >> 4) * 4 - 20
    if not options:
        return frame
    total = struct.unpack_from("!H", frame, 16)[0] - options
    head = frame[:16] + struct.pack("!H", total) + frame[18 : tcp + 12]
    return (
        head
        + bytes([0x50 | frame[tcp + 12] & 0x0F])
        + frame[tcp + 13 : tcp + 20]
        + frame[tcp + 20 + options :]
    )


def thresholds(data) -> tuple[int, int]:
    """(length from which every data segment keeps 5 bytes of payload, and 10 bytes)."""
    deepest = max(payload_offset(frame) for _, frame in data if len(frame) > payload_offset(frame))
    return deepest + 5, deepest + 10


def check_cut(full: dict, data, length: int, method_from: int, status_from: int) -> dict:
    copy = analyse(cut(data, length))
    row = compare(full, copy)
    assert row["wrong"] == 0, (length, row)
    assert copy["requests"] <= full["requests"], length
    classes = Counter({s // 100: n for s, n in copy["statuses"].items()})
    truth = Counter()
    for status, n in full["statuses"].items():
        truth[status // 100] += n
    assert not classes - truth, length  # never a status the full copy does not have
    if length >= method_from:
        assert copy["requests"] == full["requests"], (length, row)
    if length >= status_from:
        assert classes == truth, length
        assert row["right"] == len(full["pairs"]), (length, row)
    return row


@pytest.mark.parametrize("capture", [MIXED, PIPELINED], ids=["mixed", "pipelined"])
def test_every_cut_length_pairs_as_the_full_copy(capture):
    data, _ = load(capture)
    full = analyse(data)
    assert len(full["pairs"]) == full["requests"] == sum(full["statuses"].values())
    assert full["requests"] in (112, 60)
    method_from, status_from = thresholds(data)
    assert (method_from, status_from) == (71, 76)  # Linux: 12 bytes of TCP options
    longest = max(len(frame) for _, frame in data)
    for length in range(64, longest + 1):
        check_cut(full, data, length, method_from, status_from)


def test_without_tcp_options_exact_from_64_bytes():
    data, _ = load(MIXED)
    data = [(time, without_options(frame)) for time, frame in data]
    full = analyse(data)
    assert len(full["pairs"]) == 112
    assert thresholds(data) == (59, 64)
    for length in range(64, 200):
        check_cut(full, data, length, 59, 64)


def test_a_cut_copy_before_this_change_lost_its_place():
    """What the issue measured, on the pipelined capture at 96 bytes: now every pair."""
    data, _ = load(PIPELINED)
    full = analyse(data)
    row = compare(full, analyse(cut(data, 96)))
    assert (row["pairs"], row["right"], row["requests"]) == (60, 60, 60)
    assert row["mean_s"] == pytest.approx(row["full_mean_s"], abs=1e-9)


FRAMES, _ = load(MIXED)
SEGMENTS = [decode(frame) for _, frame in FRAMES]
assert all(segment.__class__ is Segment for segment in SEGMENTS)
DATA_FRAMES = [i for i, segment in enumerate(SEGMENTS) if segment.wire_length]


def _key(segment: Segment) -> tuple:
    return (segment.src, segment.dst, segment.sport, segment.dport)


def _reverse(segment: Segment) -> tuple:
    return (segment.dst, segment.src, segment.dport, segment.sport)


def edit(moves: list[tuple[int, int]], copies: list[tuple[int, int]]):
    """The capture with data frames moved later by a few places (reordering) and copies of data
    frames inserted later (retransmissions); each lands with the time of the frame before it."""
    order = list(range(len(FRAMES)))
    for index, distance in moves:
        at = order.index(index)
        segment = SEGMENTS[index]
        target = at
        for step in range(1, distance + 1):
            if at + step >= len(order):
                break
            other = SEGMENTS[order[at + step]]
            if (
                _key(other) == _reverse(segment)
                or (_key(other) == _key(segment) and other.flags & (FIN | RST))
                or FRAMES[order[at + step]][0] - FRAMES[index][0] > 0.05
            ):
                break  # never behind the other side's answer, a close, or far later
            target = at + step
        order.insert(target, order.pop(at))
    data = []
    for index in order:
        time = data[-1][0] if data and data[-1][0] > FRAMES[index][0] else FRAMES[index][0]
        data.append((time, FRAMES[index][1]))
    for index, distance in sorted(copies, reverse=True):
        at = min(order.index(index) + distance, len(data))
        data.insert(at, (data[at - 1][0], FRAMES[index][1]))
    return data


LENGTHS = st.one_of(st.integers(64, 200), st.sampled_from([256, 600, 1514]))


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.sampled_from(DATA_FRAMES), st.integers(1, 4)), max_size=12),
    st.lists(st.tuples(st.sampled_from(DATA_FRAMES), st.integers(1, 40)), max_size=12),
    LENGTHS,
)
def test_retransmitted_and_reordered_cut_copies_pair_as_the_full_copy(moves, copies, length):
    data = edit(moves, copies)
    full = analyse(data)
    assert full["requests"] == len(full["pairs"]) == 112  # the full copy is exact too
    check_cut(full, data, length, 71, 76)


def test_the_limit_a_message_starting_inside_cut_bytes_is_not_seen():
    """A client that writes pipelined requests in one segment: cut to 16 bytes of payload only
    the first is seen; the answers of the others start segments of their own and are counted, unpaired
    (no request waits), not paired with a wrong request."""
    from appmon_traffic import Conversation, request, response

    c = Conversation()
    frames = c.handshake(1.0) + [c.send(1.0, request("/a") + request("/b") + request("/c"))]
    frames += [c.send(1.01 * k, response(200, b"x" * 300), False) for k in (1, 2, 3)]
    copy = analyse([(time, frame[:70]) for time, frame in frames])  # 54 + 16
    assert copy["requests"] == 1 and len(copy["pairs"]) == 1
    assert copy["statuses"] == Counter({200: 3})
    assert copy["counters"]["responses_without_request"] == 2
