"""Compact records (the off-site sniffer's format): round trip, bounds, hostile datagrams, lost
datagrams; the real-traffic test is tests/appmon/test_offsite.py."""

from __future__ import annotations

import math
import random
import socket
import subprocess
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon import records
from cosample.appmon.errors import AppmonError
from cosample.appmon.recordlink import RecordReceiver, RecordSender, parse_endpoint
from cosample.appmon.records import RecordBuffer, SequenceTracker, authentic, parse
from cosample.appmon.windows import Windows
from cosample.dataplane import recordkeys

V4 = (socket.inet_aton("10.0.0.2"), 80)
V6 = (socket.inet_pton(socket.AF_INET6, "2001:db8::2"), 8080)


def events(seed=3, n=500):
    draw = random.Random(seed)
    out, now = [], 1_700_000_000.25
    for _ in range(n):
        now += draw.expovariate(1000)
        service = draw.choice((V4, V6))
        if draw.random() < 0.5:
            out.append((records.REQUEST, service, round(now, 6), 0, None))
        else:
            time = round(draw.expovariate(200), 6) if draw.random() < 0.9 else None
            out.append(
                (records.RESPONSE, service, round(now, 6), draw.choice((200, 404, 503)), time)
            )
    return out


def fill(buffer, items):
    for kind, service, at, status, service_time in items:
        if kind == records.REQUEST:
            buffer.request(service, at)
        else:
            buffer.response(service, at, status, service_time)


def test_records_round_trip_in_bounded_datagrams():
    counters = Counter()
    buffer = RecordBuffer(counters)
    items = events()
    fill(buffer, items)
    datagrams = buffer.take(partial=True)
    assert len(datagrams) > 3 and max(map(len, datagrams)) <= records.MAX_DATAGRAM
    got = []
    for number, datagram in enumerate(datagrams):
        session, sequence, decoded = parse(datagram)
        assert (session, sequence) == (buffer.session, number)
        assert authentic(datagram, records.INSECURE_KEY)
        got += decoded
    assert len(got) == len(items) and not counters
    for (kind, service, at, status, service_time), back in zip(items, got):
        assert back[:2] == (kind, service) and back[3] == status
        assert back[2] == pytest.approx(at, abs=1e-6)
        assert (back[4] is None) == (service_time is None)
        if service_time is not None:
            assert back[4] == pytest.approx(service_time, abs=1e-6)


def test_bytes_per_answered_request_are_about_eighteen():
    buffer = RecordBuffer(Counter())
    for number in range(1000):
        buffer.request(V4, 100.0 + number / 1000)
        buffer.response(V4, 100.0005 + number / 1000, 200, 0.0005)
    total = sum(map(len, buffer.take(partial=True)))
    assert 18 * 1000 < total < 20 * 1000  # 6 + 12 per request, header and tag per datagram


def test_the_rate_bound_drops_and_counts():
    counters = Counter()
    buffer = RecordBuffer(counters, rate=100)
    for number in range(1000):  # 1000 records within one second of capture time
        buffer.request(V4, 10.0 + number / 2000)
    kept = sum(len(parse(d)[2]) for d in buffer.take(partial=True))
    # the bucket's second's worth, and what the 0.4995 s the records span refilled
    assert kept == 100 + int(999 / 2000 * 100)
    assert counters["records_over_rate"] == 1000 - kept


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 200))
def test_parse_names_a_reason_for_any_damaged_datagram(noise, cut):
    buffer = RecordBuffer(Counter())
    fill(buffer, events(n=20))
    good = buffer.take(partial=True)[0]
    for data in (noise, good[:cut], good[:cut] + noise, records.MAGIC + noise):
        result = parse(data)
        assert isinstance(result, (str, tuple))
        if isinstance(result, str):
            assert result.startswith("record_datagrams_bad")


def test_lost_late_and_replayed_datagrams_are_counted():
    counters = Counter()
    tracker = SequenceTracker(counters)
    verdicts = [tracker.seen(7, sequence) for sequence in (0, 1, 4, 3, 5, 5, 5000, 3, 4999)]
    replayed = "record_datagrams_replayed"
    assert verdicts == [None] * 5 + [replayed, None, replayed, None]
    # 3 and 5 again, 5000 - 1024 and older: a replay or too old to tell from one
    assert [tracker.seen(7, s) for s in (3, 5, 4999, 5000 - records.REORDER_WINDOW)] == [
        "record_datagrams_replayed"
    ] * 4
    assert tracker.seen(6, 5001) == "record_datagrams_replayed"  # an earlier session
    assert tracker.seen(8, 0) is None  # the sender restarted: a new session
    assert counters == Counter(
        {
            "record_datagrams_lost": 2 + 4994,  # 2, 3; 6..4999
            "record_datagrams_reordered": 2,  # 3 late, then 4999 late
            "record_senders_restarted": 1,
        }
    )


def test_pair_keys_differ_by_pair_and_secret():
    secret = bytes(range(32))
    keys = {
        recordkeys.pair_key(secret, "s1", "s4"),
        recordkeys.pair_key(secret, "s4", "s1"),
        recordkeys.pair_key(secret, "s1", "s2"),
        recordkeys.pair_key(bytes(32), "s1", "s4"),
    }
    assert len(keys) == 4 and all(len(k) == recordkeys.KEY_BYTES for k in keys)


def test_a_tag_covers_every_byte():
    buffer = RecordBuffer(Counter(), key=b"k" * 32)
    fill(buffer, events(n=30))
    good = buffer.take(partial=True)[0]
    assert authentic(good, b"k" * 32) and not authentic(good, records.INSECURE_KEY)
    for index in range(len(good)):
        bad = bytearray(good)
        bad[index] ^= 1
        assert not authentic(bytes(bad), b"k" * 32)


def test_endpoints_are_checked():
    assert parse_endpoint("10.0.0.4:9555", "--x") == ("10.0.0.4", 9555)
    assert parse_endpoint("[2001:db8::4]:9555", "--x") == ("2001:db8::4", 9555)
    for bad in ("host:9555", "10.0.0.4", "10.0.0.4:0", "10.0.0.4:x"):
        with pytest.raises(AppmonError, match="--x"):
            parse_endpoint(bad, "--x")


def test_sender_to_receiver_over_loopback_fills_the_windows():
    counters, far = Counter(), Counter()
    windows = Windows(10.0)
    key = bytes(range(32))
    now = time.time()
    start = math.floor(now / 10) * 10 - 10  # whole in one window of the last 10 s
    windows.advance(start)  # the receiver's clock opened that window
    receiver = RecordReceiver(("127.0.0.1", 0), far, windows, key=key, sender="127.0.0.1")
    port = receiver.socket.getsockname()[1]
    sender = RecordSender(("127.0.0.1", port), counters, rate=1e6, key=key, source="127.0.0.1")
    try:
        for number in range(300):
            sender.buffer.request(V4, start + number / 100)
            sender.buffer.response(
                V4, start + 0.001 + number / 100, 500 if number % 10 == 0 else 200, 0.001
            )
        sender.send(partial=True)
        taken = 0
        for _ in range(100):
            taken += receiver.receive()
            if taken == 600:
                break
        receiver.ingest(b"junk", "127.0.0.1", time.time())
        future = RecordBuffer(Counter(), key=key)
        future.request(V4, time.time() + 3600)  # a sender's clock an hour ahead
        assert receiver.ingest(future.take(partial=True)[0], "127.0.0.1", time.time()) == 0
    finally:
        sender.close()
        receiver.close()
    assert taken == 600 and not counters
    stats = windows.current[V4]
    assert (stats.requests, stats.responses, stats.matched) == (300, 300, 300)
    assert stats.statuses[4] == 30 and stats.success_rate() == pytest.approx(0.9)
    assert far == Counter({"record_datagrams_unauthenticated": 1, "record_datagrams_ahead": 1})
    assert windows.start == start  # the hour-ahead record moved nothing


def test_the_documented_secret_command_makes_a_key_the_agents_read(tmp_path):
    """docs/appmon.md's command for the site's record secret, run as written (in a scratch
    folder instead of /etc/cosample): the file is private and holds a key ``read_key`` takes."""
    from pathlib import Path

    from cosample.appmon.recordlink import read_key

    docs = Path(__file__).resolve().parents[2] / "docs" / "appmon.md"
    (line,) = [x.strip() for x in docs.read_text().splitlines() if "openssl rand -hex 32 >" in x]
    command = line.replace("/etc/cosample/", f"{tmp_path}/")
    subprocess.run(["bash", "-c", command], check=True, timeout=30)
    secret = tmp_path / "record-secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert len(read_key(str(secret), "record_secret")) == recordkeys.KEY_BYTES
