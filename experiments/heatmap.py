"""The paper's numerical evaluation (Sec. IV-C, Fig. 3): gain of collaborative sampling on a grid.

n servers of equal capacity C carry a total volume ``V = load * n * C``; server i gets a share
proportional to ``p**(i-1)``. A fraction ``cross_fraction`` of every server's traffic goes to VMs
on the other servers (spread evenly); the paper keeps all traffic inside each server (0). A cell
is infeasible when some server must forward more than C. Its gain is the planner's optimum over
the non-collaborative baseline, minus one. Everything here is pure: numbers in, DataFrame out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.experiments.errors import ExperimentError
from cosample.planner.datacentre import DataCentre

#: A server's load may exceed C by this relative amount (rounding of ``load * n * share``).
LOAD_TOLERANCE = 1e-9

COLUMNS = (
    "servers",
    "alpha",
    "beta",
    "cross_fraction",
    "p",
    "load",
    "feasible",
    "max_server_load",
    "collaborative_pps",
    "noncollaborative_pps",
    "gain",
)


@dataclass(frozen=True)
class HeatmapSetup:
    """What stays fixed across one heatmap: size, costs, capacity and traffic locality."""

    servers: int = 10
    alpha: float = PAPER_ALPHA
    beta: float = PAPER_BETA
    capacity_pps: float = 1e6
    cross_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.servers, (int, np.integer)) or self.servers < 1:
            raise ExperimentError(f"servers: expected an integer >= 1, got {self.servers!r}")
        for name in ("alpha", "beta", "capacity_pps"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise ExperimentError(f"{name}: must be finite and > 0, got {value!r}")
        if not 0.0 <= self.cross_fraction <= 1.0:
            raise ExperimentError(f"cross_fraction: must be in [0, 1], got {self.cross_fraction!r}")
        if self.servers == 1 and self.cross_fraction > 0:
            raise ExperimentError("cross_fraction > 0 needs at least 2 servers")


def geometric_shares(servers: int, p: float) -> np.ndarray:
    """Shares of the total volume, proportional to ``p**(i-1)`` for i = 1..n, summing to 1."""
    if not 0.0 < p <= 1.0:
        raise ExperimentError(f"p: must be in (0, 1], got {p!r}")
    weights = p ** np.arange(servers, dtype=float)
    return weights / weights.sum()


def traffic_matrix(setup: HeatmapSetup, p: float, load: float) -> np.ndarray:
    """Dense ``V[i][j]`` in pps: own traffic on the diagonal, the crossing part spread evenly."""
    if not load > 0.0 or not np.isfinite(load):
        raise ExperimentError(f"load: must be finite and > 0, got {load!r}")
    n = setup.servers
    sent = load * n * setup.capacity_pps * geometric_shares(n, p)
    matrix = np.diag(sent * (1.0 - setup.cross_fraction))
    if n > 1 and setup.cross_fraction > 0:
        spread = sent * setup.cross_fraction / (n - 1)
        matrix += spread[:, None] * (1.0 - np.eye(n))
    return matrix


def forwarding_pps(matrix: np.ndarray) -> np.ndarray:
    """F_i: what server i sends plus what the other servers send to it."""
    return matrix.sum(axis=1) + matrix.sum(axis=0) - np.diag(matrix)


def datacentre(setup: HeatmapSetup, p: float, load: float) -> DataCentre | None:
    """The cell's data centre, or None when some server's forwarding load exceeds C."""
    matrix = traffic_matrix(setup, p, load)
    capacity = np.full(setup.servers, setup.capacity_pps)
    if forwarding_pps(matrix).max() > setup.capacity_pps * (1.0 + LOAD_TOLERANCE):
        return None
    dc = DataCentre.from_matrix(capacity, setup.alpha, setup.beta, matrix)
    # A load of exactly C can come out a few ulp above it: such a server is exactly full.
    if (dc.forwarding_pps > capacity).any():
        dc = DataCentre.from_matrix(
            np.maximum(capacity, dc.forwarding_pps), setup.alpha, setup.beta, matrix
        )
    return dc


def gain_cell(setup: HeatmapSetup, p: float, load: float) -> dict[str, float | bool]:
    """One tidy row: feasibility, both collected volumes and the gain (NaN if undefined)."""
    from cosample.planner.baseline import noncollab_pps
    from cosample.planner.exact import optimum_pps

    forwarding = forwarding_pps(traffic_matrix(setup, p, load))
    row: dict[str, float | bool] = {
        **asdict(setup),
        "p": float(p),
        "load": float(load),
        "max_server_load": float(forwarding.max() / setup.capacity_pps),
    }
    del row["capacity_pps"]
    dc = datacentre(setup, p, load)
    if dc is None:
        return {
            **row,
            "feasible": False,
            "collaborative_pps": np.nan,
            "noncollaborative_pps": np.nan,
            "gain": np.nan,
        }
    collaborative = float(optimum_pps(dc))
    noncollaborative = float(noncollab_pps(dc))
    # Every server exactly full: neither approach samples anything and the gain is undefined.
    gain = collaborative / noncollaborative - 1.0 if noncollaborative > 0 else np.nan
    return {
        **row,
        "feasible": True,
        "collaborative_pps": collaborative,
        "noncollaborative_pps": noncollaborative,
        "gain": gain,
    }


def gain_grid(
    setup: HeatmapSetup, p_values: Sequence[float], load_values: Sequence[float]
) -> pd.DataFrame:
    """Tidy table, one row per (p, load) cell, columns ``COLUMNS``; gain is a fraction (1.0 = 100%)."""
    rows = [gain_cell(setup, float(p), float(load)) for p in p_values for load in load_values]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["feasible"] = frame["feasible"].astype(bool)
    return frame


def even_grid(points: int) -> np.ndarray:
    """``points`` values evenly spaced in (0, 1]: 1/points, 2/points, ..., 1."""
    if points < 1:
        raise ExperimentError(f"grid: need at least 1 point per axis, got {points}")
    return np.arange(1, points + 1) / points


def parse_grid(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``"40"`` (40 x 40) or ``"40x25"`` (40 values of p, 25 of load), each evenly in (0, 1]."""
    parts = text.lower().split("x")
    try:
        counts = [int(part) for part in parts]
    except ValueError:
        raise ExperimentError(
            f"--grid {text!r}: expected N or PxL with integers, e.g. 40 or 40x25"
        ) from None
    if len(counts) not in (1, 2) or min(counts) < 1:
        raise ExperimentError(f"--grid {text!r}: expected N or PxL with positive integers")
    p_points, load_points = (counts * 2)[:2] if len(counts) == 1 else counts
    return even_grid(p_points), even_grid(load_points)


@dataclass(frozen=True)
class GainSummary:
    """Headline numbers of one heatmap: over feasible cells with a defined gain."""

    cells: int
    feasible_cells: int
    gain_cells: int  # feasible and not every server full: the gain is defined
    max_gain: float
    mean_gain: float
    median_gain: float
    p_at_max: float
    load_at_max: float

    def report(self) -> str:
        if self.gain_cells == 0:
            return f"no cell with a defined gain among {self.cells} (all infeasible or all servers full)"
        return (
            f"max gain {self.max_gain:.1%} (p={self.p_at_max:g}, load={self.load_at_max:g}); "
            f"mean gain {self.mean_gain:.1%}, median {self.median_gain:.1%} over the "
            f"{self.gain_cells} cells with a gain ({self.feasible_cells} feasible of {self.cells})"
        )


def summarise(frame: pd.DataFrame) -> GainSummary:
    """Max, mean and median gain over the cells where it is defined, and where the max is."""
    defined = frame.dropna(subset=["gain"])
    feasible = int(frame["feasible"].sum())
    if defined.empty:
        return GainSummary(len(frame), feasible, 0, np.nan, np.nan, np.nan, np.nan, np.nan)
    best = defined.loc[defined["gain"].idxmax()]
    return GainSummary(
        cells=len(frame),
        feasible_cells=feasible,
        gain_cells=len(defined),
        max_gain=float(best["gain"]),
        mean_gain=float(defined["gain"].mean()),
        median_gain=float(defined["gain"].median()),
        p_at_max=float(best["p"]),
        load_at_max=float(best["load"]),
    )
