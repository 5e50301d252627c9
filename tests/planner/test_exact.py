"""The exact solver on cases with a known answer: distinct packets, ties, margin, pairing."""

from __future__ import annotations

import numpy as np
import pytest

from cosample.planner import DataCentre, solve
from cosample.planner.baseline import noncollab_pps
from cosample.planner.commands import example_datacentre
from cosample.planner.exact import solve_continuous
from cosample.planner.pairing import pair_offloads
from cosample.planner.planfile import build_plan
from cosample.planner.problem import build_problem
from cosample.planner.realise import realise


def two_servers(alpha=1.54, beta=0.46, own=600e3, receiver=1e6):
    # s1 carries `own` pps on 1 Mpps; s2 is idle.
    return DataCentre.from_matrix([1e6, receiver], alpha, beta, [[own, 0], [0, 0]])


def test_two_server_optimum_by_hand():
    # spare 400k: mirroring all 600k costs 0.46 * 600k = 276k and s2 has room for 1M, so s1
    # mirrors everything and samples nothing locally (local samples would only duplicate).
    dc = two_servers(receiver=2e6)
    solution = solve(dc, margin=0.0)
    assert solution.collected_pps == pytest.approx(600e3, rel=1e-12)
    assert solution.local_pps[0] == 0.0
    assert solution.offload_pps[0] == pytest.approx(600e3)
    assert noncollab_pps(dc) == pytest.approx(400e3 / 1.54, rel=1e-12)


def test_room_short_of_the_senders_need_is_spent_with_the_local_rest():
    # s2 takes 1M / (1.54 + 0.46) = 500k; continuously s1 mirrors them and samples
    # (400k - 0.46 * 500k) / 1.54 locally; both draw independently: x + y - x y / U.
    problem = build_problem(two_servers(), margin=0.0)
    y = 500e3
    x = (400e3 - 0.46 * y) / 1.54
    continuous = solve_continuous(problem)
    assert continuous.collected_pps == pytest.approx(x + y - x * y / 600e3, rel=1e-12)
    assert continuous.optimal
    # as applied: 170k left after mirroring 500k pays for 1-in-6 (924k / 6 = 154k), which beats
    # 1-in-5 with less mirrored ((400k - 184.8k) / 0.46) and 1-in-7 with all of it
    solution = solve(problem)
    assert realise(solution).sflow_sampling[0] == 6
    assert solution.offload_pps[0] == pytest.approx(y)
    expected = 600e3 / 6 + y * 5 / 6
    assert solution.collected_pps == pytest.approx(expected, rel=1e-12)
    assert realise(solution).collected_pps == pytest.approx(expected, rel=1e-12)
    assert max(600e3 / 5 + (400e3 - 924e3 / 5) / 0.46 * 4 / 5, 600e3 / 7 + y * 6 / 7) < expected
    assert solution.optimal and solution.bounds.applied == pytest.approx(expected, rel=1e-9)


def test_sender_that_cannot_mirror_all_mirrors_what_its_capacity_pays_for():
    # own 900k, spare 100k: pure mirroring reaches 100k/0.46 = 217k distinct; mixing local
    # sampling in would overlap; local alone 65k.
    dc = two_servers(own=900e3, receiver=2e6)
    solution = solve(dc, margin=0.0)
    assert solution.collected_pps == pytest.approx(100e3 / 0.46, rel=1e-12)
    assert solution.local_pps[0] == pytest.approx(0.0, abs=1e-6)
    assert solution.optimal and solution.gap == 0.0


def test_beta_not_below_alpha_means_no_mirrors_unless_rounding_frees_capacity():
    problem = build_problem(two_servers(alpha=0.9, beta=1.2), margin=0.0)
    continuous = solve_continuous(problem)
    assert continuous.mirror_pairs == 0
    assert continuous.collected_pps == pytest.approx(400e3 / 0.9)
    # rate 0.74 is not 1-in-N: 1-in-2 costs 270k of the 400k spare; the 130k left mirror
    # 130k / 1.2 pps, each new with probability 1/2; mirroring all (333k) collects less
    solution = solve(problem)
    assert realise(solution).sflow_sampling[0] == 2
    assert solution.offload_pps[0] == pytest.approx(130e3 / 1.2)
    assert solution.collected_pps == pytest.approx(300e3 + 130e3 / 1.2 / 2, rel=1e-12)
    assert solution.collected_pps > 400e3 / 1.2


def test_scarce_room_goes_whole_to_one_sender_not_split():
    # Two equal senders, one small receiver: splitting the room evenly (the LP's max-min tie)
    # overlaps with both senders' local sampling; the distinct optimum gives it to one.
    matrix = np.diag([900e3, 900e3, 1.0])
    dc = DataCentre.from_matrix([1e6, 1e6, 81e3], 1.5, 0.5, matrix)
    solution = solve_continuous(build_problem(dc, margin=0.0))
    room = (81e3 - 1 - 1.5) / 2.0

    def f(y):  # one sender's distinct pps when mirroring y: spare 100k, A = 1.5, beta = 0.5
        x = (100e3 - 0.5 * y) / 1.5
        return x + y - x * y / 900e3

    assert sorted(solution.offload_pps[:2]) == pytest.approx([0.0, room])
    assert solution.collected_pps == pytest.approx(f(room) + f(0) + 1, rel=1e-12)
    assert solution.collected_pps > 2 * f(room / 2) + 1 + 100  # the even split loses
    assert solution.bounds.method == "enumerated" and solution.optimal


def test_margin_keeps_every_server_below_its_share_of_capacity():
    dc = example_datacentre()
    for margin in (0.0, 0.1, 0.25):
        plan = build_plan(dc, solve(dc, margin=margin))
        assert plan["summary"]["max_capacity_use"] <= 1 - margin + 1e-9
        assert all(host["margin"] == margin for host in plan["hosts"].values())


def test_example_collects_the_lp_bound_in_distinct_packets():
    # The regression: the old exact plan lost 7.5 % to overlap on this example.
    solution = solve(example_datacentre(), margin=0.0)
    assert solution.collected_pps == pytest.approx(2_798_695.652173913, rel=1e-9)
    assert solution.bounds.lp == pytest.approx(solution.collected_pps, rel=1e-9)
    plan = build_plan(solution.problem.dc, solution)
    assert plan["summary"]["overlap_pps"] == pytest.approx(0.0, abs=1e-3)


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
    solution = solve(dc, robust=True)
    assert solution.local_pps.shape == (n,)
    assert solution.collected_pps > noncollab_pps(dc) * 0.9
    assert solution.objective <= solution.bounds.envelope * (1 + 1e-9)


def test_pairing_largest_first_keeps_the_example_tunnels_few():
    # Sorting senders and receivers by size lays them end to end: 3 senders into 4 receivers
    # need 6 pairs here (in server order 8); the bound is senders + receivers - 1.
    solution = solve(example_datacentre())
    assert solution.mirror_pairs == 6
