"""Ladders of local rates a sender may take: sFlow's 1-in-N and the sample action's K/65535.

A *level* plays the part of N on either ladder (a higher level, a lower rate): sFlow's level N
is rate 1/N; the sample action's level L is K = 65536 - L, rate K/65535 (OVS's ``sample``
probability, ``cosample/dataplane/ipfix.py``). ``Senders`` holds the senders' terms on one
ladder each, vectorised; the smallest affordable level and the one reaching the mirror limit
(N_min, N_c) are rounded so a rate never costs more than the capacity left. ``quantised`` and
``quantised_milp`` work on levels and so on either ladder, choosing among each sender's
candidate ``Points``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE as SCALE
from cosample.planner.problem import Problem
from cosample.planner.realise import MAX_INTERVAL

#: Relative slack on ceil() so that A/S = 2 (computed 2.0000000000000004) gives N = 2.
CEIL_SLACK = 1e-12


@dataclass(frozen=True)
class Senders:
    """Senders' terms (positions ``index`` into the problem) on one ladder each, vectorised;
    levels as floats, inf = off. ``grid``: True where the ladder is the ``sample`` action's
    (level L is rate (65536 - L)/65535), False for sFlow's (level N is rate 1/N)."""

    index: np.ndarray
    own: np.ndarray  # U
    full: np.ndarray  # A = alpha x bridge input: the cost of sampling 1-in-1
    spare: np.ndarray  # S
    beta: np.ndarray
    weight: np.ndarray
    limit: np.ndarray  # c = min(U, mirror cap)
    n_min: np.ndarray  # smallest affordable N (inf: cannot sample locally)
    n_cap: np.ndarray  # smallest N whose vertex reaches c (inf: none)
    grid: np.ndarray  # bool: the sample action's ladder

    def rate(self, level: np.ndarray) -> np.ndarray:
        """The rate of ``level`` on each sender's ladder (0 for off, inf)."""
        return rate_of(level, self.grid)

    def level(self, left: np.ndarray) -> np.ndarray:
        """Smallest level affordable with ``left`` capacity for local sampling (unclipped)."""
        return level_of(self.full, left, self.grid)

    @property
    def top_level(self) -> np.ndarray | int:
        """The ladder's lowest rate: sFlow's 32-bit N, or K = 1."""
        return np.where(self.grid, SCALE, MAX_INTERVAL) if self.grid.any() else MAX_INTERVAL

    def most_mirrored(self, rate: np.ndarray) -> np.ndarray:
        """y(t): what a sender sampling at ``rate`` (1/N or 0) can mirror within its capacity."""
        return np.minimum(self.limit, np.maximum(self.spare - self.full * rate, 0.0) / self.beta)

    def value(self, rate: np.ndarray, mirrored: np.ndarray) -> np.ndarray:
        """Weighted distinct own packets: ``w (U t + y (1 - t))``."""
        return self.weight * (self.own * rate + mirrored * (1.0 - rate))

    def take(self, positions: np.ndarray) -> "Senders":
        """The senders at ``positions`` only."""
        return Senders(*(getattr(self, name)[positions] for name in self.__dataclass_fields__))

    def interval_for(self, mirrored: np.ndarray) -> np.ndarray:
        """Smallest affordable N (level) next to ``mirrored`` pps (inf: off, cannot go that low)."""
        left = self.spare - self.beta * mirrored
        with np.errstate(divide="ignore", invalid="ignore"):
            n = self.level(left)
        n = np.where(left > 0, np.maximum(n, self.n_min), np.inf)
        return np.where(n > self.top_level, np.inf, n)

    def best_at(self, mirrored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rate, value) of the best plan mirroring exactly ``mirrored`` (value -inf if it cannot)."""
        rate = self.rate(self.interval_for(mirrored))
        feasible = mirrored <= self.most_mirrored(np.zeros_like(rate)) * (1 + 1e-12)
        return rate, np.where(feasible, self.value(rate, mirrored), -np.inf)


def rate_of(interval: np.ndarray, grid: np.ndarray | None = None) -> np.ndarray:
    """1/N, 0 for off (inf); (65536 - L)/65535 on the sample ladder (``grid``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(np.isfinite(interval), 1.0 / interval, 0.0)
        if grid is None or not grid.any():
            return rate
        return np.where(
            grid, np.where(np.isfinite(interval), (SCALE + 1 - interval) / SCALE, 0.0), rate
        )


def level_of(full: np.ndarray, left: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Smallest level whose rate costs at most ``left`` (``full``: the cost at rate 1), before
    clipping: sFlow's ``ceil(full/left)``, the sample ladder's ``65536 - floor(65535 left/full)``
    (the same relative slack: a ratio computed a few ulps off its integer lands on it)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.ceil(full / left * (1 - CEIL_SLACK))
        if not grid.any():
            return n
        k = np.floor(SCALE * (left / full) * (1 + CEIL_SLACK))
    return np.where(grid, SCALE + 1 - k, n)


def senders_of(problem: Problem) -> Senders:
    """The senders (own traffic, outside P) with N_min and N_c, vectorised."""
    index = np.flatnonzero(~problem.receiver & (problem.own_pps > 0))
    own = problem.own_pps[index]
    full = (problem.alpha * problem.bridge_pps)[index]
    spare = problem.spare_pps[index]
    beta = problem.beta[index]
    limit = np.minimum(own, problem.mirror_cap_pps[index])
    n_min, n_cap = _levels(full, spare, beta, limit, np.zeros(index.size, dtype=bool))
    return Senders(
        index,
        own,
        full,
        spare,
        beta,
        problem.weight[index],
        limit,
        n_min,
        n_cap,
        np.zeros(index.size, dtype=bool),
    )


def _levels(
    full: np.ndarray, spare: np.ndarray, beta: np.ndarray, limit: np.ndarray, grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """N_min (the smallest affordable level) and N_c (the smallest reaching the limit)."""
    top = np.where(grid, SCALE, MAX_INTERVAL) if grid.any() else MAX_INTERVAL
    with np.errstate(divide="ignore", invalid="ignore"):
        n_min = np.where(spare > 0, level_of(full, spare, grid), np.inf)
        n_min = np.where(n_min > top, np.inf, np.maximum(n_min, 1.0))
        room_left = spare - beta * limit
        n_cap = np.where(room_left > 0, level_of(full, room_left, grid), np.inf)
    n_cap = np.where(n_cap > top, np.inf, np.maximum(n_cap, n_min))
    return n_min, n_cap


def sample_ladder(problem: Problem, flow: Senders) -> Senders:
    """The senders on the sample action's ladder where they may use it
    (``Problem.can_sample``), the others as on sFlow's (computed only where it differs)."""
    can_sample = problem.can_sample
    assert can_sample is not None  # (asked only where some host may sample)
    able = np.flatnonzero(can_sample[flow.index])
    full, n_min, n_cap = flow.full.copy(), flow.n_min.copy(), flow.n_cap.copy()
    grid = np.zeros(flow.index.size, dtype=bool)
    grid[able] = True
    full[able] = (problem.alpha_sample * problem.bridge_pps)[flow.index[able]]
    n_min[able], n_cap[able] = _levels(
        full[able], flow.spare[able], flow.beta[able], flow.limit[able], grid[able]
    )
    return Senders(
        flow.index,
        flow.own,
        full,
        flow.spare,
        flow.beta,
        flow.weight,
        flow.limit,
        n_min,
        n_cap,
        grid,
    )


def ladders_of(problem: Problem) -> tuple[Senders, ...]:
    """The senders on sFlow's ladder, and on the sample action's where any may use it."""
    flow = senders_of(problem)
    return (flow,) if problem.can_sample is None else (flow, sample_ladder(problem, flow))


def on_ladders(ladders: tuple[Senders, ...], sample: np.ndarray) -> Senders:
    """Each sender on the ladder it chose (``sample``: the sample action's)."""
    if len(ladders) == 1 or not sample.any():
        return ladders[0]
    flow, other = ladders
    return Senders(
        *(
            np.where(sample, getattr(other, name), getattr(flow, name))
            if name in ("full", "n_min", "n_cap", "grid")
            else getattr(flow, name)
            for name in flow.__dataclass_fields__
        )
    )


@dataclass(frozen=True)
class Points:
    """Per sender candidate points, each a list of columns: on one ladder four, sorted by
    mirrored pps, (0, N_min), N_min saturated, N_c - 1 saturated, and N_c at the limit or off;
    on two both ladders' eight (``quantised.merged``: the better point 0 first, not sorted).
    ``grid``: whether a point is on the sample action's ladder."""

    rate: list[np.ndarray]
    mirrored: list[np.ndarray]
    value: list[np.ndarray]
    grid: list[np.ndarray]

    def at(self, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rate, mirrored, value) of point ``which`` (0..3, or 0..7 merged) per sender."""
        rate, mirrored, value = (
            np.choose(which, columns) for columns in (self.rate, self.mirrored, self.value)
        )
        return rate, mirrored, value

    def sample_at(self, which: np.ndarray) -> np.ndarray:
        """Whether point ``which`` of each sender samples by the sample action."""
        return np.choose(which, self.grid)
