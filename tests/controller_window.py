"""A collector's sliding window over a traffic process, for the controller's loop tests (pure).

The traffic is a function of time (a matrix per second); a snapshot at ``t`` reports the mean
over ``[t - window, t]``, as the collector does, so a step in traffic reaches the controller as
a ramp lasting one window. Optional multiplicative noise per snapshot stands for sampling error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta

import numpy as np

from cosample.collector.snapshot import parse_snapshot
from cosample.controller.source import Reading
from controller_helpers import snapshot_doc

Matrix = dict[str, dict[str, float]]


def windowed(traffic: Callable[[float], Matrix], t: float, window: float) -> Matrix:
    """Mean of ``traffic`` over the last ``window`` seconds before ``t`` (1-s steps)."""
    seconds = [t - k - 0.5 for k in range(int(window))]
    out: Matrix = {}
    for s in seconds:
        for src, row in traffic(s).items():
            for dst, pps in row.items():
                out.setdefault(src, {})
                out[src][dst] = out[src].get(dst, 0.0) + pps / len(seconds)
    return out


def reader_for(traffic: Callable[[float], Matrix], start: datetime, window: float,
               names: list[str], rng: np.random.Generator | None = None,
               sampling_noise: float = 0.0):
    """A controller ``reader`` serving windowed snapshots of ``traffic``."""

    def reader(collectors, now, max_age_s, timeout_s):
        t = (now - start).total_seconds()
        matrix = windowed(traffic, t, window)
        if rng is not None and sampling_noise:
            matrix = {src: {dst: v * max(0.0, 1 + rng.normal(0, sampling_noise))
                            for dst, v in row.items()} for src, row in matrix.items()}
        document = snapshot_doc(now, matrix, servers=names, window_s=window)
        return Reading(parse_snapshot(json.dumps(document)), (), 1, 1)

    return reader


def chunked_noise(base: Matrix, rng: np.random.Generator, noise: float, chunk: float,
                  horizon: float) -> Callable[[float], Matrix]:
    """``base`` with every entry redrawn within +/- ``noise`` every ``chunk`` seconds."""
    draws = [{src: {dst: v * (1 + rng.uniform(-noise, noise)) for dst, v in row.items()}
              for src, row in base.items()} for _ in range(int(horizon // chunk) + 2)]
    return lambda t: draws[max(0, int(t // chunk))]


def swapped(base: Matrix, a: str, b: str) -> Matrix:
    """``base`` with servers ``a`` and ``b`` exchanging their traffic (rows and columns)."""
    swap = {a: b, b: a}
    return {swap.get(src, src): {swap.get(dst, dst): v for dst, v in row.items()}
            for src, row in base.items()}


def at(start: datetime, seconds: float) -> datetime:
    return start + timedelta(seconds=seconds)
