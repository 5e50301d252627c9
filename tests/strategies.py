"""Hypothesis strategies for random data centres (imported by the planner tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from cosample.planner.datacentre import DataCentre


@st.composite
def datacentres(draw, max_servers: int = 7, feasible: bool = True, per_server_costs: bool = True):
    """Skewed traffic with inter-server flows; capacities above forwarding load when feasible."""
    n = draw(st.integers(1, max_servers))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1e3, 1e5, 1e6]))
    density = draw(st.floats(0.0, 1.0))
    matrix = rng.pareto(1.2, (n, n)) * scale * (rng.uniform(size=(n, n)) < density)
    np.fill_diagonal(matrix, np.diag(matrix) + rng.pareto(1.2, n) * scale)
    forwarding = matrix.sum(axis=1) + matrix.sum(axis=0) - np.diag(matrix)
    headroom = rng.uniform(0, 3, n) * forwarding.mean() + rng.uniform(0, scale, n)
    capacity = forwarding + headroom
    if not feasible:
        overloaded = rng.uniform(size=n) < 0.5
        overloaded[int(np.argmax(forwarding))] = True
        capacity = np.where(overloaded, forwarding * rng.uniform(0, 0.99, n), capacity)
    if per_server_costs and draw(st.booleans()):
        alpha, beta = rng.uniform(0.1, 3, n), rng.uniform(0.05, 3, n)
    else:
        alpha = draw(st.floats(0.1, 3))
        beta = draw(st.floats(0.05, 3))
    return DataCentre.from_matrix(capacity, alpha, beta, matrix)


@st.composite
def planning_inputs(draw, max_servers: int = 6, collector_cap: bool = False):
    """A data centre with the optional planning inputs: margins, weights, mirror caps, bridges
    that sample inbound traffic and, with ``collector_cap``, a budget on samples."""
    dc = draw(datacentres(max_servers=max_servers))
    n = dc.size
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    extra = {}
    if draw(st.booleans()):
        extra["margin"] = rng.uniform(0, 0.3, n)
    if draw(st.booleans()):
        extra["weight"] = rng.choice([0.5, 1.0, 2.0, 5.0], n)
    if draw(st.booleans()):
        extra["packet_bytes"] = np.full(n, 500.0)
        extra["mirror_cap_bytes"] = np.where(
            rng.uniform(size=n) < 0.5, dc.own_pps * rng.uniform(0, 500, n), np.inf
        )
    if draw(st.booleans()):
        extra["samples_inbound"] = rng.uniform(size=n) < 0.5
    if collector_cap:
        extra["collector_cap_pps"] = float(dc.own_pps.sum() * draw(st.floats(0.05, 1.5)))
    return DataCentre.from_arrays(
        dc.capacity_pps,
        dc.alpha,
        dc.beta,
        dc.traffic_src,
        dc.traffic_dst,
        dc.traffic_pps,
        names=dc.names,
        **extra,
    )


def moved(dc: DataCentre, seed: int, drop: bool) -> DataCentre:
    """The same servers with the traffic scaled down per entry (and, with ``drop``, some gone):
    the next plan's data centre in the transition tests."""
    rng = np.random.default_rng(seed)
    pps = dc.traffic_pps * rng.uniform(0.1, 1.0, dc.traffic_pps.size)  # stays feasible
    if drop:
        pps = np.where(rng.uniform(size=pps.size) < 0.3, 0.0, pps)
    return DataCentre.from_arrays(
        dc.capacity_pps, dc.alpha, dc.beta, dc.traffic_src, dc.traffic_dst, pps, names=dc.names
    )
