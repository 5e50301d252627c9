"""Figures for the experiments, drawn with matplotlib's Agg backend and saved as PNG files.

(The cost curves use the cost model's own figure, ``cosample.costmodel.figure``.)

Each function takes tidy DataFrames (the same ones written as CSV) and a path, draws one
figure and saves it atomically; none of them computes results.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cosample.experiments.files import save_figure

GAIN_COLOURS = "viridis"


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around sorted centre values (half-way between neighbours)."""
    if len(centres) == 1:
        half = 0.5 * (abs(centres[0]) or 1.0)
        return np.array([centres[0] - half, centres[0] + half])
    middles = (centres[1:] + centres[:-1]) / 2
    return np.concatenate([[2 * centres[0] - middles[0]], middles, [2 * centres[-1] - middles[-1]]])


def _gain_mesh(
    axes: plt.Axes, frame: pd.DataFrame, vmax: float | None
) -> matplotlib.collections.QuadMesh:
    table = frame.pivot_table(index="load", columns="p", values="gain", dropna=False) * 100.0
    p_values, load_values = table.columns.to_numpy(float), table.index.to_numpy(float)
    gains = np.ma.masked_invalid(table.to_numpy(float))
    mesh = axes.pcolormesh(
        _edges(p_values),
        _edges(load_values),
        gains,
        cmap=GAIN_COLOURS,
        vmin=0.0,
        vmax=vmax,
        shading="flat",
    )
    axes.set_xlabel("traffic dispersion p")
    axes.set_ylabel("average load V / (nC)")
    axes.set_xlim(0, max(1.0, p_values.max()))
    axes.set_ylim(0, max(1.0, load_values.max()))
    return mesh


def gain_heatmap(
    frame: pd.DataFrame,
    path: str | Path,
    title: str | None = None,
    label: str = "gain over non-collaborative sampling (%)",
) -> Path:
    """The paper's Fig. 3: gain in % over (p, load); infeasible cells stay blank."""
    figure, axes = plt.subplots(figsize=(5.6, 4.4))
    mesh = _gain_mesh(axes, frame, vmax=None)
    figure.colorbar(mesh, ax=axes, label=label)
    if title:
        axes.set_title(title, fontsize=10)
    return save_figure(figure, path)


def gain_panels(frames: Mapping[str, pd.DataFrame], path: str | Path, columns: int = 3) -> Path:
    """Several gain heatmaps side by side on one colour scale (sensitivity study)."""
    rows = -(-len(frames) // columns)
    figure, grid = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.6 * rows), squeeze=False, constrained_layout=True
    )
    highest = max((frame["gain"].max() for frame in frames.values()), default=0.0)
    vmax = float(highest * 100.0) if np.isfinite(highest) and highest > 0 else 1.0
    mesh = None
    for axes, (title, frame) in zip(grid.flat, frames.items()):
        mesh = _gain_mesh(axes, frame, vmax=vmax)
        axes.set_title(title, fontsize=9)
    for axes in list(grid.flat)[len(frames) :]:
        axes.set_visible(False)
    if mesh is not None:
        figure.colorbar(mesh, ax=grid, label="gain (%)", shrink=0.8)
    return save_figure(figure, path)


def planner_scaling(table: pd.DataFrame, path: str | Path) -> Path:
    """Planner time vs number of servers, log-log, one line per solver (and LP backend)."""
    figure, axes = plt.subplots(figsize=(6.0, 4.4))
    for label, rows in table.groupby("solver_label", sort=False):
        rows = rows.sort_values("servers")
        axes.loglog(rows["servers"], rows["seconds"], "o-", ms=4, label=label)
    axes.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("servers n")
    axes.set_ylabel("planning time (s), best of up to 5 runs")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return save_figure(figure, path)
