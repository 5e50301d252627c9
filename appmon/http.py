"""HTTP/1.x message framing over one direction of a TCP stream: where each message starts.

The analyser needs only the first line of each request and response, but to find the next one on
a keep-alive or pipelined connection it must skip bodies: ``Content-Length``, ``chunked`` and
read-until-close are followed; bodies are counted, never stored. Header blocks are buffered up to
``MAX_HEADER`` bytes, so memory per direction is bounded. After a gap (lost or truncated bytes)
or a line that is not HTTP, the parser *hunts*: it waits for a segment whose payload begins
with a request or status line. Pure: a callback receives each first line, with the capture time
of its first byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

#: Bytes of one header block kept while waiting for its end; longer blocks are dropped.
MAX_HEADER = 16384
#: Bytes of a chunk-size or trailer line kept.
MAX_LINE = 1024
METHODS = frozenset(
    (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE")
)

HUNT, HEAD, BODY, CHUNK_SIZE, CHUNK_DATA, TRAILER, UNTIL_CLOSE, DEAD = range(8)


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
    or the status code (responses); for a response it returns whether the message has no body
    (the answer to a HEAD request), which only the connection knows. ``start_seq``,
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
    )

    def __init__(
        self, request: bool, on_start: Callable[[float, object], bool], counters: Counter
    ) -> None:
        self.request, self.on_start, self.counters = request, on_start, counters
        self.state, self.buffer, self.start_time = HUNT, b"", 0.0
        self.remaining, self.status, self.no_body, self.announced = 0, 0, False, False
        # sequence number of the current message's first byte, the acknowledgement number its
        # segment carried, and whether framing was lost since the last message started
        self.start_seq = self.start_ack = self.position = self.ack = 0
        self.lost = False

    def begin(self) -> None:
        """The next byte starts a message (the stream's first byte, after its SYN)."""
        if self.state == HUNT:
            self.state, self.buffer, self.announced = HEAD, b"", False

    def gap(self) -> None:
        """Bytes are missing here: what follows cannot be framed until a message start."""
        if self.state not in (UNTIL_CLOSE, DEAD):
            self.state, self.buffer, self.lost = HUNT, b"", True

    def skippable(self, missing: int) -> bool:
        """Whether ``missing`` bytes here would all be body bytes (or unframed): losing them
        loses nothing this parser needs (a truncating or selective mirror's usual hole)."""
        state = self.state
        return state in (UNTIL_CLOSE, DEAD) or (
            (state == BODY or (state == CHUNK_DATA and missing <= self.remaining - 2))
            and missing <= self.remaining
        )

    def skip(self, missing: int) -> bool:
        """``missing`` bytes are not seen here: True if framing survives (they were body bytes),
        else the parser hunts for the next message start."""
        if not self.skippable(missing):
            self._announce_cut()
            self.gap()
            return False
        if self.state == BODY or self.state == CHUNK_DATA:
            self.remaining -= missing
            if not self.remaining:
                self.state = HEAD if self.state == BODY else CHUNK_SIZE
                self.buffer, self.announced = b"", False
        return True

    @property
    def hunting(self) -> bool:
        return self.state == HUNT

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
                data = self._head(data, time)
            elif state == HUNT:
                if not (segment_start and starts_message(data, self.request)):
                    return
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
        return buffer[end + 4 :]

    def _keep(self, buffer: bytes, limit: int, reason: str) -> bytes:
        if len(buffer) > limit:
            self.counters[reason] += 1
            self.state, self.buffer = HUNT, b""
        else:
            self.buffer = buffer
        return b""

    def _announce(self, line: bytes) -> bool:
        value = request_method(line) if self.request else status_code(line)
        if value is None:
            self.counters["bad_start_line"] += 1
            self.state, self.buffer, self.lost = HUNT, b"", True
            return False
        self.announced, self.status = True, 0 if self.request else value
        self.no_body = bool(self.on_start(self.start_time, value))
        if self.request and value == b"CONNECT":
            self.no_body = True
        return True

    def _announce_cut(self) -> None:
        """The capture cut this message inside its first line (a truncating mirror): a method
        followed by a space, or ``HTTP/1.x DDD``, is enough to count it and read its status."""
        if self.state != HEAD or self.announced or not self.buffer:
            return
        line = self.buffer
        if self.request:
            space = line.find(b" ", 0, 8)
            value = line[:space] if space > 0 and line[:space] in METHODS else None
        else:
            value = status_code(line[:12]) if len(line) >= 12 else None
        if value is not None:
            self.counters["first_lines_cut"] += 1
            self.announced, self.status = True, 0 if self.request else value
            self.on_start(self.start_time, value)

    def _frame_body(self, head: bytes) -> None:
        self.announced = False
        status = self.status
        if status == 101 or (self.request and self.no_body):  # upgrade, CONNECT: not HTTP after
            self.state = DEAD if status == 101 else HEAD
            if status != 101:
                self.remaining = 0
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
