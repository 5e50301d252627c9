"""The TLS record layer of one direction of a TCP stream, read without keys (RFC 8446, 5246).

A record is a 5-byte header (content type, version, length) and that many bytes: framing follows
lengths alone, whatever is encrypted. Each record's type and length go to the callback with the
capture time of its header's first byte; the cleartext handshake records that say something
(ClientHello, ServerHello: offered and chosen ALPN protocols, the version chosen) are buffered
up to ``MAX_HELLO`` bytes and parsed here. The parser has the interface the TCP ordering
(``streams.HalfStream``) drives: bytes a hole or a cut leaves unseen inside a record are stepped
over; one that hides a record header loses framing, and the parser hunts for a segment that
starts with a plausible record header; meanwhile the bytes of each segment are reported as data
of unknown type (``on_record(None, length, time)``). Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA = 20, 21, 22, 23
CLIENT_HELLO, SERVER_HELLO = 1, 2
EXTENSION_ALPN, EXTENSION_SUPPORTED_VERSIONS = 16, 43
TLS13 = 0x0304
#: Bytes of a hello record kept to read its extensions.
MAX_HELLO = 16384
#: The largest record a hunting parser believes in (2^14 plus the most expansion allowed).
PLAUSIBLE_LENGTH = (1 << 14) + 2048

HEAD, PAYLOAD, SKIP, HUNT = range(4)


def plausible_record(data: bytes) -> bool:
    """Whether ``data`` begins with a record header a hunting parser may resume at."""
    return (
        len(data) >= 5
        and CHANGE_CIPHER_SPEC <= data[0] <= APPLICATION_DATA
        and data[1] == 3
        and data[2] <= 4
        and 0 < int.from_bytes(data[3:5], "big") <= PLAUSIBLE_LENGTH
    )


class Hello(NamedTuple):
    """What a ClientHello or ServerHello says: its type, the ALPN protocols (offered or chosen)
    and the version chosen (a ServerHello's supported_versions; 0 when absent)."""

    kind: int
    alpn: tuple[bytes, ...]
    version: int


def parse_hello(record: bytes) -> Hello | None:
    """A handshake record's first message if it is a ClientHello or ServerHello, else None
    (also for anything malformed or cut short; never raises)."""
    try:
        kind = record[0]
        if kind not in (CLIENT_HELLO, SERVER_HELLO):
            return None
        at = 4 + 2 + 32  # message header, legacy version, random
        at += 1 + record[at]  # session id
        if kind == CLIENT_HELLO:
            at += 2 + int.from_bytes(record[at : at + 2], "big")  # cipher suites
            at += 1 + record[at]  # compression methods
        else:
            at += 2 + 1  # the cipher suite and compression method chosen
        end = at + 2 + int.from_bytes(record[at : at + 2], "big")
        at += 2
        alpn: tuple[bytes, ...] = ()
        version = 0
        while at + 4 <= min(end, len(record)):
            ext, length = (
                int.from_bytes(record[at : at + 2], "big"),
                int.from_bytes(record[at + 2 : at + 4], "big"),
            )
            body = record[at + 4 : at + 4 + length]
            if ext == EXTENSION_ALPN:
                names, i = [], 2
                while i < len(body):
                    names.append(body[i + 1 : i + 1 + body[i]])
                    i += 1 + body[i]
                alpn = tuple(names)
            elif ext == EXTENSION_SUPPORTED_VERSIONS and kind == SERVER_HELLO and length == 2:
                version = int.from_bytes(body, "big")
            at += 4 + length
        return Hello(kind, alpn, version)
    except IndexError:
        return None


class TlsParser:
    """One direction of one TLS connection: ``on_record(type, length, time)`` per record (type
    None: data while framing is lost), ``on_hello(Hello, time)`` per hello."""

    __slots__ = (
        "on_record",
        "on_hello",
        "counters",
        "state",
        "buffer",
        "remaining",
        "kind",
        "start_time",
        "lost",
        "request",
        "want_hello",
    )

    def __init__(
        self, request: bool, on_record: Callable, on_hello: Callable, counters: Counter
    ) -> None:
        self.request, self.on_record, self.on_hello = request, on_record, on_hello
        self.counters = counters
        self.state, self.buffer, self.remaining, self.kind = HUNT, b"", 0, 0
        self.start_time, self.lost, self.want_hello = 0.0, False, True

    def begin(self) -> None:
        if self.state == HUNT:
            self.state, self.buffer = HEAD, b""

    @property
    def hunting(self) -> bool:
        return self.state == HUNT

    def starts(self, data: bytes) -> bool:
        return plausible_record(data)

    def gap(self) -> None:
        self._lose()

    def skippable(self, missing: int) -> bool:
        return self.state == SKIP and missing <= self.remaining

    def skip(self, missing: int) -> None:
        self.remaining -= missing
        if not self.remaining:
            self.state = HEAD

    def cut(self, missing: int, time: float, seq: int, ack: int) -> None:
        if self.state == SKIP and missing <= self.remaining:
            self.skip(missing)
        elif self.state == PAYLOAD and missing <= self.remaining:
            self.state, self.remaining = SKIP, self.remaining - missing  # a hello cut short
            self.buffer = b""
            if not self.remaining:
                self.state = HEAD
        elif self.state != HUNT:
            self.counters["framing_cut"] += 1
            self._lose()

    def _lose(self) -> None:
        self.state, self.buffer, self.lost = HUNT, b"", True

    def feed(
        self, data: bytes, time: float, segment_start: bool = True, seq: int = 0, ack: int = 0
    ) -> None:
        while data:
            state = self.state
            if state == SKIP:
                if self.remaining >= len(data):
                    self.remaining -= len(data)
                    if not self.remaining:
                        self.state = HEAD
                    return
                data = data[self.remaining :]
                self.remaining, self.state = 0, HEAD
            elif state == HEAD:
                if not self.buffer:
                    self.start_time = time
                need = 5 - len(self.buffer)
                self.buffer += data[:need]
                data = data[need:]
                if len(self.buffer) == 5:
                    self._header(self.buffer)
            elif state == PAYLOAD:
                take = data[: self.remaining]
                data = data[len(take) :]
                self.remaining -= len(take)
                self.buffer += take
                if not self.remaining:
                    hello = parse_hello(self.buffer)
                    self.buffer, self.state, self.want_hello = b"", HEAD, False
                    if hello is not None:
                        self.on_hello(hello, self.start_time)
            else:  # HUNT
                if segment_start and plausible_record(data):
                    self.state, self.buffer = HEAD, b""
                    continue
                if segment_start:
                    self.on_record(None, len(data), time)
                return
            segment_start = False

    def _header(self, header: bytes) -> None:
        kind, length = header[0], int.from_bytes(header[3:5], "big")
        self.buffer = b""
        if not (CHANGE_CIPHER_SPEC <= kind <= APPLICATION_DATA and header[1] == 3):
            self.counters["tls_bad_record"] += 1
            self._lose()
            return
        self.on_record(kind, length, self.start_time)
        if kind == HANDSHAKE and self.want_hello and length <= MAX_HELLO and length:
            self.state, self.remaining = PAYLOAD, length
        else:
            self.state, self.remaining = (SKIP, length) if length else (HEAD, 0)
