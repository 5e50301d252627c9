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

Two more things separate a change from noise (both per server, on its total ``U``):

- **steps**: a server whose measured total moves by more than ``change`` of its previous value
  from one measurement to the next (and by more than 2 % of its capacity) has *changed*, not
  fluctuated: the collector's sliding window makes a step look like a ramp lasting one window,
  so the server counts as *rising* or *falling* for ``window_s`` after the last such move
  (``rising``, ``settling``). A fall step is followed at once (the row takes the measurement),
  so the estimate does not trail a real fall by ``tau``;
- **hold**: falls smaller than a step are only believed once they have lasted ``hold_s``: the
  rows are scaled to each server's highest measured total of the last ``hold_s`` seconds
  (``planning``; a fall step clears the history). A trough of noise shorter than the hold never
  reaches a plan, so a plan made at the top of the noise band is not "improved" at the bottom.
  (The history keeps the measured totals: the average would carry an artefact's peak on.)

Pure: the state is an immutable value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from cosample.controller.estimate import Measurement
from cosample.controller.pairkeys import matched

#: Entries that decay below this many packets/s are dropped, so the matrix stays sparse.
FLOOR_PPS = 1e-3
#: A step must also move a server's total by this share of its capacity (tiny servers' noise).
STEP_OF_CAPACITY = 0.02
NEVER = -math.inf


@dataclass(frozen=True)
class Smoothed:
    """The smoothed traffic matrix (sparse, sorted by ``src * n + dst``) and its bookkeeping."""

    time: datetime
    n: int
    keys: np.ndarray
    pps: np.ndarray
    seen: np.ndarray  # bool per server: measured at least once
    count: int = 1  # measurements averaged so far
    own: np.ndarray | None = None  # per server: the last measured total (steps)
    rose_at: np.ndarray | None = None  # per server: Unix time of the last rise step (-inf)
    fell_at: np.ndarray | None = None  # per server: Unix time of the last fall step (-inf)
    window_s: float = 0.0  # the collector window of the last measurement
    history: tuple[tuple[float, np.ndarray], ...] = ()  # (time, measured totals) within hold

    def totals(self) -> np.ndarray:
        """Each server's smoothed total (its row sum)."""
        return np.bincount(self.src, weights=self.pps, minlength=self.n)

    def loads(self) -> tuple[np.ndarray, np.ndarray]:
        """(own, forwarding) per server: what its VMs send; that plus what others send to it."""
        inbound = self.src != self.dst
        received = np.bincount(self.dst[inbound], weights=self.pps[inbound], minlength=self.n)
        own = self.totals()
        return own, own + received

    def held(self) -> np.ndarray:
        """Each server's highest measured total in the hold, and at least its smoothed one."""
        if not self.history:
            return self.totals()
        return np.max(np.stack([self.totals()] + [totals for _, totals in self.history]), axis=0)

    def planning(self) -> "Smoothed":
        """The traffic to plan for: every row scaled up to its server's held total."""
        if not self.history:
            return self
        totals = self.totals()
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(totals > 0, self.held() / totals, 1.0)
        return replace(self, pps=self.pps * scale[self.src])

    def _since(self, moments: np.ndarray | None, now: float) -> np.ndarray:
        if moments is None:
            return np.zeros(self.n, dtype=bool)
        return now - moments < self.window_s

    def rising(self, now: float | None = None) -> np.ndarray:
        """Servers whose last rise step is less than one collector window old."""
        return self._since(self.rose_at, self.time.timestamp() if now is None else now)

    def settling(self, now: float | None = None) -> np.ndarray:
        """Servers that rose or fell by a step less than one collector window ago."""
        moment = self.time.timestamp() if now is None else now
        return self._since(self.rose_at, moment) | self._since(self.fell_at, moment)

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


def steps(
    old: np.ndarray,
    new: np.ndarray,
    measured: np.ndarray,
    change: float,
    capacity: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(rose, fell) per server: measured totals that moved by more than ``change`` of the old
    value (a server that was silent rises by any amount) and by more than ``STEP_OF_CAPACITY``
    of its capacity."""
    delta = new - old
    big = np.abs(delta) > change * old
    if capacity is not None:
        big &= np.abs(delta) > STEP_OF_CAPACITY * capacity
    big &= measured
    return big & (delta > 0), big & (delta < 0)


def update(
    previous: Smoothed | None,
    measurement: Measurement,
    tau_s: float,
    rise_tau_s: float | None = None,
    *,
    hold_s: float = 0.0,
    change: float | None = None,
    capacity: np.ndarray | None = None,
    detect: bool | np.ndarray = True,
    remember: bool = True,
) -> Smoothed:
    """The average after ``measurement`` (the measurement itself when there is no history).

    ``rise_tau_s``: the time constant for entries that rise (``None``: ``tau_s``, a symmetric
    average; 0: rises are taken at once and only falls are smoothed). ``hold_s``: falls smaller
    than a step count after this long (``planning``). ``change``: the relative move of a
    server's total between two measurements that is a step (``None``: no steps); ``detect``:
    look for steps in this measurement, for every server or those marked (off while the
    estimate warms up: the first windows are short and noisy); ``remember``: add this
    measurement to the hold's history (off for a window shorter than the collector's full one,
    and while its window mixes two plans: those peaks are artefacts, not traffic).
    """
    n = measurement.measured.size
    new_keys = measurement.traffic_src.astype(np.int64) * n + measurement.traffic_dst
    now = measurement.time.timestamp()
    if previous is None or previous.n != n:
        first = Smoothed(
            measurement.time,
            n,
            new_keys,
            measurement.traffic_pps.copy(),
            measurement.measured.copy(),
            1,
            own=measurement.own_pps.copy(),
            rose_at=np.full(n, NEVER),
            fell_at=np.full(n, NEVER),
            window_s=measurement.window_s,
        )
        return replace(
            first, history=((now, measurement.own_pps.copy()),) if hold_s > 0 and remember else ()
        )
    dt = (measurement.time - previous.time).total_seconds()
    if dt <= 0:  # the same (or an older) snapshot again: nothing new to learn
        return previous
    own_before = previous.own if previous.own is not None else np.zeros(n)
    rose = fell = np.zeros(n, dtype=bool)
    if change is not None and np.any(detect):
        rose, fell = steps(
            own_before, measurement.own_pps, measurement.measured & detect, change, capacity
        )
    w = max(weight(dt, tau_s), 1.0 / (previous.count + 1))
    w_rise = w if rise_tau_s is None else max(weight(dt, rise_tau_s), 1.0 / (previous.count + 1))
    keys, old, new = matched(previous.keys, previous.pps, new_keys, measurement.traffic_pps)
    src = keys // n
    held = ~measurement.measured[src]
    step = np.where(new > old, w_rise, w)
    step = np.where(fell[src], 1.0, step)  # a fall step is taken at once
    pps = np.where(held, old, old + step * (new - old))
    keep = pps > FLOOR_PPS
    own = np.where(measurement.measured, measurement.own_pps, own_before)
    rose_at = np.where(
        rose, now, previous.rose_at if previous.rose_at is not None else np.full(n, NEVER)
    )
    fell_at = np.where(
        fell, now, previous.fell_at if previous.fell_at is not None else np.full(n, NEVER)
    )
    out = Smoothed(
        measurement.time,
        n,
        keys[keep],
        pps[keep],
        previous.seen | measurement.measured,
        previous.count + 1,
        own=own,
        rose_at=rose_at,
        fell_at=fell_at,
        window_s=measurement.window_s,
    )
    if hold_s <= 0:
        return out
    # the history holds what was measured (not the average, which carries an artefact's
    # peak on for tau after it); a fall step clears the server's history
    measured_totals = np.where(measurement.measured, measurement.own_pps, out.totals())
    history = tuple(
        (t, np.where(fell, measured_totals, values))
        for t, values in previous.history
        if now - t < hold_s
    )
    if remember:
        history += ((now, measured_totals),)
    return replace(out, history=history)
