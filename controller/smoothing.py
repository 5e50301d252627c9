"""An exponentially weighted moving average of the traffic matrix, with a stated time constant.

Each new measurement moves the smoothed matrix by ``w = 1 - exp(-dt / tau)`` of the difference,
``dt`` being the time since the previous measurement, so the filter's memory is ``tau`` seconds
whatever the cycle length (and a late cycle weighs more, as it should). With ``dt = tau / 3``
(30 s cycles, tau 90 s) ``w = 0.28``; i.i.d. noise of standard deviation sigma leaves
``sigma * sqrt(w / (2 - w)) = 0.41 sigma``, and a step change is 95 % through after ``3 tau``.
Rises can be given a shorter time constant (``rise_tau``; 0 follows them at once): a server's
load is then planned for its recent peak, so a plan made while traffic climbs is not overloaded
one cycle later, at the price of planning for the top of the noise band. Until ``tau`` is filled
the weight is ``max(w, 1/k)`` for the k-th measurement, i.e. a plain
running mean, so the first estimate is not one raw snapshot that the EWMA would then take
``tau`` to forget. Rows of servers missing from a measurement are held, not decayed: silence is
not idleness.
Pure: the state is an immutable value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from cosample.controller.estimate import Measurement

#: Entries that decay below this many packets/s are dropped, so the matrix stays sparse.
FLOOR_PPS = 1e-3


@dataclass(frozen=True)
class Smoothed:
    """The smoothed traffic matrix (sparse, sorted by ``src * n + dst``) and its bookkeeping."""

    time: datetime
    n: int
    keys: np.ndarray
    pps: np.ndarray
    seen: np.ndarray  # bool per server: measured at least once
    count: int = 1    # measurements averaged so far

    @property
    def src(self) -> np.ndarray:
        return self.keys // self.n

    @property
    def dst(self) -> np.ndarray:
        return self.keys % self.n


def weight(dt_s: float, tau_s: float) -> float:
    """How far one measurement ``dt_s`` after the previous one moves the average."""
    if tau_s <= 0:
        return 1.0
    return 1.0 - math.exp(-max(dt_s, 0.0) / tau_s)


def update(previous: Smoothed | None, measurement: Measurement, tau_s: float,
           rise_tau_s: float | None = None) -> Smoothed:
    """The average after ``measurement`` (the measurement itself when there is no history).

    ``rise_tau_s``: the time constant for entries that rise (``None``: ``tau_s``, a symmetric
    average; 0: rises are taken at once and only falls are smoothed).
    """
    n = measurement.measured.size
    new_keys = measurement.traffic_src.astype(np.int64) * n + measurement.traffic_dst
    if previous is None or previous.n != n:
        return Smoothed(measurement.time, n, new_keys, measurement.traffic_pps.copy(),
                        measurement.measured.copy(), 1)
    dt = (measurement.time - previous.time).total_seconds()
    if dt <= 0:  # the same (or an older) snapshot again: nothing new to learn
        return previous
    w = max(weight(dt, tau_s), 1.0 / (previous.count + 1))
    w_rise = w if rise_tau_s is None else max(weight(dt, rise_tau_s), 1.0 / (previous.count + 1))
    keys = np.union1d(previous.keys, new_keys)
    old = _aligned(keys, previous.keys, previous.pps)
    new = _aligned(keys, new_keys, measurement.traffic_pps)
    held = ~measurement.measured[keys // n]
    pps = np.where(held, old, old + np.where(new > old, w_rise, w) * (new - old))
    keep = pps > FLOOR_PPS
    return Smoothed(measurement.time, n, keys[keep], pps[keep],
                    previous.seen | measurement.measured, previous.count + 1)


def _aligned(keys: np.ndarray, subset: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (indexed by sorted ``subset``) spread onto sorted ``keys``; 0 elsewhere."""
    out = np.zeros(keys.size)
    if subset.size:
        out[np.searchsorted(keys, subset)] = values
    return out
