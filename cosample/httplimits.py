"""The numbers of the daemons' one HTTP policy (``cosample.httpserver``): a light module, so that
command lines read the defaults without importing ``http.server`` (50 ms)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one connection may take; docs/architecture.md, "One HTTP policy".

    A connection is in one phase at a time, each with its own deadline counted from the moment
    it entered it (a client trickling bytes does not restart the clock):

    - *idle*: accepted, or its last answer written, and no byte of a request yet: ``idle_s``;
    - *head*: from a request's first byte to the end of its headers (at most ``head_bytes``;
      request bodies are refused): ``head_s``;
    - *answer*: from the end of the headers to the answer's last byte: ``answer_s``.

    Each read or write also gives up after ``idle_s`` of silence.
    """

    max_connections: int = 64
    idle_s: float = 10.0
    head_s: float = 10.0
    answer_s: float = 60.0
    head_bytes: int = 16 * 1024

    def deadline(self, phase: str) -> float:
        return {"idle": self.idle_s, "head": self.head_s, "answer": self.answer_s}[phase]
