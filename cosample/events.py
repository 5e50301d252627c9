"""Event detection (INTCollector's idea): export a value only when it leaves its band, or is silent too long.

For each key (a server's packets/s, say) the detector remembers the last value it reported. A new
value is reported when it differs from that by more than ``band`` (relative, e.g. 0.1 = +/-10 %),
when nothing was reported for ``max_silence_s``, or the first time the key is seen. Pure: the
caller gives the time and writes the events out. The collector (``collector.events``: the
values it watches) and the application monitor both emit events this way.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO

from cosample.durations import parse_duration
from cosample.errors import CosampleError


@dataclass(frozen=True)
class Event:
    time: float
    key: str
    value: float
    previous: float | None
    reason: str  # "first", "band" or "silence"

    def as_dict(self) -> dict:
        return {
            "time": self.time,
            "key": self.key,
            "value": self.value,
            "previous": self.previous,
            "reason": self.reason,
        }


class EventDetector:
    """Band (relative) and maximum-silence rules per key."""

    def __init__(self, band: float = 0.1, max_silence_s: float = 300.0) -> None:
        if not band >= 0 or not max_silence_s > 0:
            raise ValueError(
                f"band must be >= 0 and max_silence_s > 0, got {band}, {max_silence_s}"
            )
        self.band, self.max_silence_s = band, max_silence_s
        self._reported: dict[str, tuple[float, float]] = {}  # key -> (value, time)

    def update(self, key: str, value: float, now: float) -> Event | None:
        last = self._reported.get(key)
        if last is None:
            reason = "first"
        elif abs(value - last[0]) > self.band * abs(last[0]) and value != last[0]:
            reason = "band"
        elif now - last[1] >= self.max_silence_s:
            reason = "silence"
        else:
            return None
        self._reported[key] = (value, now)
        return Event(now, key, value, last[0] if last else None, reason)

    def update_all(self, values: Mapping[str, float], now: float) -> list[Event]:
        return [
            event
            for key, value in sorted(values.items())
            if (event := self.update(key, value, now)) is not None
        ]


def write_events(events: Iterable[Event], stream: IO[str]) -> int:
    """One JSON object per line; returns how many were written."""
    count = 0
    for event in events:
        stream.write(json.dumps(event.as_dict(), sort_keys=True) + "\n")
        count += 1
    stream.flush()
    return count


def add_event_arguments(parser: argparse.ArgumentParser) -> None:
    """``--events``, ``--band`` and ``--max-silence``: the options of every daemon that emits
    events (``collector run``, ``appmon run``); ``event_options`` checks them."""
    parser.add_argument(
        "--events", metavar="FILE", help="append events as JSON lines ('-': standard output)"
    )
    parser.add_argument(
        "--band",
        type=float,
        default=0.1,
        help="event band: relative change that is reported (default 0.1 = 10 %%)",
    )
    parser.add_argument(
        "--max-silence",
        default="300s",
        metavar="DURATION",
        help="report a value at least this often (default 300s)",
    )


def event_options(args: argparse.Namespace) -> tuple[float, float]:
    """``(band, max_silence_s)`` from ``add_event_arguments``' options, or one error naming
    the option (before the daemon starts anything)."""
    if not 0 <= args.band < math.inf:
        raise CosampleError(f"--band: expected a fraction >= 0, got {args.band}")
    try:
        silence = parse_duration(str(args.max_silence), positive=True)
    except ValueError as exc:
        raise CosampleError(f"--max-silence: {exc}") from None
    return args.band, silence
