"""Compact records: the off-site sniffer's format (seeds 000-002: a sniffer on the switch host
sends the analysis node what it saw, not the packets).

The on-host analyser matches requests to responses as usual and, per request and per response,
writes one fixed-size record into UDP datagrams for the analysis host, whose analyser feeds them
into the same per-service windows it fills from packets. A request costs 6 bytes, a response 12,
so about 18 bytes per answered request, plus a 20-byte header and the services' addresses once per
datagram. Pure: bytes in, tuples out; nothing here raises on any datagram (``parse`` names the
reason), and the buffer's bounds (datagram size, records per second) count what they drop.

Datagram (network byte order)::

    header   magic "CSAR" | version u8 (1) | services u8 | records u16 | sequence u32 | base u64
    service  family u8 (4 or 6) | address (4 or 16 bytes) | port u16       (``services`` times)
    record   kind u8 | service index u8 | offset i32 | [status u16 | service time u32]

``base`` is a capture time in microseconds since the Unix epoch; a record's time is base +
``offset`` microseconds. ``kind`` 1 is a request (6 bytes: no status, no time), 2 a final
response (12 bytes; service time in microseconds, ``0xFFFFFFFF`` when it was not matched to a
request). ``sequence`` counts the sender's datagrams, so the receiver counts lost ones.
"""

from __future__ import annotations

import struct
from collections import Counter

MAGIC, VERSION = b"CSAR", 1
REQUEST, RESPONSE = 1, 2
UNMATCHED = 0xFFFFFFFF
HEADER = struct.Struct("!4sBBHIQ")
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
        self, counters: Counter, rate: float = DEFAULT_RATE, max_datagram: int = MAX_DATAGRAM
    ) -> None:
        if not rate > 0:
            raise ValueError(f"record rate must be > 0, got {rate}")
        self.counters, self.rate, self.max_datagram = counters, rate, max_datagram
        self.tokens, self.last_time = rate, None
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
            self.ready.append(
                HEADER.pack(
                    MAGIC,
                    VERSION,
                    len(self.service_bytes),
                    self.count,
                    self.sequence & 0xFFFFFFFF,
                    self.base_us,
                )
                + b"".join(self.service_bytes)
                + b"".join(self.body)
            )
        self.sequence += 1
        self._reset()

    def take(self, partial: bool = False) -> list[bytes]:
        """Finished datagrams (and, with ``partial``, the one being filled) to send now."""
        if partial:
            self._finish()
        ready, self.ready = self.ready, []
        return ready


def parse(data: bytes) -> tuple[int, list[Record]] | str:
    """A datagram's sequence number and records, or the reason it is unusable."""
    if len(data) < HEADER.size:
        return "record_datagrams_bad"
    magic, version, services, count, sequence, base_us = HEADER.unpack_from(data)
    if magic != MAGIC:
        return "record_datagrams_bad"
    if version != VERSION:
        return "record_datagrams_bad_version"
    at, keys = HEADER.size, []
    try:
        for _ in range(services):
            family = data[at]
            length = 4 if family == 4 else 16 if family == 6 else 0
            if not length or at + 1 + length + 2 > len(data):
                return "record_datagrams_bad"
            keys.append(
                (data[at + 1 : at + 1 + length], _PORT.unpack_from(data, at + 1 + length)[0])
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
    return sequence, records


class SequenceTracker:
    """Datagrams lost between a sender's sequence numbers (per sender address)."""

    def __init__(self, counters: Counter) -> None:
        self.counters = counters
        self.last: dict[object, int] = {}

    def seen(self, sender: object, sequence: int) -> None:
        last = self.last.get(sender)
        if last is not None:
            gap = (sequence - last - 1) & 0xFFFFFFFF
            behind = (last - sequence) & 0xFFFFFFFF
            if 0 <= behind <= REORDER_WINDOW:  # a duplicate or a late datagram: counted once
                self.counters["record_datagrams_reordered"] += 1
                return
            if 0 < gap < 0x80000000:
                self.counters["record_datagrams_lost"] += gap
            elif gap >= 0x80000000:  # far behind: the sender restarted, counting from 0 again
                self.counters["record_senders_restarted"] += 1
        self.last[sender] = sequence
