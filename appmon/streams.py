"""TCP reassembly for one direction, just enough to hand contiguous bytes to an ``HttpParser``.

In-order bytes go straight through; retransmitted bytes (wholly or partly before the next
expected sequence number) are cut off, so nothing is parsed, hence counted, twice; segments that
arrive early wait in a small buffer (``MAX_EARLY_SEGMENTS``, ``MAX_EARLY_BYTES``) until the hole
fills. When the buffer is full, or the hole is older than ``REORDER_WAIT_S``, or the
connection ends, the hole is given up: the parser is told of a gap and hunts for
the next message start. A hole that lies inside a body the parser is skipping anyway (a
selective mirror's segments without PSH) is no loss: it is stepped over at once, and the parser
stays in step. A segment the capture cut short (a truncating mirror) is no hole: its length on
the wire moves the stream on, and the parser is told how many of its bytes went unseen
(``HttpParser.cut``). Sequence numbers are compared modulo 2^32.
"""

from __future__ import annotations

from collections import Counter
from typing import Generic, Protocol, TypeVar

MASK, HALF = 0xFFFFFFFF, 0x80000000
#: Early (out-of-order) segments kept per direction, and their payload bytes.
MAX_EARLY_SEGMENTS = 32
MAX_EARLY_BYTES = 65536
#: Early bytes held by all connections together (the analyser's ``Budget``).
MAX_EARLY_TOTAL = 64 << 20
#: A hole still open this long after the first segment behind it arrived is given up: reordering
#: on a path takes microseconds to milliseconds; a mirror that never copied the bytes, forever.
REORDER_WAIT_S = 0.2


class Budget:
    """Bytes held in early segments by all streams together, and the most they may hold."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = MAX_EARLY_TOTAL) -> None:
        self.limit, self.used = limit, 0


class Parser(Protocol):
    """What a half stream hands its bytes to: ``http.HttpParser``, ``h2.H2Parser``,
    ``tls.TlsParser``."""

    lost: bool

    @property
    def hunting(self) -> bool: ...
    def begin(self) -> None: ...
    def gap(self) -> None: ...
    def skippable(self, missing: int) -> bool: ...
    def skip(self, missing: int) -> None: ...
    def cut(self, missing: int, time: float, seq: int, ack: int) -> None: ...
    def starts(self, data: bytes) -> bool: ...
    def feed(
        self, data: bytes, time: float, segment_start: bool = True, seq: int = 0, ack: int = 0
    ) -> None: ...


P = TypeVar("P", bound=Parser)


class HalfStream(Generic[P]):
    """Ordering of one direction's bytes; ``parser`` receives them."""

    __slots__ = ("parser", "next_seq", "early", "early_bytes", "counters", "budget")

    def __init__(self, parser: P, counters: Counter, budget: Budget | None = None) -> None:
        self.parser, self.counters = parser, counters
        self.budget = budget if budget is not None else Budget()
        self.next_seq: int | None = None
        self.early: dict[int, tuple[bytes, int, float, int]] = {}
        self.early_bytes = 0

    def syn(self, seq: int) -> None:
        """The SYN fixes the first data byte's sequence number (seq + 1): the first message
        starts there, so the parser need not hunt for it (however short the first segment)."""
        if self.next_seq is None:
            self.next_seq = (seq + 1) & MASK
            self.parser.begin()

    def segment(
        self, seq: int, payload: bytes, wire_length: int, time: float, ack: int = 0
    ) -> None:
        if self.next_seq is None:  # picked up mid-stream: start here, hunting; what came
            self.next_seq = seq  # before is unknown, as after a gap
            self.parser.lost = True
        elif self.early and time - min(held[2] for held in self.early.values()) > REORDER_WAIT_S:
            self.counters["reorder_wait_expired"] += 1
            self._skip_hole()
        ahead = (seq - self.next_seq) & MASK
        if ahead == 0:
            self._deliver(seq, payload, wire_length, time, ack)
            if self.early:
                self._drain()
        elif ahead >= HALF:  # starts before what was delivered: a retransmission or an overlap
            behind = MASK + 1 - ahead
            if behind >= wire_length:
                self.counters["retransmitted_segments"] += 1
                return
            self.counters["overlapping_segments"] += 1
            self._deliver(
                (seq + behind) & MASK,
                payload[behind:],
                wire_length - behind,
                time,
                ack,
                segment_start=False,
            )
            if self.early:
                self._drain()
        else:
            self._hold(seq, payload, wire_length, time, ack)

    def _deliver(
        self,
        seq: int,
        payload: bytes,
        wire_length: int,
        time: float,
        ack: int,
        segment_start: bool = True,
    ) -> None:
        if payload:
            self.parser.feed(payload, time, segment_start, seq, ack)
        if wire_length > len(payload):  # the capture cut the segment: its bytes exist, unseen
            self.counters["truncated_segments"] += 1
            self.parser.cut(wire_length - len(payload), time, seq + len(payload), ack)
        self.next_seq = (seq + wire_length) & MASK

    def _hold(self, seq: int, payload: bytes, wire_length: int, time: float, ack: int) -> None:
        assert self.next_seq is not None  # (``segment`` started the stream)
        missing = (seq - self.next_seq) & MASK
        parser = self.parser
        if parser.skippable(missing):  # the hole is body bytes: nothing to wait for
            self.counters["body_holes_skipped"] += 1
            parser.skip(missing)
            self._deliver(seq, payload, wire_length, time, ack)
            if self.early:
                self._drain()
            return
        if parser.hunting and parser.starts(payload):
            self.counters["holes_skipped"] += 1  # framing was lost already: resync here
            self.next_seq = seq
            self._deliver(seq, payload, wire_length, time, ack)
            if self.early:
                self._drain()
            return
        if seq in self.early:
            self.counters["retransmitted_segments"] += 1
            return
        full = (
            len(self.early) >= MAX_EARLY_SEGMENTS
            or self.early_bytes + len(payload) > MAX_EARLY_BYTES
        )
        if full or self.budget.used + len(payload) > self.budget.limit:
            self.counters["reorder_buffer_full" if full else "reorder_memory_full"] += 1
            self._keep(seq, payload, wire_length, time, ack)  # then all held go, at once
            self._skip_hole()
            return
        self._keep(seq, payload, wire_length, time, ack)

    def _keep(self, seq: int, payload: bytes, wire_length: int, time: float, ack: int) -> None:
        self.early[seq] = (payload, wire_length, time, ack)
        self.early_bytes += len(payload)
        self.budget.used += len(payload)

    def acknowledged(self, ack: int) -> None:
        """The other side acknowledged bytes up to ``ack``: a hole before that was delivered to
        it, so the capture lost it for good (it does not wait for a retransmission)."""
        while self.early:  # (segments are held only once the stream started)
            assert self.next_seq is not None
            if not 0 < ((ack - self.next_seq) & MASK) < HALF:
                break
            self.counters["holes_acknowledged"] += 1
            self._skip_hole()

    def flush(self) -> None:
        """The stream ended: deliver what waits behind holes, giving the holes up."""
        while self.early:
            self._skip_hole()

    def _skip_hole(self) -> None:
        """Give up the missing bytes: continue at the earliest held segment, after a gap."""
        next_seq = self.next_seq
        assert next_seq is not None  # (segments are held only once the stream started)
        first = min(self.early, key=lambda seq: (seq - next_seq) & MASK)
        self.counters["stream_gaps"] += 1
        self.parser.gap()
        self.next_seq = first
        self._drain()

    def _drain(self) -> None:
        """Deliver held segments that the stream has reached (or passed: overlaps are cut)."""
        while self.early:
            next_seq = self.next_seq
            assert next_seq is not None  # (segments are held only once the stream started)
            ready = None
            for seq in self.early:
                if (seq - next_seq) & MASK >= HALF or seq == next_seq:
                    ready = seq
                    break
            if ready is None:
                return
            payload, wire_length, time, ack = self.early.pop(ready)
            self.early_bytes -= len(payload)
            self.budget.used -= len(payload)
            behind = (next_seq - ready) & MASK
            if behind >= wire_length and wire_length:
                self.counters["retransmitted_segments"] += 1
                continue
            self._deliver(
                (ready + behind) & MASK,
                payload[behind:],
                wire_length - behind,
                time,
                ack,
                segment_start=behind == 0,
            )
