"""What every solver returns: how much each server samples locally and who mirrors to whom."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from cosample.planner import realise
from cosample.planner.applied import Realised
from cosample.planner.problem import Problem, distinct_pps

#: Relative tolerance under which a plan's objective equals its bound (round-off of sums).
EXACT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Bounds:
    """Upper bounds on the weighted distinct objective, and how the plan was found.

    ``lp`` is the paper's LP optimum (it counts local and mirrored samples of a packet twice);
    ``envelope`` the tighter distinct bound (each sender's convex value replaced by its chord),
    both capped by the collector budget's bound: bounds on the continuous optimum (any real local
    rate). ``applied`` (the exact solver's) bounds the plans sFlow can apply (1-in-N), below
    ``envelope``. ``optimal`` says the plan is proved optimal by its method; otherwise it is
    optimal when it meets ``applied`` (or ``envelope`` when there is none).
    """

    lp: float
    envelope: float
    method: str
    optimal: bool
    applied: float | None = None  # bound on every plan the switches can apply (1-in-N), if known


@dataclass(frozen=True)
class Solution:
    """A continuous plan, before rounding to sFlow's 1-in-N.

    ``local_pps[i]`` is the part of server i's own traffic it samples itself; mirror entry j says
    server ``mirror_src[j]`` sends ``mirror_pps[j]`` of its own traffic to ``mirror_dst[j]``.

    It also carries what the plan file states about it, each computed once on first use and
    then read by every writer (the plan, its report, the controller's shares): ``applied``
    (the plan as the switches apply it), and in ``stated`` what ``planner.stated`` solves for
    it (the continuous optimum it is measured against, what no collaboration collects).
    Serialisers read them; they never solve or round again.
    """

    solver: str
    local_pps: np.ndarray
    mirror_src: np.ndarray
    mirror_dst: np.ndarray
    mirror_pps: np.ndarray
    problem: Problem
    bounds: Bounds
    seconds: float
    variables: int = 0
    lp_backend: str | None = None
    #: The continuous optimum when the solver already solved it (``exact``'s fallback).
    known_continuous: Solution | None = field(default=None, repr=False, compare=False)
    #: Per server, True where the local share is taken by the sample action (K/65535, cost
    #: ``Problem.alpha_sample``) instead of sFlow; None: sFlow everywhere.
    sample_hosts: np.ndarray | None = None
    #: Per server, the local rate as the switches apply it (1/N, K/65535 or 0) when the solver
    #: chose the rates itself: a server taking copies samples them at that rate
    #: (docs/model.md). None: a continuous plan, whose receivers sample 1-in-1.
    rates: np.ndarray | None = None
    #: What ``planner.stated`` solved for this plan, kept so it is solved once (not compared,
    #: not copied by ``dataclasses.replace``).
    stated: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def applied(self) -> Realised:
        """The plan as applied: 1-in-N and the topped-up mirrors (``realise``), once."""
        return realise.realise(self)

    @property
    def offload_pps(self) -> np.ndarray:
        """Per server, the total of its own traffic it mirrors to others."""
        return np.bincount(self.mirror_src, weights=self.mirror_pps, minlength=self.local_pps.size)

    @property
    def sampled_offload_pps(self) -> np.ndarray:
        """Per server, the copies of its own traffic its receivers sample (at their rates)."""
        pps = self.mirror_pps
        if self.rates is not None:
            pps = pps * self.rates[self.mirror_dst]
        return np.bincount(self.mirror_src, weights=pps, minlength=self.local_pps.size)

    @property
    def received_pps(self) -> np.ndarray:
        """Per server, the mirrored traffic it receives and samples."""
        return np.bincount(self.mirror_dst, weights=self.mirror_pps, minlength=self.local_pps.size)

    @property
    def mirror_pairs(self) -> int:
        return int(np.count_nonzero(self.mirror_pps > 0))

    @cached_property
    def distinct_by_server(self) -> np.ndarray:
        """Distinct own packets each server's traffic gets collected: ``U (l + m - l m)``, m the
        share its receivers sample."""
        return distinct_pps(self.problem.own_pps, self.local_pps, self.sampled_offload_pps)

    @property
    def collected_pps(self) -> float:
        """Distinct packets the continuous plan collects (own traffic, wherever sampled)."""
        return float(self.distinct_by_server.sum())

    @property
    def objective(self) -> float:
        """Weighted distinct packets: what the solvers maximise."""
        return float((self.problem.weight * self.distinct_by_server).sum())

    @property
    def bound(self) -> float:
        """What the plan is measured against: the applied bound when known, else the envelope."""
        return self.bounds.envelope if self.bounds.applied is None else self.bounds.applied

    @property
    def optimal(self) -> bool:
        return self.bounds.optimal or self.objective >= self.bound * (1 - EXACT_TOLERANCE)

    @property
    def gap(self) -> float:
        """How far below its bound the plan may be, relative to the bound (0: optimal)."""
        if self.optimal or self.bound <= 0:
            return 0.0
        return max(self.bound - self.objective, 0.0) / self.bound


def empty_mirrors() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
