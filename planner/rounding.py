"""What sFlow's 1-in-N costs a plan: the continuous optimum against what the switches apply.

The exact solver plans what sFlow can apply (``quantised``); the continuous optimum (any real
local rate, ``exact.solve_continuous``) is then a bound, and the difference is what integer
intervals cost the fleet. Per server the difference says who loses most (a server whose
continuous rate was 0.9 samples 1-in-2 or mirrors instead). LP and baseline plans are
continuous themselves: their cost is what ``realise`` loses rounding them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosample.planner import stated
from cosample.planner.solution import Solution

#: How many of the servers that lose most the summary names.
NAMED = 5


def rounding_summary(solution: Solution, number) -> dict[str, Any]:
    """``summary.rounding``: continuous and applied distinct own packets, the cost, the losers
    (``stated.continuous`` against ``solution.applied``, both computed once per solution).

    ``number`` rounds a float for the plan (``planfile._num``).
    """
    continuous, applied = stated.continuous(solution), solution.applied
    before = continuous.distinct_by_server
    after = applied.distinct_pps
    loss = before - after
    cost = float(before.sum() - after.sum())
    total = float(before.sum())
    named = _most(loss, NAMED)
    named = named[loss[named] > 0]
    names = solution.problem.names
    return {
        "continuous_pps": number(total),
        "applied_pps": number(float(after.sum())),
        "cost_pps": number(cost),
        "cost_share": number(cost / total if total > 0 else 0.0),
        "continuous_optimal": bool(continuous.optimal),
        "servers": [
            {
                "name": names[i],
                "continuous_pps": number(before[i]),
                "applied_pps": number(after[i]),
                "loss_pps": number(loss[i]),
            }
            for i in named.tolist()
        ],
    }


def _most(values: np.ndarray, count: int) -> np.ndarray:
    """The positions of the ``count`` largest ``values``, largest first, lower position first
    among equals: ``np.argsort(-values, kind="stable")[:count]`` without sorting all 10^6
    (only those at least as large as the ``count``-th largest, in position order)."""
    if values.size <= count:
        return np.argsort(-values, kind="stable")
    negated = -values
    cut = np.partition(negated, count - 1)[count - 1]
    candidates = np.flatnonzero(negated <= cut)
    return candidates[np.argsort(negated[candidates], kind="stable")][:count]
