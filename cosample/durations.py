"""Durations as people write them (``500ms``, ``90s``, ``30m``, ``6h``, ``2d``), parsed in one place.

Used by ``cosample plan --valid-for`` and the agents' ``--interval``, ``--jitter``, ``--timeout``
and ``--settle``. A plain number is seconds.
"""

from __future__ import annotations

import argparse
import re

#: Seconds per unit.
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
EXAMPLES = "e.g. 500ms, 90s, 30m, 6h, 2d"
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")


#: The longest duration anything takes (ten years): past it, a plan's expiry or a wait overflows
#: the clock's types (``datetime``, ``threading.Event.wait``) instead of meaning anything.
MAX_DURATION_S = 10 * 365 * 86400.0


def parse_duration(text: str, *, positive: bool = False) -> float:
    """Seconds written in ``text`` (>= 0, or > 0 with ``positive``, at most ten years);
    ValueError saying why not."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"expected a duration ({EXAMPLES}), got {text!r}")
    seconds = float(match.group(1)) * UNITS[match.group(2) or "s"]
    if not seconds <= MAX_DURATION_S:  # also a number too long to be finite
        raise ValueError(f"expected a duration of at most ten years (3650d), got {text!r}")
    if positive and seconds <= 0:
        raise ValueError(f"expected a positive duration ({EXAMPLES}), got {text!r}")
    return seconds


def duration_argument(text: str) -> float:
    """``parse_duration`` as an argparse ``type``: a bad value is a usage error."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
