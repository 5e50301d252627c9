"""Connections: which side is the server, and each response matched to its request, oldest first.

A connection is opened by a SYN (its sender is the client) or, picked up mid-stream, by a
payload that begins with a request line (sender: client) or a status line (receiver: client).
Each side's bytes go through a ``HalfStream`` into an ``HttpParser``; a request's start time
joins a queue, and a final response takes the oldest (seeds 000/002: HTTP/1.x answers in order,
pipelined or not). Interim 1xx responses take nothing. When the capture lost packets, TCP tells
what order alone cannot: a response's acknowledgement number says which request bytes the server
had received, so a response is never matched to a request sent after it was written (its own
request was lost), and after lost responses the requests they answered leave the queue.
Memory is bounded: ``max_connections`` in the table, ``MAX_PENDING`` waiting requests per
connection (beyond it the oldest leaves the queue; every request still counts as load), early
segments per direction and for all connections together (``streams.Budget``); what does not fit
is counted by name.
Closed (FIN both ways, or RST) and idle connections leave the table on ``expire``.
A connection upgraded to h2c (a request with ``Upgrade: h2c`` answered 101, RFC 7540 section
3.2) goes on as HTTP/2 (``h2conn.H2Connection``) on the same byte streams: the Upgrade request is
stream 1's, answered by the server's first HEADERS on stream 1, and the 101 answers nothing.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from typing import cast

from cosample.appmon import protocols
from cosample.appmon.decode import ACK, FIN, RST, SYN, Segment
from cosample.appmon.h2 import H2Parser
from cosample.appmon.h2conn import H2Connection
from cosample.appmon.http import HEAD, HttpParser, starts_message
from cosample.appmon.streams import Budget, HalfStream
from cosample.appmon.tlsconn import H2TlsConnection, TlsConnection
from cosample.plan.appmon import SHARE_BITS

#: Requests waiting for their response on one connection.
MAX_PENDING = 64
#: Connections tracked at once (both directions' keys count as one).
MAX_CONNECTIONS = 65536
#: A connection with no packet for this long is forgotten; a closed one after CLOSED_LINGER_S
#: (late retransmissions of a closed connection are recognised, not counted again).
IDLE_TIMEOUT_S = 120.0
CLOSED_LINGER_S = 5.0

#: (service key, request time, the connection) and (service key, response time, status,
#: service time or None); the connection lets a window count requests per connection (the unit
#: a hash-sampled share samples: ``windows.ServiceStats.per_connection``)
OnRequest = Callable[[tuple, float, object], None]
OnResponse = Callable[[tuple, float, "int | None", "float | None", object], None]
#: (service key, time, protocol or None, TLS handshake seconds or None): a connection opened
#: (a client's SYN), or a TLS handshake that began at ``time`` completed
OnConnection = Callable[[tuple, float, "str | None", "float | None"], None]


def _before(seq: int, ack: int) -> bool:
    """Whether sequence number ``seq`` comes before ``ack`` (modulo 2^32)."""
    return 0 < ((ack - seq) & 0xFFFFFFFF) < 0x80000000


def _unseen_requests(requests: HalfStream, ack: int) -> bool:
    """Whether the server had acknowledged request bytes beyond those the capture delivered
    (more than a FIN's one sequence number): requests the capture lost."""
    delivered = requests.next_seq
    return delivered is not None and 1 < ((ack - delivered) & 0xFFFFFFFF) < 0x80000000


class Connection:
    __slots__ = (
        "protocol",
        "upgraded",
        "undecided",
        "service",
        "pending",
        "streams",
        "last_seen",
        "fins",
        "closed",
        "counters",
        "on_request",
        "on_response",
        "answered",
    )

    def __init__(
        self,
        service: tuple,
        counters: Counter,
        on_request: OnRequest,
        on_response: OnResponse,
        budget: Budget | None = None,
        on_connection: OnConnection | None = None,
    ) -> None:
        self.service, self.counters = service, counters
        self.on_request, self.on_response = on_request, on_response
        #: waiting requests: (time, a HEAD request, its first byte's sequence number)
        self.pending: deque[tuple[float, bool, int]] = deque()
        self.streams = (
            HalfStream(HttpParser(True, self._request, counters), counters, budget),
            HalfStream(
                HttpParser(False, self._response, counters, self._upgrade), counters, budget
            ),
        )
        #: ``http``, or ``h2c`` from a 101 to h2c on: ``upgraded`` then reads the streams
        self.protocol = "http"
        self.upgraded: H2Connection | None = None
        self.last_seen, self.fins, self.closed = 0.0, 0, False
        self.answered: int | None = None  # acknowledgement number of the last final response
        #: opened by a SYN on a port of no declared protocol: its first request bytes decide
        self.undecided = False

    def _request(self, time: float, method: bytes | None) -> bool:
        start = self.streams[0].parser.start_seq
        if self.answered is not None and _before(start, self.answered):
            # a response already processed was written after the server had this request: its
            # answer went by while the request waited behind a hole in the capture
            self.counters["requests_late"] += 1
            self.on_request(self.service, time, self)
            return False
        if len(self.pending) >= MAX_PENDING:
            # so many unanswered requests: their answers went uncaptured (a selective mirror
            # that copies no segment starting a long response). The request still counts as
            # load; the oldest waiting one makes room (its answer is the likeliest lost).
            self.pending.popleft()
            self.counters["pending_requests_full"] += 1
        self.pending.append((time, method == b"HEAD", start))
        self.on_request(self.service, time, self)
        return False

    def _response(self, time: float, status: int | None) -> bool:
        """A response began (``status`` None: its status line was cut away, so it is taken as
        final, it answers a request, but is not counted)."""
        if status is not None and 100 <= status < 200 and status != 101:
            return True  # interim: the final response follows
        parser, pending = self.streams[1].parser, self.pending
        # the server had received this many request bytes: a request that starts at or after
        # ``ack`` cannot be the one answered (its own request was lost from the capture)
        ack = parser.start_ack
        if parser.lost and pending and _unseen_requests(self.streams[0], ack):
            # responses were lost, and the server had received request bytes the capture lost
            # too: the newest request it had is not in the queue, and any waiting one may have
            # had its answer in the lost bytes; pairing this response with one could make it
            # older than its own, so it stays unpaired and the received ones leave the queue
            while pending and _before(pending[0][2], ack):
                pending.popleft()
                self.counters["requests_answer_lost"] += 1
        while pending and parser.lost and len(pending) > 1 and _before(pending[1][2], ack):
            # responses were lost here: the queue's oldest requests lost their answers; answer
            # the newest request the server had received (exact unless pipelined across a loss)
            pending.popleft()
            self.counters["requests_answer_lost"] += 1
        parser.lost = False
        self.answered = ack
        if not pending or not _before(pending[0][2], ack):
            if status is None:
                self.counters["status_lines_unseen"] += 1
                return False
            self.counters["responses_without_request"] += 1
            self.on_response(self.service, time, status, None, self)
            return False
        requested, head, _ = pending.popleft()
        if status is None:  # its request is answered; what the answer was is unknown
            self.counters["status_lines_unseen"] += 1
            return head
        self.on_response(self.service, time, status, max(0.0, time - requested), self)
        return head

    def _upgrade(self, time: float, rest: bytes) -> None:
        """The server's 101 to h2c ended at ``time``; ``rest``: its first HTTP/2 bytes. From
        here an ``H2Connection`` reads both streams, reporting as this connection; the oldest
        waiting request (the Upgrade) is stream 1's. The client's next bytes are its preface
        when its stream is at a message boundary, else (the preface already went by, in a
        capture that shows it before the 101) framing resumes at a segment that starts with a
        frame."""
        h2 = H2Connection(
            self.service,
            self.counters,
            lambda service, at, _: self.on_request(service, at, self),
            lambda service, at, status, took, _: self.on_response(service, at, status, took, self),
        )
        client = self.streams[0].parser
        at_boundary = client.state == HEAD and not client.buffer and not client.announced
        # the half streams go on (sequence numbers, held segments) with h2's parsers: from here
        # they are the h2 connection's
        streams = cast(tuple[HalfStream[H2Parser], HalfStream[H2Parser]], self.streams)
        for mine, theirs in zip(streams, h2.streams):
            mine.parser = theirs.parser
        h2.streams = streams
        if at_boundary:
            self.streams[0].parser.begin()
        self.streams[1].parser.begin()
        if self.pending:
            h2.waiting[1] = self.pending.popleft()[0]
        self.protocol, self.upgraded = "h2c", h2
        self.counters["h2c_upgrades"] += 1
        if rest:
            self.streams[1].parser.feed(rest, time, False)

    def close(self) -> None:
        if not self.closed:
            for stream in self.streams:
                stream.flush()
            if self.upgraded is not None:
                self.upgraded.close()
            else:
                self.streams[1].parser.settle()
            self.closed = True
            if self.pending:
                self.counters["requests_unanswered"] += len(self.pending)
                self.pending.clear()


#: A connection of any protocol, as the table holds it.
AnyConnection = Connection | H2Connection | TlsConnection
#: The connection of each protocol (``protocols.PROTOCOLS``); all are driven alike by the table.
CONNECTIONS: dict[str, type[AnyConnection]] = {
    "http": Connection,
    "h2c": H2Connection,
    "tls": TlsConnection,
    "h2": H2TlsConnection,
}


class ConnectionTable:
    """All tracked connections; ``segment`` is the per-packet entry point."""

    def __init__(
        self,
        counters: Counter,
        on_request: OnRequest,
        on_response: OnResponse,
        max_connections: int = MAX_CONNECTIONS,
        ports: frozenset[int] = frozenset(),
        selected: int = 1 << SHARE_BITS,
        protocols: dict[int, str] | None = None,
        on_connection: OnConnection | None = None,
    ):
        self.counters, self.on_request, self.on_response = counters, on_request, on_response
        self.on_connection = on_connection
        self.max_connections, self.ports = max_connections, ports
        #: server port -> declared protocol (``protocols.PROTOCOLS``); other ports: detected
        #: from each connection's first request bytes (HTTP/1.x, h2c's preface, a ClientHello)
        self.protocols = dict(protocols or {})
        #: only connections whose client port's low SHARE_BITS bits are below this (a plan's
        #: share of connections, ``plan.appmon.selected_share``; the selective mirror's rule)
        self.selected = selected
        self.budget = Budget()
        # (src, dst, sport, dport) -> (connection, 0 for client->server or 1)
        self.table: dict[tuple, tuple[AnyConnection, int]] = {}
        self.connections = 0

    def segment(self, segment: Segment, time: float) -> None:
        src, dst, sport, dport, seq, flags, payload, wire_length, ack = segment
        entry = self.table.get((src, dst, sport, dport))
        if entry is None:
            entry = self._open(segment, time)
            if entry is None:
                return
        connection, side = entry
        if connection.closed and flags & SYN and not flags & ACK:  # the 4-tuple used anew
            self._forget((src, dst, sport, dport) if side == 0 else (dst, src, dport, sport))
            entry = self._open(segment, time)
            if entry is None:
                return
            connection, side = entry
        connection.last_seen = time
        if connection.closed:
            if payload:
                self.counters["segments_after_close"] += 1
            return
        stream = connection.streams[side]
        other = connection.streams[1 - side]
        if other.early and flags & ACK:
            other.acknowledged(ack)
        if flags & SYN:
            stream.syn(seq)
            return
        if wire_length:
            if connection.undecided and side == 0 and seq == stream.next_seq:
                connection.undecided = False
                kind = protocols.detect(payload)
                if connection.protocol == "h2c":  # declared: HTTP/1.x bytes ask for an Upgrade
                    kind = "h2c" if protocols.PREFACE.startswith(payload[:24]) else "http"
                if kind != connection.protocol:
                    connection = self._replace(connection, (src, dst, sport, dport), kind)
                    stream = connection.streams[0]
            stream.segment(seq, payload, wire_length, time, ack)
        if flags & RST:
            connection.close()
        elif flags & FIN:
            connection.fins |= 1 << side
            if connection.fins == 3:
                connection.close()

    def _open(self, segment: Segment, time: float) -> tuple[AnyConnection, int] | None:
        src, dst, sport, dport, _, flags, payload, _, _ = segment
        declared = self.protocols.get(dport) or self.protocols.get(sport)
        if flags & SYN:
            client_sends = not flags & ACK
        elif payload and declared and declared != "http":
            client_sends = dport in self.protocols  # picked up where its bytes allow it
            if not protocols.resumes(declared, payload):
                self.counters["not_tracked"] += 1
                return None
        elif payload and starts_message(payload, True):
            client_sends = True
        elif payload and starts_message(payload, False):
            client_sends = False
        else:
            self.counters["not_tracked"] += 1
            return None
        server, port = (dst, dport) if client_sends else (src, sport)
        declared = self.protocols.get(port)
        if self.ports and port not in self.ports:
            self.counters["other_port"] += 1
            return None
        if (
            self.selected < 1 << SHARE_BITS
            and (sport if client_sends else dport) & ((1 << SHARE_BITS) - 1) >= self.selected
        ):
            self.counters["not_selected"] += 1
            return None
        if self.connections >= self.max_connections:
            self.counters["connection_table_full"] += 1
            return None
        kind = declared or "http"
        connection = CONNECTIONS[kind](
            (server, port),
            self.counters,
            self.on_request,
            self.on_response,
            self.budget,
            self.on_connection,
        )
        connection.undecided = declared in (None, "h2c") and bool(flags & SYN)
        if isinstance(connection, TlsConnection):  # (``protocols.OVER_TLS``)
            connection.fixed = True  # the plan says h2 or not; ALPN need not tell
        if flags & SYN and client_sends and self.on_connection is not None:
            self.on_connection((server, port), time, declared, None)
        forward, backward = (src, dst, sport, dport), (dst, src, dport, sport)
        side = 0 if client_sends else 1
        self.table[forward] = (connection, side)
        self.table[backward] = (connection, 1 - side)
        self.connections += 1
        return connection, side

    def _replace(self, old, key: tuple, kind: str):
        """``old`` (its client's key ``key``) as a connection of protocol ``kind``, from its
        first request byte on: the SYNs' sequence numbers carried over."""
        new = CONNECTIONS[kind](
            old.service,
            self.counters,
            self.on_request,
            self.on_response,
            self.budget,
            self.on_connection,
        )
        streams: tuple[HalfStream, ...] = new.streams  # (of whichever protocol)
        for mine, theirs in zip(streams, old.streams):
            if theirs.next_seq is not None:
                mine.next_seq = theirs.next_seq
                mine.parser.begin()
        new.last_seen, new.fins = old.last_seen, old.fins
        src, dst, sport, dport = key
        self.table[key] = (new, 0)
        self.table[(dst, src, dport, sport)] = (new, 1)
        return new

    def expire(
        self, now: float, idle_s: float = IDLE_TIMEOUT_S, linger_s: float = CLOSED_LINGER_S
    ) -> int:
        """Forget closed connections after ``linger_s`` and idle ones after ``idle_s``."""
        stale = [
            key
            for key, (connection, side) in self.table.items()
            if side == 0
            and now - connection.last_seen >= (linger_s if connection.closed else idle_s)
        ]
        for key in stale:
            connection = self.table[key][0]
            if not connection.closed:
                self.counters["connections_idle"] += 1
            self._forget(key)
        return len(stale)

    def _forget(self, key: tuple) -> None:
        """Remove the connection whose client->server key is ``key``."""
        connection, _ = self.table.pop(key)
        src, dst, sport, dport = key
        self.table.pop((dst, src, dport, sport), None)
        connection.close()
        self.connections -= 1

    def close_all(self) -> None:
        """End of input: requests still waiting are unanswered."""
        for connection, side in self.table.values():
            if side == 0:
                connection.close()
