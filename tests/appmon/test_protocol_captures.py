"""HTTP/2 and TLS on a real capture: tshark as the peer, and copies cut at every length.

``tests/data/appmon/protocols-nginx.pcap`` and its key log ``protocols-nginx.keys``
(``python -m cosample.experiments.appmon_protocols --sample ...``): nginx answering h2load over
h2c (8080, 40 requests, 8 streams at once per connection) and over h2 (8443, one stream at a
time), and curl over TLS 1.3 and 1.2 (443) and h2 (8443), writing its session keys.

- With tshark (Debian tshark): every h2c stream paired as tshark pairs it, at its times and
  with its status; with the keys, every HTTP/1.1-over-TLS request and handshake and every h2
  stream of curl's at tshark's decrypted times.
- Cut at every length from 64 bytes to the longest frame: on TLS and h2 (the record layer) never
  a wrong pair, and from 71 bytes (a record header after Linux's 66 bytes of headers) every
  request, answer and handshake the full copy's; h2c (whole segments only: the plans refuse
  truncation) never pairs at a wrong time, and a status it reads is the full copy's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cosample.appmon.decode import Segment, decode
from cosample.experiments.appmon_peers import frame_pairs, pairs, tshark_h2, tshark_tls
from cosample.experiments.appmon_truncation import analyse, compare, cut, load

DATA = Path(__file__).resolve().parents[1] / "data" / "appmon"
CAPTURE, KEYS = DATA / "protocols-nginx.pcap", DATA / "protocols-nginx.keys"
PROTOCOLS = {8080: "h2c", 443: "tls", 8443: "h2"}
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


@pytest.fixture(scope="module")
def mine():
    return pairs(CAPTURE, PROTOCOLS)


def times(answers):
    return sorted((round(q, 6), round(t, 6), s) for t, s, q in answers if q is not None)


@needs_tshark
def test_h2c_streams_as_tshark_pairs_them(mine):
    peer = tshark_h2(CAPTURE, 8080)
    truth = {}
    for (port, _), entry in peer.items():
        truth.setdefault(port, []).append(
            (round(entry["request"], 6), round(entry["response"], 6), entry["status"])
        )
    assert sum(len(v) for v in truth.values()) == 40
    for port, streams in truth.items():
        assert times(mine[port]["answers"]) == sorted(streams)


@needs_tshark
def test_tls_requests_answers_and_handshakes_as_tshark_decrypts_them(mine):
    peer = tshark_tls(CAPTURE, 443, KEYS)
    decrypted = {port: entry for port, entry in peer.items() if entry["requests"]}
    assert len(decrypted) == 2 and sum(len(e["requests"]) for e in decrypted.values()) >= 8
    for port, entry in decrypted.items():
        ours = mine[port]
        assert ours["requests"] == entry["requests"]
        assert [(t, q) for t, _, q in ours["answers"]] == [
            (t, q) for (t, _), q in zip(entry["responses"], entry["requests"])
        ]
        assert [s for _, s, _ in ours["answers"]] == [None] * len(entry["requests"])
        ((start, seconds),) = ours["handshakes"]
        assert start == entry["hello"]
        assert seconds == pytest.approx(entry["finished"] - entry["hello"], abs=1e-9)


@needs_tshark
def test_h2_over_tls_streams_as_tshark_decrypts_them(mine):
    peer = tshark_h2(CAPTURE, 8443, KEYS)
    decrypted = {}
    for (port, _), entry in peer.items():
        if "response" in entry:
            decrypted.setdefault(port, []).append(
                (round(entry["request"], 6), round(entry["response"], 6))
            )
    assert decrypted
    for port, streams in decrypted.items():
        assert [(q, t) for q, t, _ in times(mine[port]["answers"])] == sorted(streams)


def only(port):
    data, link = load(CAPTURE)
    kept = []
    for when, frame in data:
        segment = decode(frame, link)
        if segment.__class__ is Segment and port in (segment.sport, segment.dport):
            kept.append((when, frame))
    return kept, link


@pytest.mark.parametrize("port", [443, 8443])
def test_record_layer_cut_at_every_length(port):
    data, link = only(port)
    full = analyse(data, link, PROTOCOLS)
    assert full["requests"] == len(full["pairs"]) > 0
    handshakes = {p: c["handshakes"] for p, c in frame_pairs(data, link, PROTOCOLS).items()}
    for length in range(64, max(len(f) for _, f in data) + 1):
        copy = analyse(cut(data, length), link, PROTOCOLS)
        row = compare(full, copy)
        assert row["wrong"] == 0, length
        if length >= 71:
            assert (row["requests"], row["right"]) == (full["requests"], len(full["pairs"]))
            if length in (71, 78, 96, 128):
                cut_handshakes = {
                    p: c["handshakes"]
                    for p, c in frame_pairs(cut(data, length), link, PROTOCOLS).items()
                }
                assert cut_handshakes == handshakes, length


def test_h2c_cut_never_pairs_at_a_wrong_time():
    data, link = only(8080)
    full = analyse(data, link, PROTOCOLS)
    for length in range(64, max(len(f) for _, f in data) + 1):
        copy = analyse(cut(data, length), link, PROTOCOLS)
        for pair, status in copy["pairs"].items():
            assert pair in full["pairs"], length
            assert status is None or status == full["pairs"][pair], length


def test_the_cost_measurement_counts_what_each_rule_copies():
    """``experiments/appmon_protocol_costs.py``'s pure part on the recorded capture: h2c's and
    TLS's mirrors copy every segment; h2c is never cut; a cut copy is smaller."""
    from cosample.experiments.appmon_protocol_costs import analyser_cpu, copies

    data, _ = only(8080)
    h2c = copies(CAPTURE, "h2c", 40)
    assert h2c["segments"] == "all" and h2c["truncated_bytes_per_request"] is None
    assert h2c["copied_per_request"] == h2c["packets_per_request"] == len(data) / 40
    tls = copies(CAPTURE, "tls", 8)
    assert tls["truncated_bytes_per_request"] < tls["fabric_bytes_per_request"]
    assert analyser_cpu(CAPTURE, "tls", 8, rounds=1) > 0
