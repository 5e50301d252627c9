"""HTTP/2 frames over one direction of a TCP stream (RFC 9113): where each frame starts, and the
payloads that matter (header blocks, RST_STREAM).

A frame is a 9-byte header (24-bit length, type, flags, 31-bit stream id) and its payload, so
framing follows lengths alone: DATA and the other payloads are counted through, never stored;
HEADERS, PUSH_PROMISE and CONTINUATION payloads (a header block, buffered up to ``MAX_BLOCK``)
and RST_STREAM go to the callback with the capture time of their frame header's first byte. The
client's side begins with the 24-byte connection preface. The parser has the interface the
TCP ordering (``streams.HalfStream``) drives, as ``http.HttpParser`` does: bytes a hole or a cut
leaves unseen inside a payload of known length are stepped over; one that hides a frame header
loses framing, and the parser hunts for a segment that starts with a plausible frame header.
Pure: ``on_frame(type, flags, stream, time, payload, whole)`` (``whole`` False: the payload was
cut short or lost).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x4, 0x8, 0x20
#: Frames whose payload the connection reads.
READ = frozenset((HEADERS, RST_STREAM, PUSH_PROMISE, CONTINUATION))
#: Bytes of one header block kept (a frame's payload; longer ones are passed on cut short).
MAX_BLOCK = 65536
#: The largest frame a hunting parser believes in (SETTINGS_MAX_FRAME_SIZE's default).
PLAUSIBLE_LENGTH = 16384

FRAME_HEAD, PAYLOAD, SKIP, START, HUNT = range(5)


def plausible_frame(data: bytes) -> bool:
    """Whether ``data`` begins with a frame header a hunting parser may resume at."""
    if len(data) < 9:
        return False
    length = int.from_bytes(data[:3], "big")
    kind, stream = data[3], int.from_bytes(data[5:9], "big")
    if kind > CONTINUATION or length > PLAUSIBLE_LENGTH or stream >> 31:
        return False
    control = kind in (SETTINGS, PING, GOAWAY)
    return (stream == 0) == control or kind == WINDOW_UPDATE


class H2Parser:
    """One direction of one HTTP/2 connection (``request``: the client's, which begins with the
    preface)."""

    __slots__ = (
        "request",
        "on_frame",
        "counters",
        "state",
        "buffer",
        "remaining",
        "kind",
        "flags",
        "stream",
        "start_time",
        "lost",
        "whole",
    )

    def __init__(self, request: bool, on_frame: Callable, counters: Counter) -> None:
        self.request, self.on_frame, self.counters = request, on_frame, counters
        self.state, self.buffer, self.remaining = HUNT, b"", 0
        self.kind = self.flags = self.stream = 0
        self.start_time = 0.0
        self.lost, self.whole = False, True

    def begin(self) -> None:
        """The next byte is the stream's first: the preface (client) or a frame (server)."""
        if self.state == HUNT:
            self.state, self.buffer = (START if self.request else FRAME_HEAD), b""

    @property
    def hunting(self) -> bool:
        return self.state == HUNT

    def starts(self, data: bytes) -> bool:
        return plausible_frame(data)

    def gap(self) -> None:
        """Bytes are missing here: framing is lost until a segment starts with a frame."""
        self._lose()

    def skippable(self, missing: int) -> bool:
        return self.state == SKIP and missing <= self.remaining

    def skip(self, missing: int) -> None:
        self.remaining -= missing
        if not self.remaining:
            self.state = FRAME_HEAD

    def cut(self, missing: int, time: float, seq: int, ack: int) -> None:
        """The capture kept only this segment's start: its last ``missing`` bytes are unseen."""
        if self.state == SKIP and missing <= self.remaining:
            self.skip(missing)
            return
        if self.state != HUNT:
            self.counters["framing_cut"] += 1
            self._lose()

    def _lose(self) -> None:
        """Framing is lost (``lost`` stays: frames may have gone by unseen, header blocks too)."""
        if self.state == PAYLOAD:  # what was read of the payload, flagged as such
            self.whole = False
            self._deliver()
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
                        self.state = FRAME_HEAD
                    return
                data = data[self.remaining :]
                self.remaining, self.state = 0, FRAME_HEAD
            elif state == FRAME_HEAD:
                if not self.buffer:
                    self.start_time = time
                need = 9 - len(self.buffer)
                self.buffer += data[:need]
                data = data[need:]
                if len(self.buffer) == 9:
                    self._header(self.buffer)
            elif state == PAYLOAD:
                take = data[: self.remaining]
                data = data[len(take) :]
                self.remaining -= len(take)
                if len(self.buffer) < MAX_BLOCK:
                    self.buffer += take[: MAX_BLOCK - len(self.buffer)]
                if not self.remaining:
                    self._deliver()
                    self.state = FRAME_HEAD
            elif state == START:
                need = len(PREFACE) - len(self.buffer)
                self.buffer += data[:need]
                data = data[need:]
                if not PREFACE.startswith(self.buffer):
                    self.counters["h2_bad_preface"] += 1
                    self.gap()
                    return
                if len(self.buffer) == len(PREFACE):
                    self.state, self.buffer = FRAME_HEAD, b""
            else:  # HUNT: only where a segment begins, and only at a plausible frame header
                if not (segment_start and plausible_frame(data)):
                    return
                self.state, self.buffer = FRAME_HEAD, b""
            segment_start = False

    def _header(self, header: bytes) -> None:
        self.remaining = int.from_bytes(header[:3], "big")
        self.kind, self.flags = header[3], header[4]
        self.stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
        self.buffer = b""
        if self.kind in READ:
            self.whole = self.remaining <= MAX_BLOCK
            if not self.whole:
                self.counters["h2_block_too_long"] += 1
            if self.remaining:
                self.state = PAYLOAD
                return
            self._deliver()
        self.state = SKIP if self.remaining else FRAME_HEAD

    def _deliver(self) -> None:
        payload, self.buffer = self.buffer, b""
        self.on_frame(self.kind, self.flags, self.stream, self.start_time, payload, self.whole)
