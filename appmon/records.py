"""Compact records: the off-site sniffer's format (seeds 000-002: a sniffer on the switch host
sends the analysis node what it saw, not the packets).

The on-host analyser matches requests to responses as usual and, per request and per response,
writes one fixed-size record into UDP datagrams for the analysis host, whose analyser feeds them
into the same per-service windows it fills from packets. A request costs 6 bytes, a response 12,
so about 18 bytes per answered request, plus a 28-byte header, the services' addresses and a
16-byte tag once per datagram. Pure: bytes in, tuples out; nothing here raises on any datagram
(``parse`` names the reason), and the buffer's bounds (datagram size, records per second) count
what they drop.

Datagram (network byte order)::

    header   magic "CSAR" | version u8 (2) | services u8 | records u16 | session u64
             | sequence u32 | base u64
    service  family u8 (4 or 6) | address (4 or 16 bytes) | port u16       (``services`` times)
    record   kind u8 | service index u8 | offset i32 | [status u16 | service time u32]
    tag      the first 16 bytes of HMAC-SHA256(key, everything before the tag)

``base`` is a capture time in microseconds since the Unix epoch; a record's time is base +
``offset`` microseconds. ``kind`` 1 is a request (6 bytes: no status, no time), 2 a final
response (12 bytes; service time in microseconds, ``0xFFFFFFFF`` when it was not matched to a
request). ``session`` is the sender's start (µs since the epoch) and ``sequence`` counts its
datagrams: the receiver counts lost ones and refuses a datagram it has seen (a replay). The
key is the pair's (``cosample.dataplane.recordkeys.pair_key``: derived from the site's record
secret and the two host names, docs/appmon.md "Compact records").
"""

from __future__ import annotations

import hmac
import struct
import time as clock
from collections import Counter

from cosample.dataplane.recordkeys import KEY_BYTES

MAGIC, VERSION = b"CSAR", 2
REQUEST, RESPONSE = 1, 2
UNMATCHED = 0xFFFFFFFF
HEADER = struct.Struct("!4sBBHQIQ")
#: Bytes of the HMAC-SHA256 tag kept at the end of a datagram.
TAG_BYTES = 16
#: The key of ``--insecure-records``: well known, so it authenticates nothing.
INSECURE_KEY = bytes(KEY_BYTES)
_REQUEST = struct.Struct("!BBi")
_RESPONSE = struct.Struct("!BBiHI")
_PORT = struct.Struct("!H")
#: Largest datagram sent: fits a 1500-byte MTU with IPv6 and UDP headers.
MAX_DATAGRAM = 1400
#: Records a sender may emit per second of capture time (token bucket, one second deep).
DEFAULT_RATE = 50_000
#: Finished datagrams waiting to be sent.
MAX_QUEUED = 256
#: A datagram this many sequence numbers behind the last is late, farther a sender's restart.
REORDER_WINDOW = 1024
#: The widest offset from a datagram's base (i32 microseconds, about 35 minutes).
_MAX_OFFSET_US = 2**31 - 1

#: (kind, service key (address bytes, port), time s, status, service time s or None)
Record = tuple


class RecordBuffer:
    """Records into datagrams: ``request``/``response`` are the connection table's callbacks
    (the ``Windows`` signature); ``take`` hands out the datagrams to send."""

    def __init__(
        self,
        counters: Counter,
        rate: float = DEFAULT_RATE,
        max_datagram: int = MAX_DATAGRAM,
        key: bytes = INSECURE_KEY,
        session: int | None = None,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"record rate must be > 0, got {rate}")
        self.counters, self.rate, self.max_datagram = counters, rate, max_datagram - TAG_BYTES
        self.key = key
        self.session = clock.time_ns() // 1000 if session is None else session
        self.tokens = rate
        self.last_time: float | None = None
        self.sequence = 0
        self.ready: list[bytes] = []
        self._reset()

    def _reset(self) -> None:
        self.services: dict[tuple, int] = {}
        self.service_bytes: list[bytes] = []
        self.body: list[bytes] = []
        self.size, self.base_us, self.count = HEADER.size, 0, 0

    def request(self, service: tuple, time: float, connection: object = None) -> None:
        self._add(service, time, None)  # records carry no connection (6 bytes a request)

    def response(
        self, service: tuple, time: float, status: int, service_time: float | None
    ) -> None:
        self._add(service, time, (status, service_time))

    def _admit(self, time: float) -> bool:
        if self.last_time is not None and time > self.last_time:
            self.tokens = min(self.rate, self.tokens + (time - self.last_time) * self.rate)
        if self.last_time is None or time > self.last_time:
            self.last_time = time
        if self.tokens < 1:
            self.counters["records_over_rate"] += 1
            return False
        self.tokens -= 1
        return True

    def _add(self, service: tuple, time: float, response: tuple | None) -> None:
        if not self._admit(time):
            return
        time_us = round(time * 1e6)
        address, port = service
        index = self.services.get(service)
        extra = 0 if index is not None else 1 + len(address) + 2
        size = _RESPONSE.size if response else _REQUEST.size
        if self.count and (
            self.size + extra + size > self.max_datagram
            or abs(time_us - self.base_us) > _MAX_OFFSET_US
            or (index is None and len(self.services) == 255)
        ):
            self._finish()
            index, extra = None, 1 + len(address) + 2
        if not self.count:
            self.base_us = time_us
        if index is None:
            index = self.services[service] = len(self.service_bytes)
            self.service_bytes.append(
                bytes((4 if len(address) == 4 else 6,)) + address + _PORT.pack(port)
            )
        offset = time_us - self.base_us
        if response is None:
            self.body.append(_REQUEST.pack(REQUEST, index, offset))
        else:
            status, service_time = response
            micros = (
                UNMATCHED if service_time is None else min(round(service_time * 1e6), UNMATCHED - 1)
            )
            self.body.append(_RESPONSE.pack(RESPONSE, index, offset, status, micros))
        self.size += extra + size
        self.count += 1

    def _finish(self) -> None:
        if not self.count:
            return
        if len(self.ready) >= MAX_QUEUED:
            self.counters["records_queue_full"] += self.count
        else:
            data = (
                HEADER.pack(
                    MAGIC,
                    VERSION,
                    len(self.service_bytes),
                    self.count,
                    self.session,
                    self.sequence & 0xFFFFFFFF,
                    self.base_us,
                )
                + b"".join(self.service_bytes)
                + b"".join(self.body)
            )
            self.ready.append(data + tag(self.key, data))
        self.sequence += 1
        self._reset()

    def take(self, partial: bool = False) -> list[bytes]:
        """Finished datagrams (and, with ``partial``, the one being filled) to send now."""
        if partial:
            self._finish()
        ready, self.ready = self.ready, []
        return ready


def tag(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, "sha256")[:TAG_BYTES]


def authentic(data: bytes, key: bytes) -> bool:
    """The datagram ends with the tag of what precedes it under ``key``."""
    if len(data) < HEADER.size + TAG_BYTES:
        return False
    return hmac.compare_digest(tag(key, data[:-TAG_BYTES]), data[-TAG_BYTES:])


def parse(data: bytes | memoryview) -> tuple[int, int, list[Record]] | str:
    """A datagram's session, sequence number and records, or the reason it is unusable (its
    tag is not checked here: ``authentic``)."""
    if len(data) < HEADER.size + TAG_BYTES:
        return "record_datagrams_bad"
    magic, version, services, count, session, sequence, base_us = HEADER.unpack_from(data)
    if magic != MAGIC:
        return "record_datagrams_bad"
    if version != VERSION:
        return "record_datagrams_bad_version"
    data = memoryview(data)[:-TAG_BYTES]
    at, keys = HEADER.size, []
    try:
        for _ in range(services):
            family = data[at]
            length = 4 if family == 4 else 16 if family == 6 else 0
            if not length or at + 1 + length + 2 > len(data):
                return "record_datagrams_bad"
            keys.append(
                (bytes(data[at + 1 : at + 1 + length]), _PORT.unpack_from(data, at + 1 + length)[0])
            )
            at += 1 + length + 2
        records = []
        for _ in range(count):
            kind, index, offset = _REQUEST.unpack_from(data, at)
            if index >= len(keys) or kind not in (REQUEST, RESPONSE):
                return "record_datagrams_bad"
            time = (base_us + offset) / 1e6
            if kind == REQUEST:
                records.append((REQUEST, keys[index], time, 0, None))
                at += _REQUEST.size
                continue
            _, _, _, status, micros = _RESPONSE.unpack_from(data, at)
            if not 100 <= status <= 599:
                return "record_datagrams_bad"
            records.append(
                (RESPONSE, keys[index], time, status, None if micros == UNMATCHED else micros / 1e6)
            )
            at += _RESPONSE.size
    except (IndexError, struct.error):
        return "record_datagrams_bad"
    if at != len(data):
        return "record_datagrams_bad"
    return session, sequence, records


class SequenceTracker:
    """One sender's datagrams: lost ones (gaps in the sequence), and the refusal of any it has
    seen before (a replay) or of an earlier session (a replay from before a restart).

    ``seen`` returns the reason a datagram is refused, or None. Within a session the last
    ``REORDER_WINDOW`` sequence numbers are remembered (a bit each); a late one is taken once
    (``record_datagrams_reordered``), a repeated one, or one older than that, is refused."""

    def __init__(self, counters: Counter) -> None:
        self.counters = counters
        self.session: int | None = None
        self.last = 0
        self.window = 0  # bit k: sequence ``last - k`` was taken

    def seen(self, session: int, sequence: int) -> str | None:
        if self.session is not None and session < self.session:
            return "record_datagrams_replayed"
        if session != self.session:
            if self.session is not None:
                self.counters["record_senders_restarted"] += 1
            self.session, self.last, self.window = session, sequence, 1
            return None
        ahead = (sequence - self.last) & 0xFFFFFFFF
        if 0 < ahead < 0x80000000:
            if ahead > 1:
                self.counters["record_datagrams_lost"] += ahead - 1
            kept = self.window << ahead if ahead < REORDER_WINDOW else 0
            self.window = (kept | 1) & ((1 << REORDER_WINDOW) - 1)
            self.last = sequence
            return None
        behind = (self.last - sequence) & 0xFFFFFFFF
        if behind >= REORDER_WINDOW or self.window >> behind & 1:
            return "record_datagrams_replayed"
        self.window |= 1 << behind
        self.counters["record_datagrams_reordered"] += 1
        return None
