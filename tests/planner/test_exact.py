"""The exact solver on cases with a known answer, and its tie-breaking."""

from __future__ import annotations

import numpy as np
import pytest

from cosample.planner import DataCentre, solve
from cosample.planner.baseline import noncollab_pps
from cosample.planner.exact import water_fill
from cosample.planner.pairing import pair_offloads


def two_servers(alpha=1.54, beta=0.46):
    # s1 carries 600k pps on 1 Mpps; s2 is idle.
    return DataCentre.from_matrix([1e6, 1e6], alpha, beta, [[600e3, 0], [0, 0]])


def test_two_server_optimum_by_hand():
    dc = two_servers()
    spare = 400e3
    room = 1e6 / (1.54 + 0.46)                       # s2 receives up to 500k
    useful = min((1.54 * 600e3 - spare) / (1.54 - 0.46), spare / 0.46)
    offload = min(room, useful)
    expected = spare / 1.54 + (1 - 0.46 / 1.54) * offload
    assert solve(dc).collected_pps == pytest.approx(expected, rel=1e-12)
    assert noncollab_pps(dc) == pytest.approx(spare / 1.54, rel=1e-12)


def test_beta_not_below_alpha_means_no_mirrors():
    solution = solve(two_servers(alpha=0.9, beta=1.2))
    assert solution.mirror_pairs == 0
    assert solution.collected_pps == pytest.approx(400e3 / 0.9)


def test_scarce_room_goes_to_the_least_covered_senders_first():
    # Two equal-cost senders compete for one small receiver: max-min coverage evens them out.
    matrix = np.diag([900e3, 700e3, 1.0])
    dc = DataCentre.from_matrix([1e6, 1e6, 30e3], 1.5, 0.5, matrix)
    solution = solve(dc)
    coverage = (solution.local_pps + solution.offload_pps)[:2] / dc.own_pps[:2]
    alone = (dc.spare_pps / dc.alpha)[:2] / dc.own_pps[:2]
    assert alone[0] < alone[1]
    assert solution.offload_pps[0] > solution.offload_pps[1]
    assert coverage[0] == pytest.approx(coverage[1], rel=1e-9) or solution.offload_pps[1] == 0


def test_water_fill_spends_the_budget_and_levels_coverage():
    rng = np.random.default_rng(3)
    base, own = rng.uniform(1, 10, 50), rng.uniform(20, 40, 50)
    cap = rng.uniform(0, 30, 50)
    budget = cap.sum() * 0.4
    offload = water_fill(base, cap, own, 0.7, budget)
    assert offload.sum() == pytest.approx(budget, rel=1e-12)
    assert np.all((offload >= 0) & (offload <= cap + 1e-12))
    coverage = (base + 0.7 * offload) / own
    rising = (offload > 1e-9) & (offload < cap - 1e-9)
    if rising.any():  # everyone partially served sits at one common level, nobody below it unserved
        level = coverage[rising].mean()
        assert np.allclose(coverage[rising], level)
        assert np.all(coverage[offload <= 1e-9] >= level - 1e-9)


def test_pairing_conserves_traffic_and_respects_room():
    offload = np.array([5.0, 0.0, 3.0, 2.0, 0.0])
    room = np.array([0.0, 6.0, 0.0, 0.0, 4.5])
    src, dst, pps = pair_offloads(offload, room)
    assert np.allclose(np.bincount(src, weights=pps, minlength=5), offload)
    assert np.all(np.bincount(dst, weights=pps, minlength=5) <= room + 1e-12)
    assert len(pps) <= 3 + 2 - 1


def test_million_servers_sparse():
    n = 1_000_000
    rng = np.random.default_rng(0)
    own = np.minimum(rng.pareto(1.5, n) * 2e5, 6e5)
    dc = DataCentre.from_arrays(np.full(n, 1e6), 1.54, 0.46, np.arange(n), np.arange(n), own)
    solution = solve(dc)
    assert solution.local_pps.shape == (n,)
    assert solution.collected_pps > noncollab_pps(dc)


def test_pairing_largest_first_keeps_the_example_to_five_tunnels():
    # In server order the example needs 8 pairs; sorting senders and receivers by size gives 5.
    from cosample.planner.commands import example_datacentre

    assert solve(example_datacentre()).mirror_pairs == 5
