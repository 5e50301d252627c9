"""HTTP over TLS without keys: load, service time, connections and handshake time from records.

The handshake is read in clear: it starts with the client's first handshake record (the
ClientHello) and ends with the client's Finished, the first record the client sends after its
ChangeCipherSpec (TLS 1.2: a handshake record) or, in TLS 1.3 (the ServerHello's
supported_versions, or the server's encrypted records before the client's), the client's first
application-data record. From then on, the client's application-data records are requests and
the server's are answers, in turns: a client record when no request waits opens one (its time is
the request's), and the server's first record after it answers it (its time is the answer's: the
service time between them). More client records before the answer belong to the same request,
more server records to the same answer. What the turns cannot see: the status (so no success
rate: it is absent, never 1), pipelined requests (one turn), and with HTTP/2 (``h2``) requests
multiplexed on one connection (one turn while streams overlap).

TLS 1.3 servers send session tickets after the client's Finished, usually while the first
request is on its way: the server's first records after the Finished, up to ``MAX_TICKETS``, the
first within ``TICKET_WAIT_S`` of the Finished and each next one within ``TICKET_GAP_S`` of the
one before (or within ``TICKET_WAIT_S`` when exactly as long as the first: a server writes its
tickets alike, and a loaded one spaces them), are taken as tickets, not answers. HTTP/2 adds
records that are neither requests nor answers (SETTINGS acknowledgements, WINDOW_UPDATE,
PING, GOAWAY, an empty DATA frame ending a stream): a client record of at most 17 bytes of
plaintext is not a request (a request whose header block is all indexed, 13-17 bytes, is missed), a server record of at most 9 bytes (a frame with no
payload) does not start an answer; the first client turn, the connection preface, is a request
only if it is longer than the preface and its SETTINGS (it carries the first HEADERS). The
server's preface (its SETTINGS, a WINDOW_UPDATE, the ack of the client's SETTINGS) may come
after the first request, later than the tickets' gap: the server's first record of at most
``H2_SERVER_PREFACE_MAX`` bytes of plaintext is that preface, no ticket and no answer (an answer
riding with it in a record that short is missed). Over
TLS 1.3 alerts are encrypted too: a client record of less than 18 bytes of plaintext (the
shortest HTTP/1.x request) is not a request. The plaintext is the record's length less 17 bytes
in TLS 1.3 and 24 in TLS 1.2 (AES-GCM; other ciphers differ by a few bytes).
"""

from __future__ import annotations

from collections import Counter

from cosample.appmon.streams import Budget, HalfStream
from cosample.appmon.tls import (
    ALERT,
    APPLICATION_DATA,
    CHANGE_CIPHER_SPEC,
    HANDSHAKE,
    SERVER_HELLO,
    TLS13,
    TlsParser,
)

MAX_TICKETS = 4
TICKET_GAP_S = 0.0005
TICKET_WAIT_S = 0.005
#: Record bytes beyond the plaintext: TLS 1.3 (AEAD tag and the inner content type), TLS 1.2
#: with AES-GCM (explicit nonce and tag).
OVERHEAD_13, OVERHEAD_12 = 17, 24
#: The shortest HTTP/1.x request (``GET / HTTP/1.0`` and the blank line), and the longest
#: HTTP/2 control frame a client sends (PING, or GOAWAY without debug data).
HTTP1_REQUEST_MIN, H2_CONTROL_MAX = 18, 17
#: An HTTP/2 client's preface record: the 24-byte preface and a SETTINGS frame of at most 6
#: settings (and a WINDOW_UPDATE): longer, and the first HEADERS rides along.
H2_PREFACE_MAX = 24 + 9 + 6 * 6 + 13
#: An HTTP/2 server's preface record: a SETTINGS frame of at most 6 settings, a WINDOW_UPDATE
#: and the acknowledgement of the client's SETTINGS.
H2_SERVER_PREFACE_MAX = 9 + 6 * 6 + 13 + 9


class TlsConnection:
    DEFAULT = "tls"
    __slots__ = (
        "undecided",
        "fixed",
        "service",
        "counters",
        "on_request",
        "on_response",
        "on_connection",
        "streams",
        "last_seen",
        "fins",
        "closed",
        "hello_time",
        "client_ccs",
        "server_ccs",
        "client_last",
        "finished",
        "tls13",
        "version_known",
        "turn",
        "answered",
        "spoke",
        "ticket_time",
        "tickets",
        "ticket_length",
        "preface",
        "server_preface",
        "protocol",
    )

    def __init__(
        self, service, counters: Counter, on_request, on_response, budget=None, on_connection=None
    ) -> None:
        self.service, self.counters = service, counters
        self.on_request, self.on_response, self.on_connection = (
            on_request,
            on_response,
            on_connection,
        )
        budget = budget if budget is not None else Budget()
        self.streams = (
            HalfStream(TlsParser(True, self._client, self._hello, counters), counters, budget),
            HalfStream(TlsParser(False, self._server, self._hello, counters), counters, budget),
        )
        self.protocol = self.DEFAULT
        self.last_seen, self.fins, self.closed = 0.0, 0, False
        self.undecided = self.fixed = False
        self.hello_time: float | None = None
        self.client_ccs = self.server_ccs = self.finished = self.tls13 = False
        self.client_last = 0.0  # the client's last handshake segment (its CCS's, once sent)
        self.version_known = False  # a ServerHello was read
        self.turn: float | None = None  # the waiting request's time
        self.answered = True
        self.spoke = False  # the server sent records since the request (answers or not)
        self.ticket_time: float | None = None  # when tickets may come: the client's Finished
        self.tickets = 0
        self.ticket_length = 0  # the first ticket's record length
        self.preface = self.server_preface = self.protocol == "h2"

    def _hello(self, hello, time: float) -> None:
        if hello.kind == SERVER_HELLO:
            self.tls13, self.version_known = self.tls13 or hello.version == TLS13, True
            chosen = hello.alpn[0] if hello.alpn else None
        else:
            chosen = hello.alpn[0] if hello.alpn in ((b"h2",), (b"http/1.1",)) else None
        if chosen is not None and not self.fixed:
            self.protocol = "h2" if chosen == b"h2" else "tls"
            self.preface = self.server_preface = self.protocol == "h2"

    def _overhead(self) -> int:
        return OVERHEAD_13 if self.tls13 else OVERHEAD_12

    def _client(self, kind, length: int, time: float) -> None:
        if kind == HANDSHAKE or (kind is None and not self.finished and not self.client_ccs):
            if self.hello_time is None:
                self.hello_time = time
            elif self.client_ccs and not self.finished:
                self._finished(time)  # TLS 1.2: the Finished, encrypted, after the CCS
            self.client_last = time
        elif kind == CHANGE_CIPHER_SPEC:
            self.client_ccs, self.client_last = True, time
            if self.server_ccs and not self.version_known:
                self.tls13 = True  # the server's CCS first, its hello unread: TLS 1.3's order
        elif kind == APPLICATION_DATA or kind is None:
            if not self.finished:
                if self.streams[0].parser.lost and (self.client_ccs or self.server_ccs):
                    # a cut (or a loss) took the client's Finished: it was in the segment of
                    # its CCS (or, TLS 1.2, before the server's CCS); this record is data
                    self._finished(self.client_last)
                elif self.client_ccs or self.tls13:
                    self.tls13 = self.tls13 or kind == APPLICATION_DATA
                    self._finished(time)  # TLS 1.3: the Finished is an application record
                    return
                else:
                    self.counters["tls_early_data"] += 1
                    return
            if kind is not None:
                if self.protocol == "h2":
                    if self.preface:
                        self.preface = False
                        if length <= H2_PREFACE_MAX + self._overhead():
                            return
                    elif length <= H2_CONTROL_MAX + self._overhead():
                        return  # SETTINGS ack, WINDOW_UPDATE, PING, GOAWAY: no request
                elif length < HTTP1_REQUEST_MIN + self._overhead():
                    return  # TLS 1.3's encrypted alert (close_notify) or KeyUpdate
            if self.answered or self.spoke:
                if not self.answered:  # its answer went by as records taken for others
                    self.counters["requests_answer_unseen"] += 1
                self.turn, self.answered, self.spoke = time, False, False
                self.on_request(self.service, time, self)

    def _finished(self, time: float) -> None:
        self.finished = True
        if self.tls13 or not self.version_known:  # unknown: the server's next record tells
            self.ticket_time = time
        if self.hello_time is not None and self.on_connection is not None:
            self.on_connection(self.service, self.hello_time, self.protocol, time - self.hello_time)

    def _server(self, kind, length: int, time: float) -> None:
        if kind == CHANGE_CIPHER_SPEC:
            self.server_ccs = True
            if self.finished:  # TLS 1.2's server CCS after the client's Finished: no tickets
                self.ticket_time = None
        if kind == ALERT or kind == HANDSHAKE or kind == CHANGE_CIPHER_SPEC:
            return
        if not self.finished:
            if kind == APPLICATION_DATA:
                self.tls13 = True  # encrypted handshake messages: TLS 1.3
            return
        if self.server_preface and kind is not None:
            if length <= H2_SERVER_PREFACE_MAX + self._overhead():
                self.server_preface = False
                return  # the server's SETTINGS, whenever it comes: no ticket, no answer
        self.spoke = True
        if self.ticket_time is not None:
            if self.tickets < MAX_TICKETS and self._ticket(length, time - self.ticket_time):
                if not self.tickets:
                    self.ticket_length = length
                self.tickets += 1
                self.ticket_time = time
                self.counters["tls_tickets"] += 1
                return
            self.ticket_time = None
        self.server_preface = False  # a longer first record: the preface rode along
        if self.answered:
            return  # more of the same answer, or a server's own (HTTP/2 SETTINGS)
        if self.protocol == "h2" and kind is not None and length <= 9 + self._overhead():
            return  # an empty frame (SETTINGS ack, the END_STREAM DATA): no answer yet
        self.answered = True
        assert self.turn is not None  # (set with ``answered`` False: a request waits)
        self.on_response(self.service, time, None, max(0.0, time - self.turn), self)

    def _ticket(self, length: int, after_s: float) -> bool:
        """Whether a server record ``after_s`` after the Finished (the first) or the last ticket
        is a ticket too: the first within ``TICKET_WAIT_S``, the next within ``TICKET_GAP_S``,
        or within ``TICKET_WAIT_S`` when as long as the first (a server writes its tickets
        alike, and a loaded one spaces them: 0.17 ms apart in a quiet capture, more under load,
        where the second was taken for the answer)."""
        if not self.tickets:
            return after_s <= TICKET_WAIT_S
        return after_s <= TICKET_GAP_S or (
            length == self.ticket_length and after_s <= TICKET_WAIT_S
        )

    def close(self) -> None:
        if not self.closed:
            for stream in self.streams:
                stream.flush()
            self.closed = True
            if not self.answered:
                self.counters["requests_unanswered"] += 1


class H2TlsConnection(TlsConnection):
    """A connection to a port declared ``h2``: HTTP/2 over TLS."""

    DEFAULT = "h2"
