"""Which measured estimates are evidence: bounded by what a server can forward, jumps confirmed.

A snapshot is what the collector made of the datagrams it received; a sender that forges a few
sFlow datagrams for a server (or a bug anywhere on the way) can claim any rate for it. Two
checks stand between a measurement and a plan (pure; the loop applies them before smoothing):

- **capacity**: a server cannot forward more than its capacity ``T0`` (the inventory's
  ``capacity_pps``), so what its VMs send cannot be measured above it. An estimate above
  ``capacity x (1 + slack)`` (``slack`` for the sampling noise of a server at its limit) is
  refused as evidence: the server counts as unmeasured this cycle, its last accepted traffic is
  held, and the refusal is named in the status, the log and the metrics. A server with
  capacity 0 (unknown) is not bounded.
- **jumps**: a server whose estimate rises to more than ``factor`` times its *baseline*, and by
  more than ``of_capacity`` of its capacity, has *jumped*. A jump is only believed once a
  measurement whose collector window no longer overlaps the first one's (``window_s`` later)
  still shows it: forged or spurious samples leave the sliding window after ``window_s``, real
  traffic stays. Until then the server is held, as above. A real rise is planned for one
  window later, the price of not planning from two datagrams. A server never accepted before
  (no baseline) is not a jump.
- **the baseline is cumulative**: it is the lowest estimate accepted over the last one to two
  windows (two periods of ``window_s``: the current one and the one before), not the last one
  accepted. Before, each step was judged against the step before it, so rises of 3.5x each,
  none a jump, walked a server from 4,071 pps to the plan's overload regime in 8.1 s (issue
  41). Now the estimate accepted within any window is at most ``max(factor x baseline,
  baseline + of_capacity x capacity)``; more waits a disjoint window, and a confirmed jump
  becomes the baseline at the level first seen (a climb that went on while it was held is a
  new jump). A real rise faster than ``factor`` per window is planned one window late per
  ``factor``.

Both act on a server's *own* traffic (what its VMs send); a refused server's row of the traffic
matrix leaves the measurement with it. The state (``Screen``) lives in the controller's memory:
a restarted controller has no baseline, as at its first start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cosample.controller.estimate import Measurement

#: Defaults: 25 % above capacity is beyond the sampling noise of a server at its limit with a
#: few dozen samples in the window; a jump is 4x and a quarter of the server's capacity.
SLACK, JUMP_FACTOR, JUMP_OF_CAPACITY = 0.25, 4.0, 0.25


@dataclass(frozen=True)
class Screen:
    """What the checks remember: each server's last accepted total, its baseline's two periods
    and its pending jump."""

    accepted_pps: np.ndarray  # per server: last accepted own traffic (nan: none yet)
    jumped_at: np.ndarray  # per server: Unix time of the first measurement of a jump (nan)
    jumped_pps: np.ndarray  # per server: what that first measurement showed (0: no jump)
    low_pps: np.ndarray  # per server: lowest accepted in the current period (nan: none)
    prior_low_pps: np.ndarray  # per server: lowest accepted in the period before (nan: none)
    low_since: np.ndarray  # per server: Unix time the current period began (nan: never)

    @classmethod
    def empty(cls, n: int) -> "Screen":
        accepted, jumped_at, low, prior_low, since = _nans(n, 5)
        return cls(accepted, jumped_at, np.zeros(n), low, prior_low, since)

    def baseline(self) -> np.ndarray:
        """What a rise is judged against: the lowest accepted over the two periods, else the
        last accepted (held or unmeasured for longer), nan if never accepted."""
        low = np.fmin(self.low_pps, self.prior_low_pps)
        return np.where(np.isnan(low), self.accepted_pps, low)


@dataclass(frozen=True)
class Refusal:
    server: str
    reason: str  # "above_capacity" | "unconfirmed_jump"
    pps: float
    bound_pps: float

    def describe(self) -> str:
        if self.reason == "above_capacity":
            return (
                f"{self.server}: measured {self.pps:.4g} pps, above what it can forward "
                f"({self.bound_pps:.4g} pps: capacity and slack); refused as evidence, "
                "its last accepted traffic is held"
            )
        return (
            f"{self.server}: jumped to {self.pps:.4g} pps from {self.bound_pps:.4g} pps; "
            "held until a window that does not overlap this one confirms it"
        )


@dataclass(frozen=True)
class Vetted:
    measurement: Measurement  # refused servers unmeasured, their rows removed
    screen: Screen
    refusals: tuple[Refusal, ...]


def vet(
    measurement: Measurement,
    screen: Screen | None,
    names: tuple[str, ...],
    capacity_pps: np.ndarray,
    slack: float = SLACK,
    factor: float | None = JUMP_FACTOR,
    of_capacity: float = JUMP_OF_CAPACITY,
) -> Vetted:
    """The measurement with implausible and unconfirmed estimates taken out, and the new state.

    ``factor`` None: jumps are not held (capacity still bounds)."""
    n = measurement.measured.size
    if screen is None or screen.accepted_pps.size != n:
        screen = Screen.empty(n)
    own, measured = measurement.own_pps, measurement.measured
    now, period = measurement.time.timestamp(), measurement.window_s
    bounded = capacity_pps > 0
    bound = capacity_pps * (1.0 + slack)
    implausible = measured & bounded & (own > bound)
    judged = measured & ~implausible
    accepted_before = screen.accepted_pps
    roll = ~(now - screen.low_since < period)  # a new period (nan: the first one)
    screen = replace(
        screen,
        prior_low_pps=np.where(roll, screen.low_pps, screen.prior_low_pps),
        low_pps=np.where(roll, np.nan, screen.low_pps),
        low_since=np.where(roll, now, screen.low_since),
    )
    base = screen.baseline()
    known = ~np.isnan(base)
    floor = of_capacity * np.where(bounded, capacity_pps, 0.0)

    def rises(level: np.ndarray) -> np.ndarray:
        if factor is None:
            return np.zeros(n, dtype=bool)
        level = np.where(known, level, 0.0)
        return judged & known & (own > factor * level) & (own - level > floor)

    jump = rises(base)
    pending = ~np.isnan(screen.jumped_at)
    confirmed = jump & pending & (now - np.nan_to_num(screen.jumped_at, nan=now) >= period)
    base = np.where(confirmed, np.minimum(screen.jumped_pps, own), base)  # the level confirmed
    again = confirmed & rises(base)  # climbed on while it was held: a new jump
    held = (jump & ~confirmed) | again
    kept = held & pending & ~again
    jumped_at = np.where(kept, screen.jumped_at, np.where(held, now, np.nan))
    jumped_pps = np.where(kept, screen.jumped_pps, np.where(held, own, 0.0))
    accept = judged & ~held
    low = np.where(confirmed, base, screen.low_pps)
    new_screen = Screen(
        np.where(accept, own, accepted_before),
        jumped_at,
        jumped_pps,
        np.where(accept, np.fmin(low, own), low),
        np.where(confirmed, np.nan, screen.prior_low_pps),
        np.where(confirmed, now, screen.low_since),
    )
    refuse = implausible | held
    refusals = tuple(
        Refusal(names[i], "above_capacity", float(own[i]), float(bound[i]))
        for i in np.flatnonzero(implausible)
    ) + tuple(
        Refusal(names[i], "unconfirmed_jump", float(own[i]), float(base[i]))
        for i in np.flatnonzero(held)
    )
    if not refuse.any():
        return Vetted(measurement, new_screen, refusals)
    keep = ~refuse[measurement.traffic_src]
    return Vetted(
        replace(
            measurement,
            measured=measured & ~refuse,
            own_pps=np.where(refuse, 0.0, own),
            from_counters=measurement.from_counters & ~refuse,
            traffic_src=measurement.traffic_src[keep],
            traffic_dst=measurement.traffic_dst[keep],
            traffic_pps=measurement.traffic_pps[keep],
            disagreements=tuple(
                d for d in measurement.disagreements if not refuse[names.index(d.server)]
            ),
        ),
        new_screen,
        refusals,
    )


def _nans(n: int, count: int) -> tuple[np.ndarray, ...]:
    return tuple(np.full(n, np.nan) for _ in range(count))
