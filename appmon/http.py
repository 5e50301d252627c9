"""HTTP/1.x message framing over one direction of a TCP stream: where each message starts.

The analyser needs only the first line of each request and response, but to find the next one on
a keep-alive or pipelined connection it must skip bodies: ``Content-Length``, ``chunked`` and
read-until-close are followed; bodies are counted, never stored. Header blocks are buffered up to
``MAX_HEADER`` bytes, so memory per direction is bounded. After a gap (lost bytes) or a line
that is not HTTP, the parser *hunts*: it waits for a segment whose payload begins with a request
or status line, and says framing was ``lost`` (messages may have gone by unseen).

Nothing after a 101 is HTTP/1.x: a 101 whose header block says ``Upgrade: h2c`` hands the rest
of the stream to ``on_upgrade`` (the connection goes on in HTTP/2, RFC 7540 section 3.2) and is
no answer; any other 101 (a WebSocket's, one whose header block a cut or a hole hid) is
announced as the answer once its header block shows which it is.

A truncating mirror's cut is no loss: every segment still arrives, and its sequence number and
length (the IP header's) say where it lies in the stream. Bytes cut inside a body of known length
are stepped over; a cut that hides where a message ends (its header block's end, a chunk line)
leaves the parser ``CUT``: the next message starts at the next segment whose payload begins with
a request or status line (one that starts inside a segment's cut bytes is not seen), and nothing
went by unseen before it. A message known to start inside cut bytes (a cut at a message boundary,
or a first line cut before its method or status) is still announced, with value None. Pure: a
callback receives each first line, with the capture time of its first byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

#: Bytes of one header block kept while waiting for its end; longer blocks are dropped.
MAX_HEADER = 16384
#: Bytes of a chunk-size or trailer line kept.
MAX_LINE = 1024
METHODS = frozenset(
    (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE")
)

HUNT, HEAD, BODY, CHUNK_SIZE, CHUNK_DATA, TRAILER, UNTIL_CLOSE, DEAD, CUT, SWITCHED = range(10)


def request_method(line: bytes) -> bytes | None:
    """The method of an HTTP/1.x request line (``GET /x HTTP/1.1``), or None."""
    parts = line.split(b" ")
    if len(parts) != 3 or parts[0] not in METHODS or not parts[2].startswith(b"HTTP/1."):
        return None
    return parts[0]


def status_code(line: bytes) -> int | None:
    """The status of an HTTP/1.x status line (``HTTP/1.1 200 OK``), or None."""
    if not line.startswith(b"HTTP/1.") or len(line) < 12 or line[8:9] != b" ":
        return None
    code = line[9:12]
    if not code.isdigit() or (len(line) > 12 and line[12:13] != b" "):
        return None
    value = int(code)
    return value if 100 <= value <= 599 else None


def starts_message(data: bytes, request: bool) -> bool:
    """Whether a segment's payload begins like a request (or response) line: where to resync."""
    if request:
        space = data.find(b" ", 0, 8)
        return space > 0 and data[:space] in METHODS
    return data.startswith(b"HTTP/1.")


def cut_line_value(prefix: bytes, request: bool) -> bytes | int | None | bool:
    """What the captured start of a first line cut short says: the method (requests) or status
    (responses) when it shows them, None when too little is left to tell, False when it cannot
    begin a first line. A status cut after its first digit (``HTTP/1.1 2``) gives its class as
    ``class * 100``: the analyser reports status classes only."""
    if request:
        space = prefix.find(b" ", 0, 8)
        if space > 0:
            return prefix[:space] if prefix[:space] in METHODS else False
        if len(prefix) >= 8:
            return False
        return None if any(method.startswith(prefix) for method in METHODS) else False
    if len(prefix) >= 12:
        return status_code(prefix[:12]) or False
    if len(prefix) >= 10:
        digit = prefix[9:10]
        if prefix.startswith(b"HTTP/1.") and prefix[8:9] == b" " and b"1" <= digit <= b"5":
            return int(digit) * 100
        return False
    return None if prefix[:7] == b"HTTP/1."[: len(prefix)] else False


def _header_value(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case, with colon) in a lower-cased header block."""
    at = head.find(b"\r\n" + name)
    if at < 0:
        return None
    start = at + 2 + len(name)
    end = head.find(b"\r\n", start)
    return head[start : end if end >= 0 else len(head)].strip()


class HttpParser:
    """One direction (requests, or responses) of one connection.

    ``on_start(time, first_line_value)`` is called once per message with the method (requests)
    or the status code (responses), None when the message is known to start but its first line
    was cut away; for a response it returns whether the message has no body (the answer to a
    HEAD request), which only the connection knows. ``start_seq``,
    ``start_ack`` and ``lost`` tell the connection where the message began in the stream.
    """

    __slots__ = (
        "request",
        "on_start",
        "counters",
        "state",
        "buffer",
        "start_time",
        "remaining",
        "status",
        "no_body",
        "announced",
        "start_seq",
        "start_ack",
        "position",
        "ack",
        "lost",
        "tentative",
        "on_upgrade",
        "switching",
    )

    def __init__(
        self,
        request: bool,
        on_start: Callable[[float, Any], bool],  # (time, method) or (time, status)
        counters: Counter,
        on_upgrade: Callable[[float, bytes], None] | None = None,
    ) -> None:
        self.request, self.on_start, self.counters = request, on_start, counters
        #: ``(time, rest)``: a 101 to h2c ended at ``time``; ``rest``: the bytes after it
        self.on_upgrade = on_upgrade
        #: a 101's first line was read, its header block not yet: announced when it is
        self.switching = False
        self.state, self.buffer, self.start_time = HUNT, b"", 0.0
        self.remaining, self.status, self.no_body, self.announced = 0, 0, False, False
        # sequence number of the current message's first byte, the acknowledgement number its
        # segment carried, and whether framing was lost since the last message started
        self.start_seq = self.start_ack = self.position = self.ack = 0
        self.lost = False
        # while CUT, a whole segment too short to tell (``GE``) may begin a request whose line
        # the next segment completes: kept as a tentative start
        self.tentative = False

    def begin(self) -> None:
        """The next byte starts a message (the stream's first byte, after its SYN)."""
        if self.state == HUNT:
            self.state, self.buffer, self.announced = HEAD, b"", False

    def settle(self) -> None:
        """A 101 whose header block will not be read whole (a hole, a cut, the stream's end)
        answers its request; nothing after it is HTTP/1.x."""
        if self.switching:
            self.switching, self.state, self.buffer = False, DEAD, b""
            self.on_start(self.start_time, 101)

    def gap(self) -> None:
        """Bytes are missing here: what follows cannot be framed until a message start."""
        self.settle()
        if self.state not in (UNTIL_CLOSE, DEAD):
            self.state, self.buffer, self.lost, self.tentative = HUNT, b"", True, False

    def skippable(self, missing: int) -> bool:
        """Whether a hole of ``missing`` bytes here would be all body bytes (or unframed):
        losing them loses nothing this parser needs (a selective mirror's usual hole). Not while
        ``CUT``: a hole there may hide a segment that starts a message."""
        state = self.state
        return state in (UNTIL_CLOSE, DEAD) or (
            (state == BODY or (state == CHUNK_DATA and missing <= self.remaining - 2))
            and missing <= self.remaining
        )

    def skip(self, missing: int) -> None:
        """A hole of ``missing`` bytes that ``skippable`` accepted: step over it."""
        if self.state == BODY or self.state == CHUNK_DATA:
            self.remaining -= missing
            if not self.remaining:
                self.state = HEAD if self.state == BODY else CHUNK_SIZE
                self.buffer, self.announced = b"", False

    def cut(self, missing: int, time: float, seq: int, ack: int) -> None:
        """The capture kept only the start of this segment: its last ``missing`` bytes, from
        sequence number ``seq``, exist but were not seen (a truncating mirror). Framing follows
        them when they are body bytes of known length; else the message's end is unknown
        (``CUT``), and a message known to start in them is announced with value None."""
        self.settle()
        state = self.state
        if state == BODY or state == CHUNK_DATA:
            if self.skippable(missing):
                self.skip(missing)
                return
            if state == BODY:  # the body ends in the cut bytes: the next message starts there
                seq, self.remaining = seq + self.remaining, 0
                self.state, self.buffer, self.announced = HEAD, b"", False
                state = HEAD
        if state == HEAD and not self.announced:
            if not self.buffer:  # a message starts in the cut bytes: nothing of it seen
                self.start_time, self.start_seq, self.start_ack = time, seq & 0xFFFFFFFF, ack
            value = cut_line_value(self.buffer, self.request)
            if self.tentative and value is not None and value is not False:
                self.tentative = False
            if self.tentative:  # nothing shows it began a message
                self.state, self.buffer, self.tentative = CUT, b"", False
                return
            if value is False:
                self.counters["bad_start_line"] += 1
                self.state, self.buffer, self.lost = HUNT, b"", True
                return
            self.counters["first_lines_cut" if value is not None else "first_lines_unseen"] += 1
            self.announced, self.status = True, value if isinstance(value, int) and value else 0
            self.on_start(self.start_time, value)
        if state not in (HUNT, UNTIL_CLOSE, DEAD, CUT):
            self.counters["framing_cut"] += 1
            self.state, self.buffer = CUT, b""

    @property
    def hunting(self) -> bool:
        return self.state == HUNT

    def starts(self, data: bytes) -> bool:
        """Whether a segment's payload begins a message (where a hunting parser resumes)."""
        return starts_message(data, self.request)

    def feed(
        self, data: bytes, time: float, segment_start: bool = True, seq: int = 0, ack: int = 0
    ) -> None:
        """Consume contiguous stream bytes captured at ``time`` (``segment_start``: they begin a
        TCP segment, the only place a message start is looked for while hunting; ``seq``: the
        sequence number of their first byte; ``ack``: their segment's acknowledgement)."""
        end, self.ack = seq + len(data), ack
        while data:
            self.position = end - len(data)
            state = self.state
            if state == HEAD:
                if self.tentative and segment_start and starts_message(data, self.request):
                    self.buffer, self.tentative = b"", False  # the kept bytes were not a start
                data = self._head(data, time)
            elif state == HUNT or state == CUT:
                if not segment_start:
                    return
                if not starts_message(data, self.request):
                    if state == HUNT or cut_line_value(data, self.request) is not None:
                        return
                    self.tentative = True  # too short to tell: perhaps a start
                self.state, self.buffer, self.announced = HEAD, b"", False
            elif state == BODY or state == CHUNK_DATA:
                take = min(self.remaining, len(data))
                self.remaining -= take
                data = data[take:]
                if not self.remaining:
                    self.state = HEAD if state == BODY else CHUNK_SIZE
                    self.buffer, self.announced = b"", False
            elif state == CHUNK_SIZE or state == TRAILER:
                data = self._line(data)
            else:  # UNTIL_CLOSE, DEAD: the rest of the stream is not framed
                return
            segment_start = False

    def _head(self, data: bytes, time: float) -> bytes:
        if not self.buffer:
            self.start_time, self.start_seq, self.start_ack = time, self.position, self.ack
            buffer, search = data, 0
        else:
            buffer, search = self.buffer + data, max(0, len(self.buffer) - 3)
        if not self.announced:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                return self._keep(buffer, MAX_HEADER, "header_too_long")
            if not self._announce(buffer[:line_end]):
                return b""
        end = buffer.find(b"\r\n\r\n", search)
        if end < 0:
            return self._keep(buffer, MAX_HEADER, "header_too_long")
        self.buffer = b""
        self._frame_body(buffer[: end + 2].lower())
        if self.state == SWITCHED:  # the rest of the stream is HTTP/2's
            assert self.on_upgrade is not None  # (only a parser told where to switches)
            self.state = DEAD
            self.on_upgrade(time, buffer[end + 4 :])
            return b""
        return buffer[end + 4 :]

    def _keep(self, buffer: bytes, limit: int, reason: str) -> bytes:
        if len(buffer) > limit:
            self.counters[reason] += 1
            self.state, self.buffer = HUNT, b""
            self.settle()
        else:
            self.buffer = buffer
        return b""

    def _announce(self, line: bytes) -> bool:
        value = request_method(line) if self.request else status_code(line)
        if value is None:
            if self.tentative:  # not a start after all: still inside the cut message
                self.state, self.buffer, self.tentative = CUT, b"", False
                return False
            self.counters["bad_start_line"] += 1
            self.state, self.buffer, self.lost = HUNT, b"", True
            return False
        status = value if isinstance(value, int) else 0  # (a request's value is its method)
        self.announced, self.status, self.tentative = True, status, False
        if value == 101 and not self.request:  # its header block says whether it answers
            self.switching = True
            return True
        self.no_body = bool(self.on_start(self.start_time, value))
        if self.request and value == b"CONNECT":
            self.no_body = True
        return True

    def _frame_body(self, head: bytes) -> None:
        self.announced = False
        status = self.status
        if status == 101:  # an upgrade: not HTTP/1.x after
            self.switching = False
            upgrade = _header_value(head, b"upgrade:")
            if upgrade == b"h2c" and self.on_upgrade is not None:
                self.state = SWITCHED
                return
            self.state = DEAD
            self.on_start(self.start_time, 101)
            return
        if self.request and self.no_body:  # CONNECT: not HTTP after
            self.state, self.remaining = HEAD, 0
            return
        if self.no_body or 100 <= status < 200 or status in (204, 304):
            self.state = HEAD
            return
        encoding = _header_value(head, b"transfer-encoding:")
        if encoding is not None and encoding.endswith(b"chunked"):
            self.state, self.buffer = CHUNK_SIZE, b""
            return
        length = _header_value(head, b"content-length:")
        if length is not None:
            if not length.isdigit():
                self.counters["bad_content_length"] += 1
                self.state = HUNT
                return
            self.remaining = int(length)
            self.state = BODY if self.remaining else HEAD
            return
        self.state = HEAD if self.request else UNTIL_CLOSE

    def _line(self, data: bytes) -> bytes:
        buffer = self.buffer + data
        end = buffer.find(b"\r\n")
        if end < 0:
            return self._keep(buffer, MAX_LINE, "chunk_line_too_long")
        line, rest = buffer[:end], buffer[end + 2 :]
        self.buffer = b""
        if self.state == TRAILER:
            if not line:
                self.state, self.announced = HEAD, False
            return rest
        size = line.split(b";", 1)[0].strip()
        try:
            self.remaining = int(size, 16)
        except ValueError:
            self.counters["bad_chunk_size"] += 1
            self.state = HUNT
            return b""
        if self.remaining < 0:
            self.counters["bad_chunk_size"] += 1
            self.state = HUNT
            return b""
        if self.remaining == 0:
            self.state = TRAILER
        else:
            self.remaining += 2  # the CRLF after the chunk's data
            self.state = CHUNK_DATA
        return rest
