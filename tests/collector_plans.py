"""Plans for the collector's tests, built relative to the current time (never a fixed date)."""

from __future__ import annotations

from cosample.lab.plans import plan_document

__all__ = ["FOUR", "plan_document"]

#: s1 samples 1-in-64 and mirrors 30 % to s2 (1-in-1) and 20 % to s3 (1-in-2); s4 only samples.
FOUR = {"s1": (64, {"s2": 0.3, "s3": 0.2}), "s2": (1, {}), "s3": (2, {}), "s4": (16, {})}


