"""The compiled scan (collector/_sflow.c) against the Python decoder it speeds up.

``parse_compact`` must give exactly ``parse_compact_python``'s result, or the same named
``DecodeError`` with the same message, on every real datagram of the corpus, and on any
mutation, cut or random bytes (hypothesis); it must never crash or read outside its input.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector import decode
from cosample.collector.decode import DecodeError, parse_compact, parse_compact_python
from cosample.collector.encode import (
    SampleSpec,
    counter_sample,
    datagram,
    discard_sample,
    flow_sample,
)
from cosample.collector.loss import sampler_runs
from cosample.collector.pcap import udp_payloads
from cosample.lab.sflowstream import frame

CORPUS = Path(__file__).resolve().parents[1] / "data" / "sflow"
REAL = [payload for path in sorted(CORPUS.glob("*.pcap")) for _, payload in udp_payloads(path)]
HEADER, LENGTH = frame("10.1.0.1", "10.2.0.2", 200)
#: OVS's layout with every record the scan reads: tunnel ingress, VNI, counters, a discard.
OVS = datagram(
    "172.29.0.2",
    7,
    1000,
    [
        flow_sample(SampleSpec(9, 64, 640, HEADER, LENGTH)),
        flow_sample(
            SampleSpec(
                10, 1, 10, HEADER, LENGTH, tunnel_src="172.29.0.1", tunnel_dst="172.29.0.2", vni=77
            )
        ),
        counter_sample(3, 2, 100, 200),
        discard_sample(4, 260, HEADER, LENGTH),
    ],
)
SEEDS = REAL + [OVS]


def outcome(decoder, data: bytes):
    try:
        return decoder(data)
    except DecodeError as exc:
        return ("error", exc.reason, str(exc))


def test_the_compiled_scan_is_built():
    """``pip install -e .`` builds it (setup.py); without it every datagram is decoded in
    Python and the collector is a third as fast (docs/collector.md, "Speed")."""
    assert decode.COMPILED


def test_every_real_datagram_decodes_as_in_python():
    assert len(REAL) >= 10
    for data in SEEDS:
        assert outcome(parse_compact, data) == outcome(parse_compact_python, data)


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_mutated_real_datagrams_decode_as_in_python(data):
    raw = bytearray(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(0, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    raw = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    assert outcome(parse_compact, raw) == outcome(parse_compact_python, raw)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=3000))
def test_random_bytes_decode_as_in_python(data):
    for raw in (data, b"\0\0\0\5\0\0\0\1" + data, b"\0\0\0\5\0\0\0\2" + data):
        assert outcome(parse_compact, raw) == outcome(parse_compact_python, raw)


@pytest.mark.parametrize("size", [65507, 65508])
def test_oversized_datagrams_decode_as_in_python(size):
    raw = REAL[0][:28] + bytes(size - 28)
    assert outcome(parse_compact, raw) == outcome(parse_compact_python, raw)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_compiled_agent_check_is_the_header_decoders(data):
    raw = bytearray(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(0, 4))):
        raw[data.draw(st.integers(0, min(len(raw), 48) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    try:
        expected = decode.datagram_agent(raw)
    except DecodeError:
        expected = None
    assert decode.agent_or_none(raw) == expected


def read(path: Path, compiled: bool, monkeypatch) -> tuple:
    """Every (time, payload) of a capture, its skip counters and cut, with or without the
    compiled record reader."""
    from cosample.collector import pcap

    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(pcap, "_pcap_run", None)
        capture = pcap.Capture(path)
        items = list(pcap.udp_payloads(path, capture))
    return items, dict(capture.skipped), capture.unused_bytes, capture.cut_record


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.pcap")))
def test_the_compiled_pcap_reader_reads_as_in_python(name, monkeypatch):
    path = CORPUS / name
    assert read(path, True, monkeypatch) == read(path, False, monkeypatch)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_captures_read_as_in_python(tmp_path_factory, data):
    """Frames of every kind (VLAN tags, IPv6, TCP, fragments, short, cut) between ordinary ones:
    the compiled reader hands each odd record to Python and resumes after it."""
    import struct

    from cosample.collector.pcap import write_pcap

    payloads = [(1.7e9 + k * 0.001, data.draw(st.sampled_from(SEEDS))) for k in range(6)]
    path = tmp_path_factory.mktemp("pcap") / "c.pcap"
    raw = bytearray(write_pcap(path, payloads).read_bytes())
    offsets, at = [], 24
    while at + 16 <= len(raw):  # mutate inside the frames' link, IP and UDP headers
        offsets.append(at)
        at += 16 + struct.unpack_from("<I", raw, at + 8)[0]
    for _ in range(data.draw(st.integers(0, 6))):
        frame = data.draw(st.sampled_from(offsets)) + 16
        raw[frame + data.draw(st.integers(0, 45))] = data.draw(
            st.sampled_from(
                [0, 1, 0x08, 0x81, 0x86, 0x88, 0xA8, 0xDD, 0x20, 0x45, 0x46, 6, 17, 255]
            )
        )
    raw = raw[: data.draw(st.integers(24, len(raw)))]
    path.write_bytes(bytes(raw))
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert read(path, True, monkeypatch) == read(path, False, monkeypatch)


def grouped(flows) -> list[tuple]:
    """The samples alike but for their size, as ``Estimator.ingest`` groups them in Python."""
    alike: dict[tuple, list[int]] = {}
    for flow in flows:
        group = alike.setdefault((flow[2], flow[5], flow[6]), [0, 0, 0])
        group[0] += 1
        group[1] += flow[4]
        group[2] += flow[4] * flow[4]
    return [(*key, *sums, None) for key, sums in alike.items()]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_compiled_grouping_is_ingests(data):
    raw = bytearray(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(0, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        *fields, alike, runs = decode.parse_grouped(bytes(raw))
    except DecodeError:
        return
    assert tuple(fields) == parse_compact_python(bytes(raw))
    assert alike is None or alike == grouped(fields[4])
    if decode._scan(bytes(raw)) is not None:  # the scan's runs are the loss tracker's
        assert runs == sampler_runs(fields[4])


def test_many_kinds_of_samples_and_huge_frames_are_grouped_right():
    """More kinds than the scan keeps (16), and sizes whose squares pass 64 bits: the scan
    leaves those to ingest (None); up to its limit it groups as ingest does."""
    kinds = [flow_sample(SampleSpec(k, 1 + k % 20, 10, HEADER, LENGTH + k)) for k in range(40)]
    for count in (1, 5, 16, 17, 40):
        raw = datagram("172.29.0.2", 1, 0, kinds[:count])
        *fields, alike, _ = decode.parse_grouped(raw)
        assert alike == (grouped(fields[4]) if count <= 16 else None)
    huge = datagram("172.29.0.2", 1, 0, [flow_sample(SampleSpec(1, 64, 10, HEADER, 0xFFFFFFFF))])
    *fields, alike, _ = decode.parse_grouped(huge)
    assert fields[4][0][4] == 0xFFFFFFFF and alike is None


@pytest.mark.parametrize(
    "layout",
    [
        [(7, k) for k in range(1, 6)],  # one sampler, consecutive
        [(7, 1), (8, 2), (7, 3)],  # one sampler broken by another's numbers: no runs
        [(k % 3, 10 + k // 3) for k in range(12)],  # three samplers interleaved, each consecutive
        [(k, 1) for k in range(17)],  # more samplers than the scan keeps
        [(5, 0xFFFFFFFF), (5, 0)],  # a run through the wrap of the 32-bit numbers
    ],
)
def test_the_compiled_runs_are_the_loss_trackers(layout):
    raw = datagram(
        "172.29.0.2",
        1,
        0,
        [
            flow_sample(SampleSpec(number, 64, 64, HEADER, LENGTH, source_index=source))
            for source, number in layout
        ],
    )
    fast = decode._scan(raw)
    assert fast is not None and fast[7] == sampler_runs(fast[4])
    assert (fast[7] is None) == (layout[1:2] == [(8, 2)] or len(layout) == 17)
