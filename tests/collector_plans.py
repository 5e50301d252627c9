"""Plans for the collector's tests, built relative to the current time (never a fixed date)."""

from __future__ import annotations

import math

from cosample.lab.plans import plan_document

__all__ = ["FOUR", "assert_unbiased", "plan_document"]

#: s1 samples 1-in-64 and mirrors 30 % to s2 (1-in-1) and 20 % to s3 (1-in-2); s4 only samples.
FOUR = {"s1": (64, {"s2": 0.3, "s3": 0.2}), "s2": (1, {}), "s3": (2, {}), "s4": (16, {})}


def assert_unbiased(traces, server: str, truth: float) -> None:
    """``traces``: per seed, {seconds: snapshot}. The mean over seeds of ``server``'s
    standardised error stays within noise at every time (10 seeds: sd about 0.32 if unbiased),
    and its 95 % intervals cover ``truth`` in at least 85 % of the snapshots."""
    traces = list(traces)
    z: dict = {}
    covered = total = 0
    for trace in traces:
        for t, snapshot in trace.items():
            e = snapshot.servers[server]
            error = (e.packets_per_s - truth) / math.sqrt(e.packets_per_s_variance)
            z[t] = z.get(t, 0.0) + error / len(traces)
            low, high = e.packets_per_s_ci95
            covered += low <= truth <= high
            total += 1
    assert max(abs(value) for value in z.values()) < 1.1, z
    assert covered / total >= 0.85
