"""Time as cosample's files write and read it: UTC, ISO 8601, ``Z`` (``2026-11-22T10:00:00Z``).

Plans, snapshots, reports and calibrations all carry times this way; this module is the one
place that says how, so a reader of one file reads them all.
"""

from __future__ import annotations

from datetime import datetime, timezone

#: ``strftime`` form of a time to the second, in UTC.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utcnow() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(timezone.utc)


def format_time(moment: datetime | float) -> str:
    """A moment (aware datetime, or Unix seconds) as UTC to the second with ``Z``."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    return moment.astimezone(timezone.utc).strftime(TIME_FORMAT)


def format_time_ms(moment: datetime) -> str:
    """UTC with ``Z`` and millisecond precision when there is a fraction (snapshots: samples
    arrive many times a second)."""
    moment = moment.astimezone(timezone.utc)
    text = moment.strftime(TIME_FORMAT[:-1])
    if moment.microsecond:
        text += f".{moment.microsecond // 1000:03d}"
    return text + "Z"


def parse_time(text: str) -> datetime:
    """``2026-11-22T10:00:00Z`` (fractions allowed) as an aware UTC datetime; ``ValueError``
    naming the expected form for anything else, a time without ``Z`` included."""
    try:
        if not isinstance(text, str) or not text.endswith("Z"):
            raise ValueError
        return datetime.fromisoformat(text).astimezone(timezone.utc)
    except ValueError:
        raise ValueError("expected a UTC time like 2026-11-22T10:00:00Z") from None
