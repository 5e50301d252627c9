"""The non-collaborative baseline: every server samples what its own spare capacity allows."""

from __future__ import annotations

import time

import numpy as np

from cosample.planner.choices import NONCOLLAB
from cosample.planner.datacentre import DataCentre
from cosample.planner.solution import Solution, empty_mirrors


def local_only_pps(dc: DataCentre) -> np.ndarray:
    """min(U_i, spare_i / alpha_i) per server: sampling alone, within capacity."""
    dc.check_feasible()
    return np.minimum(dc.own_pps, dc.spare_pps / dc.alpha)


def noncollab_pps(dc: DataCentre) -> float:
    """Total traffic collected when no server mirrors."""
    return float(local_only_pps(dc).sum())


def solve_noncollab(dc: DataCentre) -> Solution:
    """The baseline as a plan-able solution (no mirrors)."""
    started = time.perf_counter()
    local = local_only_pps(dc)
    return Solution(NONCOLLAB, float(local.sum()), local, *empty_mirrors(),
                    seconds=time.perf_counter() - started)
