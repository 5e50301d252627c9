"""The one time format: written and read back the same everywhere."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosample.times import format_time, format_time_ms, parse_time, utcnow

MOMENTS = st.datetimes(
    min_value=datetime(1971, 1, 1),
    max_value=datetime(2999, 12, 31),
    timezones=st.just(timezone.utc),
)


@given(MOMENTS)
def test_seconds_round_trip(moment):
    assert parse_time(format_time(moment)) == moment.replace(microsecond=0)


@given(MOMENTS)
def test_milliseconds_round_trip(moment):
    assert parse_time(format_time_ms(moment)) == moment.replace(
        microsecond=moment.microsecond // 1000 * 1000
    )


def test_other_zones_and_unix_seconds_are_written_in_utc():
    plus_two = datetime(1999, 1, 2, 5, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(plus_two) == "1999-01-02T03:00:00Z"
    assert format_time(0.0) == "1970-01-01T00:00:00Z"
    assert format_time_ms(plus_two.replace(microsecond=123456)) == "1999-01-02T03:00:00.123Z"


@pytest.mark.parametrize(
    "text", ["2030-01-02T03:00:00", "2030-01-02T03:00:00+00:00", "soon", "", "2030-13-02T03:00:00Z"]
)
def test_anything_but_utc_with_z_is_refused_naming_the_form(text):
    with pytest.raises(ValueError, match="expected a UTC time like"):
        parse_time(text)


def test_now_is_aware_utc():
    now = utcnow()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
