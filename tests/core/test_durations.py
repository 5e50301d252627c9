"""One duration parser for the planner's --valid-for and the agents' intervals and timeouts."""

from __future__ import annotations

import argparse

import pytest

from cosample.durations import duration_argument, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30s", 30),
        ("2m", 120),
        ("1h", 3600),
        ("2d", 172800),
        ("500ms", 0.5),
        ("7", 7),
        (" 1.5 h ", 5400),
        ("0", 0),
    ],
)
def test_units(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5s", "5 weeks", "1e3", "5y", "s"])
def test_refused(text):
    with pytest.raises(ValueError, match=f"expected a duration .*, got {text!r}"):
        parse_duration(text)


def test_positive_and_argparse_forms():
    with pytest.raises(ValueError, match="positive duration"):
        parse_duration("0s", positive=True)
    assert duration_argument("90s") == 90
    with pytest.raises(argparse.ArgumentTypeError, match="got 'x'"):
        duration_argument("x")
