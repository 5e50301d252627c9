"""A daemon's problems in its log once each: a line at WARNING when one appears, a line at INFO
when it is gone, nothing while it lasts (the status and the metrics say it every cycle).

A problem is a line of text (``http://c1:9478: cannot fetch (...)``, ``plan version 7:
signature does not verify``); two lines that differ only in measured amounts (a number with a
unit: an age ``95 s``, a rate ``3.1e+09 pps``, a share ``40 %``) are the same problem, so a
collector staying stale for an hour is one warning, not one per cycle, while a collector going
from stale to refusing its signature, another collector, another server or another plan version
is a new one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

_AMOUNT = re.compile(
    r"(?<![\w.:/-])[-+]?\d+(?:\.\d+)?(?:e[+-]?\d+)?\s?(?:ms|s|pps|%|bytes|B|MiB|MB)\b"
)


def problem_key(text: str) -> str:
    """What makes two problems the same one: their text less its measured amounts."""
    return _AMOUNT.sub("#", text)


class StateLog:
    """The problems last seen; ``update`` logs what changed."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.active: dict[str, str] = {}  # problem_key -> the text first seen

    def update(self, problems: Iterable[str]) -> None:
        current: dict[str, str] = {}
        for text in problems:
            current.setdefault(problem_key(text), text)
        for key, text in current.items():
            if key not in self.active:
                self.logger.warning("%s", text)
            else:
                current[key] = self.active[key]
        for key, text in self.active.items():
            if key not in current:
                self.logger.info("resolved: %s", text)
        self.active = current
