"""How the gain heatmap moves with the number of servers, the cost coefficients and locality.

A scenario is a titled ``HeatmapSetup``; ``run`` evaluates each on the same (p, load) grid and
returns one tidy table with a ``scenario`` column, ``summary`` the headline numbers per scenario.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from cosample.experiments.heatmap import HeatmapSetup, gain_grid, summarise


@dataclass(frozen=True)
class Scenario:
    title: str
    setup: HeatmapSetup


def scenarios(
    base: HeatmapSetup,
    servers: Sequence[int] = (5, 20, 50),
    cross_fractions: Sequence[float] = (0.2, 0.5),
    calibrated: Sequence[tuple[str, float, float]] = (),
) -> list[Scenario]:
    """The base case, then other n, then crossing traffic, then each calibration (name, alpha, beta)."""

    def describe(setup: HeatmapSetup, what: str = "") -> str:
        text = f"n={setup.servers}, a={setup.alpha:.3g}, b={setup.beta:.3g}"
        if setup.cross_fraction:
            text += f", {setup.cross_fraction:.0%} crosses"
        return f"{what}: {text}" if what else text

    chosen = [Scenario(describe(base, "base"), base)]
    chosen += [
        Scenario(describe(replace(base, servers=n)), replace(base, servers=n))
        for n in servers
        if n != base.servers
    ]
    chosen += [
        Scenario(describe(replace(base, cross_fraction=x)), replace(base, cross_fraction=x))
        for x in cross_fractions
        if x != base.cross_fraction
    ]
    for name, alpha, beta in calibrated:
        setup = replace(base, alpha=alpha, beta=beta)
        chosen.append(Scenario(describe(setup, name), setup))
    return chosen


def run(chosen: Sequence[Scenario], p_values: np.ndarray, load_values: np.ndarray) -> pd.DataFrame:
    """All scenarios' cells in one tidy table (``scenario`` first, then ``heatmap.COLUMNS``)."""
    frames = [
        gain_grid(scenario.setup, p_values, load_values).assign(scenario=scenario.title)
        for scenario in chosen
    ]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["scenario"] + [c for c in frame.columns if c != "scenario"]]


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per scenario: its settings, feasible cells, max/mean/median gain and where the max is."""
    rows = []
    for title, cells in frame.groupby("scenario", sort=False):
        first = cells.iloc[0]
        numbers = summarise(cells)
        rows.append(
            {
                "scenario": title,
                "servers": int(first["servers"]),
                "alpha": float(first["alpha"]),
                "beta": float(first["beta"]),
                "cross_fraction": float(first["cross_fraction"]),
                "cells": numbers.cells,
                "feasible_cells": numbers.feasible_cells,
                "gain_cells": numbers.gain_cells,
                "max_gain": numbers.max_gain,
                "mean_gain": numbers.mean_gain,
                "median_gain": numbers.median_gain,
                "p_at_max": numbers.p_at_max,
                "load_at_max": numbers.load_at_max,
            }
        )
    return pd.DataFrame(rows)
