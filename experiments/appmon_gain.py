"""Application monitoring with and without collaboration (issue 27 item 4), in the paper's style.

The heatmap's data centre (``experiments.heatmap``: n servers of capacity C, server i carrying a
share ``p**(i-1)`` of a volume ``load * n * C``, its own traffic only) where each server's traffic
is one HTTP service of ``MEASURED_PACKETS_PER_REQUEST`` packets per request. Without
collaboration each host analyses its own service on-site in what forwarding leaves (the exact
knapsack, ``planner.appmon.solve_onsite``); with collaboration the planner may send a service's
selective mirror to another host (``planner.appmon_residues.plan_services``: the MILP, bound by its LP).
The sFlow plan is left out (both arms get the same CPU). Pure: numbers in, DataFrame out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from cosample.experiments.heatmap import HeatmapSetup, forwarding_pps, traffic_matrix
from cosample.planner.appmon import (
    DEFAULT_COSTS,
    MEASURED_PACKETS_PER_REQUEST,
    Services,
    solve_onsite,
)
from cosample.planner.appmon_residues import plan_services

COLUMNS = (
    "servers",
    "p",
    "load",
    "feasible",
    "requests_per_s",
    "monitored_onsite",
    "monitored_collaborative",
    "bound_collaborative",
    "gap",
    "analysis_hosts",
    "gain",
)


def gain_cell(setup: HeatmapSetup, p: float, load: float, costs: dict = DEFAULT_COSTS) -> dict:
    """One row: the shares of requests monitored on-site only and with collaboration."""
    forwarding = forwarding_pps(traffic_matrix(setup, p, load))
    n = setup.servers
    rate = forwarding / MEASURED_PACKETS_PER_REQUEST
    row = {"servers": n, "p": float(p), "load": float(load), "requests_per_s": float(rate.sum())}
    if forwarding.max() > setup.capacity_pps * (1 + 1e-9):
        return {**row, "feasible": False, **dict.fromkeys(COLUMNS[5:], np.nan)}
    services = Services(
        host=np.arange(n),
        rate=rate,
        packets=np.full(n, MEASURED_PACKETS_PER_REQUEST),
        weight=np.ones(n),
        min_share=np.zeros(n),
        onsite_ok=np.ones(n, bool),
        bytes_per_request=np.full(n, costs["mirror_bytes"]),
    )
    residual = np.maximum(setup.capacity_pps - forwarding, 0.0)
    onsite = solve_onsite(services, residual, costs)
    plan = plan_services(services, residual, np.full(n, np.inf), costs)
    total = float(rate.sum())
    gain = plan.objective / onsite.objective - 1 if onsite.objective > 0 else np.nan
    return {
        **row,
        "feasible": True,
        "monitored_onsite": onsite.objective / total,
        "monitored_collaborative": plan.objective / total,
        "bound_collaborative": plan.bound / total,
        "gap": plan.gap,
        "analysis_hosts": len(set(plan.to[plan.to >= 0].tolist())),
        "gain": gain,
    }


def gain_grid(
    setup: HeatmapSetup,
    p_values: Sequence[float],
    load_values: Sequence[float],
    costs: dict = DEFAULT_COSTS,
) -> pd.DataFrame:
    rows = [
        gain_cell(setup, float(p), float(load), costs) for p in p_values for load in load_values
    ]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["feasible"] = frame["feasible"].astype(bool)
    return frame


def report(frame: pd.DataFrame) -> str:
    """Headline numbers over feasible cells."""
    ok = frame[frame["feasible"]]
    if ok.empty:
        return "no feasible cell"
    defined = ok.dropna(subset=["gain"])
    lost_onsite = ok["monitored_onsite"] < 1 - 1e-9
    lost_collab = ok["monitored_collaborative"] < 1 - 1e-9
    text = (
        f"{len(ok)} feasible cells of {len(frame)}: every request monitored in "
        f"{int((~lost_onsite).sum())} without collaboration, {int((~lost_collab).sum())} with; "
        f"mean share monitored {ok['monitored_onsite'].mean():.1%} without, "
        f"{ok['monitored_collaborative'].mean():.1%} with; largest gap to the LP bound "
        f"{ok['gap'].max():.2%}"
    )
    if not defined.empty:
        best = defined.loc[defined["gain"].idxmax()]
        text += (
            f"; gain median {defined['gain'].median():.1%}, max {best['gain']:.1%} "
            f"(p={best['p']:g}, load={best['load']:g}) over {len(defined)} cells with a gain"
        )
    return text
