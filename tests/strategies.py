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
        alpha = draw(st.floats(0.1, 3)); beta = draw(st.floats(0.05, 3))
    return DataCentre.from_matrix(capacity, alpha, beta, matrix)
