"""The compiled fast path (appmon/_fastpath.c) against the Python path it speeds up.

``Analyser.ingest_all`` (the fast path where it takes a frame, ``ingest`` where it does not) must
have exactly the effect of ``ingest`` frame by frame: the same calls to the windows (request,
response, connection, with their times, statuses, service times and connections), in the same
order, the same counters after every batch, the same closed windows, and the same state in every
connection's objects at the end. Checked on the real captures (whole, cut as a truncating mirror
cuts them, with frames dropped, moved and copied, in batches of any size) and on conversations
drawn by hypothesis from the pieces the C parser reads itself (methods, versions, statuses,
Content-Length and Transfer-Encoding values, header case, segment boundaries, bytes flipped).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from pathlib import Path

import pytest
from appmon_traffic import Conversation
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.appmon import fastpath
from cosample.appmon.analyser import Analyser
from cosample.appmon.connections import ConnectionTable
from cosample.appmon.decode import LINK_ETHERNET
from cosample.appmon.pcap import frames as read_frames
from cosample.appmon.pcap import read_link

DATA = Path(__file__).resolve().parents[1] / "data" / "appmon"
CAPTURES = {
    name: (list(read_frames(DATA / f"{name}.pcap")), read_link(DATA / f"{name}.pcap"))
    for name in ("mixed-nginx", "pipelined-nginx", "protocols-nginx")
}
PROTOCOLS = {8080: "h2c", 443: "tls", 8443: "h2"}
needs_compiled = pytest.mark.skipif(fastpath.Engine is None, reason="fast path not built")


def test_the_fast_path_is_built():
    """``pip install -e .`` builds it (setup.py); without it the analyser runs in Python alone
    (docs/appmon.md, "Speed")."""
    assert fastpath.Engine is not None


class Ids:
    """Objects numbered by first appearance (kept alive, so no number is reused)."""

    def __init__(self):
        self.numbers, self.objects = {}, []

    def __call__(self, value) -> int:
        if id(value) not in self.numbers:
            self.numbers[id(value)] = len(self.objects)
            self.objects.append(value)
        return self.numbers[id(value)]


def view(value, ids: Ids, seen: set):
    """A comparable picture of the analyser's state: objects by order of appearance."""
    if value is None or isinstance(value, (bool, int, float, bytes, str)):
        return value
    if isinstance(value, Counter) or callable(value):
        return "-"  # counters are compared apart; callbacks are the analyser's own
    if isinstance(value, (tuple, list, deque)):
        return tuple(view(item, ids, seen) for item in value)
    if isinstance(value, dict):
        return tuple((view(k, ids, seen), view(v, ids, seen)) for k, v in value.items())
    number = ids(value)
    if number in seen:
        return ("ref", number)
    seen.add(number)
    names = [name for cls in type(value).__mro__ for name in getattr(cls, "__slots__", ())]
    names += sorted(getattr(value, "__dict__", {}))
    return (
        type(value).__name__,
        number,
        tuple((name, view(getattr(value, name, "unset"), ids, seen)) for name in names),
    )


def outcome(frames, compiled: bool, sizes: list[int], **options) -> dict:
    """Everything the analyser did with ``frames``: fed in batches of ``sizes`` (cycled)
    through ``ingest_all`` (compiled) or frame by frame through ``ingest``."""
    analyser = Analyser(1.0, compiled=compiled, **options)
    ids = Ids()
    calls: list = []
    table: ConnectionTable = analyser.table

    def recorder(kind, call):
        def record(*args):
            calls.append((kind, *(ids(a) if _connection(a) else a for a in args)))
            return call(*args)

        return record

    table.on_request = recorder("request", table.on_request)
    table.on_response = recorder("response", table.on_response)
    table.on_connection = recorder("connection", table.on_connection)
    counters, index, turn = [], 0, 0
    while index < len(frames):
        batch = frames[index : index + sizes[turn % len(sizes)]]
        index, turn = index + len(batch), turn + 1
        if compiled:
            analyser.ingest_all(batch)
        else:
            for time, frame in batch:
                analyser.ingest(frame, time)
        counters.append((dict(analyser.counters), analyser.frames, analyser.last_time))
    state = view(table.table, ids, set())
    windows = [
        (w.start, tuple((k, view(s, ids, set())) for k, s in w.services.items()))
        for w in analyser.finish()
    ]
    taken = analyser.fast.taken if compiled and analyser.fast is not None else 0
    return {"calls": calls, "counters": counters, "state": state, "windows": windows}, taken


def _connection(value) -> bool:
    return type(value).__module__.startswith("cosample.appmon.")


def same(frames, sizes=(64,), **options) -> int:
    """Both paths on ``frames``; asserts they agree; the frames the fast path took."""
    reference, _ = outcome(frames, False, list(sizes), **options)
    fast, taken = outcome(frames, True, list(sizes), **options)
    for part in ("calls", "counters", "state", "windows"):
        assert fast[part] == reference[part], part
    return taken


@needs_compiled
@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_real_captures_whole_and_cut(name):
    frames, link = CAPTURES[name]
    options = {"link": link, "protocols": PROTOCOLS if name.startswith("protocols") else None}
    taken = same(frames, (1, 7, 300), **options)
    if name == "mixed-nginx":
        assert taken > 0.8 * len(frames)  # plain keep-alive HTTP/1.1: the common case
    for length in (64, 71, 76, 90, 130, 256):
        same([(t, f[:length]) for t, f in frames], (5, 64), **options)


@needs_compiled
@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.sampled_from(sorted(CAPTURES)),
    st.lists(st.integers(0, 600), max_size=20),
    st.lists(st.tuples(st.integers(0, 600), st.integers(1, 6)), max_size=10),
    st.lists(st.tuples(st.integers(0, 600), st.integers(1, 40)), max_size=10),
    st.one_of(st.none(), st.integers(60, 300)),
    st.lists(st.integers(1, 200), min_size=1, max_size=5),
    st.booleans(),
)
def test_edited_captures(name, drops, moves, copies, length, sizes, declared):
    """Frames lost, reordered and retransmitted, in batches of any size."""
    frames, link = CAPTURES[name]
    order = [i for i in range(len(frames)) if i not in set(drops)]
    for index, distance in moves:
        if index < len(order):
            order.insert(min(len(order), index + distance), order.pop(index))
    data = [frames[i] for i in order]
    for index, distance in sorted(copies, reverse=True):
        if index < len(data):
            data.insert(min(len(data), index + distance), data[index])
    if length is not None:
        data = [(t, f[:length]) for t, f in data]
    same(data, sizes, link=link, protocols=PROTOCOLS if declared else None)


def mostly(valid: list, invalid: list):
    """One of ``valid`` three times in four, else one of ``invalid``."""
    return st.one_of(*[st.sampled_from(valid)] * 3, st.sampled_from(invalid))


# the pieces of HTTP/1.x messages, valid and not
METHODS = mostly([b"GET", b"HEAD", b"POST", b"CONNECT", b"PUT"], [b"get", b"FOO", b""])
VERSIONS = mostly([b"HTTP/1.1", b"HTTP/1.0"], [b"HTTP/2.0", b"HTTP/1.", b"http/1.1"])
STATUSES = mostly(
    [b"200", b"204", b"304", b"101", b"100", b"404", b"500"], [b"099", b"600", b"2x0", b"20"]
)
REASONS = mostly([b" OK", b""], [b"!", b" \r"])
LENGTHS = mostly(
    [b"0", b"3", b"12", b" 5 ", b"00007", b"\t4\x0b"], [b"+5", b"5x", b"", b"9" * 20, b"1e3"]
)
ENCODINGS = mostly([b"chunked", b"gzip, chunked", b"Chunked "], [b"identity", b"chunkedx"])
CHUNKS = mostly([b"3\r\nabc\r\n0\r\n\r\n", b"0\r\n\r\n"], [b"zz\r\n"])


def http_message(line: bytes, length: bytes | None, encoding: bytes | None, pad: bytes) -> bytes:
    """A message with these first line, Content-Length and Transfer-Encoding values (None:
    absent), a body as long as the length says (when it is digits), and a chunked one."""
    headers, body = [b"X-Pad: " + pad], b""
    if length is not None:
        headers.append(b"Content-Length: " + length)
        digits = length.strip()
        if digits.isdigit() and int(digits) < 64:
            body = b"b" * int(digits)
    if encoding is not None:
        headers.append(b"TRANSFER-encoding: " + encoding)
        body += b"3\r\nabc\r\n0\r\n\r\n"
    return line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body


@st.composite
def message(draw, request: bool) -> bytes:
    if request:
        line = draw(METHODS) + b" /" + draw(st.sampled_from([b"a", b"b c", b""])) + b" "
        line += draw(VERSIONS)
    else:
        line = draw(VERSIONS) + b" " + draw(STATUSES) + draw(REASONS)
    length = draw(st.one_of(st.none(), LENGTHS))
    encoding = draw(st.one_of(st.none(), st.none(), ENCODINGS))
    pad = draw(st.binary(max_size=8)).replace(b"\r", b".")
    data = http_message(line, length, encoding, pad)
    if encoding is not None:
        data = data[: data.rindex(b"\r\n\r\n") + 4] + draw(CHUNKS)
    return data + draw(st.sampled_from([b""] * 5 + [b"junk"]))


@st.composite
def conversation(draw):
    c = Conversation(
        cport=draw(st.integers(1024, 65535)), client_isn=draw(st.integers(0, 2**32 - 1))
    )
    frames = c.handshake(1.0) if draw(st.booleans()) else []
    time = 1.0
    for _ in range(draw(st.integers(1, 6))):
        for request in (True, False):
            data = b"".join(draw(st.lists(message(request), min_size=1, max_size=3)))
            cuts = sorted(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=2)))
            for start, end in zip([0, *cuts], [*cuts, len(data)]):
                if end > start:
                    time += draw(st.sampled_from([0.0, 0.001, 0.4]))
                    frames.append(c.send(time, data[start:end], from_client=request))
                    c.cseq, c.sseq = c.cseq & 0xFFFFFFFF, c.sseq & 0xFFFFFFFF  # wrap around
    if draw(st.booleans()):
        frames += c.fin(time + 0.01)
    return frames


@needs_compiled
@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    st.lists(conversation(), min_size=1, max_size=3),
    st.lists(st.integers(1, 50), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 1500), st.integers(0, 255)), max_size=4),
)
def test_drawn_conversations(conversations, sizes, flips):
    """Messages valid and not, split anywhere, interleaved over connections, bytes flipped."""
    frames = sorted((f for c in conversations for f in c), key=lambda pair: pair[0])
    for index, offset, value in flips:
        if index < len(frames) and offset < len(frames[index][1]):
            time, frame = frames[index]
            frames[index] = (time, frame[:offset] + bytes([value]) + frame[offset + 1 :])
    same(frames, sizes)


@needs_compiled
def test_every_framing_rule():
    """Each first line beside each Content-Length and Transfer-Encoding, on a connection that is
    otherwise the common case, followed by a plain exchange (which a framing error would
    break): the two paths agree, and the fast path took the messages."""
    requests = [m + b" /x HTTP/1.1" for m in (b"GET", b"HEAD", b"POST", b"CONNECT", b"FOO")]
    requests += [b"get /x HTTP/1.1", b"GET /x HTTP/2", b"GET /x y HTTP/1.1", b"GET  HTTP/1.0"]
    responses = [b"HTTP/1.1 " + s for s in (b"100 Go", b"101 Up", b"200 OK", b"204", b"304 X")]
    responses += [b"HTTP/1.1 200!", b"HTTP/1.1 20", b"HTTP/1.1 2x0 X", b"HTTP/1.1 600 X"]
    responses += [b"HTTP/1.0 099 X", b"HTTP/2.0 200 OK", b"HTTP/1.1 404 \r"]
    lines = requests + responses
    lengths = [None, b"0", b"3", b" 5 ", b"+5", b"", b"9" * 20, b"1" * 18]
    encodings = [None, b"chunked", b"gzip, Chunked ", b"identity"]
    frames, port = [], 1024
    for line in lines:
        for length in lengths:
            for encoding in encodings:
                c, port = Conversation(cport=port), port + 1
                plain = (
                    b"GET / HTTP/1.1\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
                )
                tested = http_message(line, length, encoding, b"p")
                request = not line.startswith(b"HTTP")
                frames += c.handshake(1.0) + [c.send(1.0, plain[0]), c.send(1.0, plain[1], False)]
                frames += [c.send(1.1, tested, request), c.send(1.2, plain[0])]
                frames += [c.send(1.3, plain[1], False), c.send(1.4, plain[0])]
                frames += [c.send(1.5, plain[1], False)]
    assert same(frames, (1, 100)) > 0.6 * len(frames)


@needs_compiled
def test_random_bytes_and_other_links():
    """Frames of every link type, and noise: never a crash, the same effect."""
    rng = random.Random(7)
    frames, _ = CAPTURES["mixed-nginx"]
    noise = [
        (1.7e9 + i, bytes(rng.randrange(256) for _ in range(rng.randrange(80)))) for i in range(300)
    ]
    same(noise + frames[:100], (3, 50))
    raw = [(t, f[14:]) for t, f in frames]  # the same segments as raw IP
    assert same(raw, (50,), link=101) > 0.8 * len(raw)
    assert same(raw, (50,), link=LINK_ETHERNET) == 0  # not Ethernet: never the fast path's


@needs_compiled
def test_the_engine_refuses_classes_without_the_slots():
    class Plain:
        pass

    from cosample.appmon.http import METHODS as methods

    with pytest.raises(TypeError, match="is not a slot"):
        fastpath.Engine(object(), 1, Plain, Plain, Plain, (1, 2, 3, 6, 7), methods)


@needs_compiled
@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_replay_command_with_and_without_the_fast_path(name, capsys, monkeypatch):
    """``appmon replay`` (its chunks through ``ingest_from``, windows closed between) prints the
    same snapshots as ``appmon replay --pure-python``; the fast path took the HTTP/1.x frames."""
    from cosample.appmon import replay as replay_module
    from cosample.cli import main

    argv = ["appmon", "replay", str(DATA / f"{name}.pcap"), "--window", "20ms", "--json"]
    if name.startswith("protocols"):
        argv += [f"--protocol={port}={kind}" for port, kind in PROTOCOLS.items()]
    monkeypatch.setattr(replay_module, "CHUNK", 97)  # windows end inside chunks too
    engines = []
    monkeypatch.setattr(fastpath, "Engine", _recording(fastpath.Engine, engines))
    assert main([*argv, "--pure-python"]) == 0
    reference = capsys.readouterr().out
    assert not engines  # the Python path alone
    assert main(argv) == 0
    assert capsys.readouterr().out == reference and reference.count("\n") >= 5
    assert len(engines) == 1
    # h2c, TLS and h2 connections are the Python path's alone
    assert (engines[0].taken > 0) == (not name.startswith("protocols"))


def _recording(engine_type, made: list):
    def make(*args):
        made.append(engine_type(*args))
        return made[-1]

    return make


def test_without_the_extension_the_python_path_alone(monkeypatch):
    """Not built (``fastpath.Engine`` None): ``ingest_all`` is ``ingest`` frame by frame."""
    monkeypatch.setattr(fastpath, "Engine", None)
    frames, link = CAPTURES["mixed-nginx"]
    assert Analyser(1.0).fast is None
    assert same(frames, (1, 64), link=link) == 0
