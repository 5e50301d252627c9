"""An HTTP/2 connection in clear text (h2c): requests and responses matched per stream, exactly.

Every request opens a stream with the client's HEADERS frame; the server's first HEADERS on that
stream carries the response's ``:status`` (1xx are interim: the final one follows). The stream
id pairs them whatever the multiplexing, so service time (the request's HEADERS to the final
response's HEADERS, the HTTP/1 definition's analogue), status and success rate are exact per
stream. ``:status`` is read from the header block (``appmon.hpackwalk``) with HPACK's dynamic
table kept in step by ``hpack`` (the python-hyper decoder: docs/dependencies.md), which decodes
the blocks that change it; when a block was lost or cut the table can no longer be trusted, and
the status is read only where it is a static-table entry or a literal, else the response counts
without a status. A stream reset before its answer is a request
unanswered. Server pushes (PUSH_PROMISE, even streams) are decoded for the table and not
counted. Bounds: ``MAX_OPEN_STREAMS`` waiting per connection (beyond: the oldest leaves).
"""

from __future__ import annotations

from collections import Counter

from hpack import Decoder, HPACKError

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
from cosample.appmon.hpackwalk import first_status, walk
from cosample.appmon.streams import Budget, HalfStream

#: Streams waiting for their answer on one connection (RFC 9113 suggests at least 100).
MAX_OPEN_STREAMS = 1024
#: The HPACK dynamic table a server may use (its peer's SETTINGS_HEADER_TABLE_SIZE; memory bound).
MAX_TABLE = 65536


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
                status, changes = walk(block, self.decoder.header_table)
                if changes:  # the library keeps the table in step; it decodes the whole block
                    status = None
                    for name, value in self.decoder.decode(block, raw=True):
                        if name == b":status":
                            status = int(value) if value.isdigit() else None
                            break
            except (HPACKError, ValueError, IndexError):
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
