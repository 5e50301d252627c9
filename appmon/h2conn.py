"""An HTTP/2 connection in clear text (h2c): requests and responses matched per stream, exactly.

Every request opens a stream with the client's HEADERS frame; the server's first HEADERS on that
stream carries the response's ``:status`` (1xx are interim: the final one follows). The stream
id pairs them whatever the multiplexing, so service time (the request's HEADERS to the final
response's HEADERS, the HTTP/1 definition's analogue), status and success rate are exact per
stream. ``:status`` is read from the header block with HPACK (``hpack``, the
python-hyper decoder: docs/dependencies.md), whose dynamic table follows every block the server
sends; when a block was lost or cut the table can no longer be trusted, and the status is read
from the block's first field if it is a static-table entry or a literal (servers put ``:status``
first), else the response counts without a status. A stream reset before its answer is a request
unanswered. Server pushes (PUSH_PROMISE, even streams) are decoded for the table and not
counted. Bounds: ``MAX_OPEN_STREAMS`` waiting per connection (beyond: the oldest leaves).
"""

from __future__ import annotations

from collections import Counter

from hpack import Decoder, HPACKError
from hpack.huffman_table import decode_huffman

from cosample.appmon.h2 import (
    CONTINUATION,
    END_HEADERS,
    HEADERS,
    PADDED,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    H2Parser,
)
from cosample.appmon.streams import Budget, HalfStream

#: Streams waiting for their answer on one connection (RFC 9113 suggests at least 100).
MAX_OPEN_STREAMS = 1024
#: The HPACK dynamic table a server may use (its peer's SETTINGS_HEADER_TABLE_SIZE; memory bound).
MAX_TABLE = 65536
#: The static table's ``:status`` entries (RFC 7541 appendix A).
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}


def _integer(block: bytes, at: int, bits: int) -> tuple[int, int]:
    """An HPACK integer with a ``bits``-bit prefix at ``at``: (value, next position)."""
    mask = (1 << bits) - 1
    value, at = block[at] & mask, at + 1
    if value < mask:
        return value, at
    shift = 0
    while at < len(block) and shift < 28:
        byte, at = block[at], at + 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
    raise ValueError("integer runs past the block")


def first_status(block: bytes) -> int | None:
    """``:status`` from a header block's first field without the dynamic table: a static entry
    or a literal with the static name ``:status``; None if the block does not show it so."""
    try:
        at = 0
        while at < len(block) and block[at] & 0xE0 == 0x20:  # dynamic table size updates
            _, at = _integer(block, at, 5)
        if at >= len(block):
            return None
        byte = block[at]
        if byte & 0x80:
            return STATIC_STATUS.get(_integer(block, at, 7)[0])
        index, at = _integer(block, at, 6 if byte & 0x40 else 4)
        if index != 8 or at >= len(block):
            return None
        huffman, (length, at) = block[at] & 0x80, _integer(block, at, 7)
        raw = block[at : at + length]
        value = decode_huffman(raw) if huffman else raw
    except (ValueError, IndexError, HPACKError):
        return None
    return int(value) if len(value) == 3 and value.isdigit() and 100 <= int(value) <= 599 else None


def _block_of(kind: int, flags: int, payload: bytes) -> bytes:
    """The header block fragment inside a HEADERS or PUSH_PROMISE payload."""
    start, end = 0, len(payload)
    if flags & PADDED and payload:
        start, end = 1, len(payload) - payload[0]
    if kind == HEADERS and flags & PRIORITY_FLAG:
        start += 5
    elif kind == PUSH_PROMISE:
        start += 4
    return payload[start:end] if start <= end else b""


class H2Connection:
    """One h2c connection: the connection table drives its two half streams."""

    protocol = "h2c"
    __slots__ = (
        "undecided",
        "service",
        "counters",
        "on_request",
        "on_response",
        "streams",
        "last_seen",
        "fins",
        "closed",
        "waiting",
        "decoder",
        "trusted",
        "block",
        "block_stream",
        "block_time",
        "block_whole",
        "block_push",
    )

    def __init__(
        self, service, counters: Counter, on_request, on_response, budget=None, on_connection=None
    ) -> None:
        self.service, self.counters = service, counters
        self.on_request, self.on_response = on_request, on_response
        budget = budget if budget is not None else Budget()
        self.streams = (
            HalfStream(H2Parser(True, self._client_frame, counters), counters, budget),
            HalfStream(H2Parser(False, self._server_frame, counters), counters, budget),
        )
        self.last_seen, self.fins, self.closed, self.undecided = 0.0, 0, False, False
        self.waiting: dict[int, float] = {}  # stream id -> its request's time
        self.decoder = Decoder()
        self.decoder.max_allowed_table_size = MAX_TABLE
        self.trusted = True  # whether the decoder's dynamic table saw every block
        self.block, self.block_stream, self.block_time = b"", 0, 0.0
        self.block_whole = self.block_push = False

    def _client_frame(self, kind, flags, stream, time, payload, whole) -> None:
        if kind == HEADERS and stream & 1 and stream not in self.waiting:
            if len(self.waiting) >= MAX_OPEN_STREAMS:
                del self.waiting[next(iter(self.waiting))]
                self.counters["pending_requests_full"] += 1
            self.waiting[stream] = time
            self.on_request(self.service, time, self)
        elif kind == RST_STREAM and self.waiting.pop(stream, None) is not None:
            self.counters["streams_reset"] += 1

    def _server_frame(self, kind, flags, stream, time, payload, whole) -> None:
        if kind == HEADERS or kind == PUSH_PROMISE:
            self.block = _block_of(kind, flags, payload)
            self.block_stream, self.block_time = stream, time
            self.block_whole, self.block_push = whole, kind == PUSH_PROMISE
        elif kind == CONTINUATION and stream == self.block_stream:
            self.block += payload
            self.block_whole = self.block_whole and whole
        elif kind == RST_STREAM:
            if self.waiting.pop(stream, None) is not None:
                self.counters["streams_reset"] += 1
            return
        else:
            return
        if flags & END_HEADERS or not whole:
            self._header_block()

    def _header_block(self) -> None:
        block, self.block = self.block, b""
        status = None
        if self.trusted and self.block_whole and not self.streams[1].parser.lost:
            try:
                for name, value in self.decoder.decode(block, raw=True):
                    if name == b":status":
                        status = int(value) if value.isdigit() else None
                        break
            except (HPACKError, ValueError):
                self.counters["h2_hpack_errors"] += 1
                self.trusted = False
        else:
            self.trusted = False
        if not self.trusted and status is None:
            status = first_status(block)
        if self.block_push:
            return
        stream = self.block_stream
        if status is not None and 100 <= status < 200:
            return  # interim: the final HEADERS follows
        requested = self.waiting.pop(stream, None)
        if requested is None:
            if status is not None:  # trailers carry no :status and are not answers
                self.counters["responses_without_request"] += 1
                self.on_response(self.service, self.block_time, status, None, self)
            return
        if status is None:
            self.counters["statuses_unread"] += 1
        self.on_response(
            self.service, self.block_time, status, max(0.0, self.block_time - requested), self
        )

    def close(self) -> None:
        if not self.closed:
            for stream in self.streams:
                stream.flush()
            self.closed = True
            if self.waiting:
                self.counters["requests_unanswered"] += len(self.waiting)
                self.waiting.clear()
