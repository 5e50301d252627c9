"""The publication decision: properties of the pure function, and no flapping end to end."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
from controller_helpers import inventory_doc, noisy, snapshot_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector.snapshot import parse_snapshot
from cosample.controller.decide import (
    Policy,
    Situation,
    decide,
    full_window,
    is_warm,
    quiet_s,
    remembers,
    two_phases,
)
from cosample.controller.evaluate import Evaluation, PlanShares, needs_two_phases
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.settings import Settings
from cosample.controller.source import Reading

NOW = datetime.now(timezone.utc).replace(microsecond=0)
POLICY = Policy(margin=0.05, min_gain=0.10, confirm_cycles=3)
uses = st.lists(st.floats(0, 2), min_size=1, max_size=8)


def evaluation(use, distinct):
    use = np.asarray(use, dtype=float)
    return Evaluation(use * 1000.0, use, distinct)


def situation(
    current_use,
    candidate_use,
    current_pps=100.0,
    candidate_pps=100.0,
    expires_in=3600.0,
    streak=0,
    warm=True,
    same=False,
):
    n = len(current_use)
    return Situation(
        now=NOW,
        interval_s=30.0,
        names=tuple(f"s{i}" for i in range(n)),
        capacity_pps=np.full(n, 1000.0),
        candidate=evaluation(candidate_use, candidate_pps),
        current=evaluation(current_use, current_pps),
        current_expires=NOW + timedelta(seconds=expires_in),
        same_content=same,
        gain_streak=streak,
        warm=warm,
    )


@given(uses, st.floats(0, 0.0999), st.integers(0, 10))
def test_quiet_when_nothing_matters(use, gain, streak):
    """Under the limit, gain at most the threshold, far from expiry: never publish."""
    use = [min(u, 0.95) for u in use]
    d = decide(situation(use, use, 100.0, 100.0 * (1 + gain), streak=streak), POLICY)
    assert not d.publish and d.gain_streak == 0


@given(uses, uses)
def test_overload_publishes_only_when_the_candidate_relieves_it(current, candidate):
    candidate = (candidate * len(current))[: len(current)]
    d = decide(situation(current, candidate), POLICY)
    over = np.asarray(current) > 0.95
    relieved = over & (np.asarray(candidate) < np.asarray(current) - 0.01)
    assert any(r.startswith("overload") for r in d.reasons) == bool(relieved.any())
    assert set(d.unrelievable) == {f"s{i}" for i in np.flatnonzero(over & ~relieved)}


@given(st.floats(0.1001, 5), st.integers(0, 5))
def test_gain_needs_confirmation(gain, streak):
    d = decide(situation([0.5], [0.5], 100.0, 100.0 * (1 + gain), streak=streak), POLICY)
    assert d.publish == (streak + 1 >= 3)
    cold = decide(
        situation([0.5], [0.5], 100.0, 100.0 * (1 + gain), streak=streak, warm=False), POLICY
    )
    assert not cold.publish


@given(st.floats(0, 59.9))
def test_expiry_within_two_cycles_publishes(left):
    assert decide(situation([0.5], [0.5], expires_in=left), POLICY).publish
    assert not decide(situation([0.5], [0.5], expires_in=60.0 + left), POLICY).publish


def test_no_plan_publishes_once_warm():
    s = Situation(
        now=NOW,
        interval_s=30,
        names=("a",),
        capacity_pps=np.ones(1),
        candidate=evaluation([0.5], 1.0),
    )
    assert decide(s, POLICY).publish
    assert not decide(Situation(**{**s.__dict__, "warm": False}), POLICY).publish


def test_the_same_plan_is_never_published_for_gain_or_overload():
    d = decide(situation([1.5], [1.2], 100.0, 500.0, streak=5, same=True), POLICY)
    assert not d.publish and d.unrelievable == ("s0",)


class Sink:
    def __init__(self):
        self.published = []

    def publish(self, rendered):
        self.published.append(rendered.versions)


def steady_fleet(rng):
    """2-7 servers, random matrix, forwarding between 20 % and 80 % of capacity."""
    n = int(rng.integers(2, 8))
    capacity = rng.uniform(1000, 5000, n)
    traffic = {}
    for i in range(n):
        row = {
            f"s{j + 1}": capacity[i] * rng.uniform(0.02, 0.35)
            for j in range(n)
            if rng.random() < 0.5
        }
        if row:
            traffic[f"s{i + 1}"] = row
    forwarding = np.zeros(n)
    for src, row in traffic.items():
        for dst, pps in row.items():
            forwarding[int(src[1:]) - 1] += pps
            if dst != src:
                forwarding[int(dst[1:]) - 1] += pps
    target = capacity * rng.uniform(0.2, 0.8, n)
    scale = float(np.min(np.where(forwarding > 0, target / np.maximum(forwarding, 1e-9), np.inf)))
    return capacity, {s: {d: v * scale for d, v in row.items()} for s, row in traffic.items()}


def run_steady(seed, tmp_path, cycles=40, noise=0.10):
    rng = np.random.default_rng(seed)
    capacity, traffic = steady_fleet(rng)
    inventory = inventory_from_dict(inventory_doc(list(capacity)))
    names = list(inventory.names)
    clock = [NOW]

    def reader(collectors, now, max_age_s, timeout_s):
        document = snapshot_doc(now, noisy(traffic, rng, noise), servers=names)
        return Reading(parse_snapshot(json.dumps(document)), (), 1, 1)

    sink = Sink()
    controller = Controller(
        inventory,
        Settings(("c1",), interval_s=30, tau_s=90),
        sink,
        tmp_path / f"state{seed}",
        clock=lambda: clock[0],
        reader=reader,
    )
    results = []
    for _ in range(cycles):
        results.append(controller.cycle())
        clock[0] += timedelta(seconds=30)
    return sink.published, results


def test_steady_noisy_load_does_not_flap(tmp_path):
    """20 random fleets, +/-10 % i.i.d. noise on every matrix entry, 40 cycles (20 minutes).

    Never an overload publication, at most one correction after the first plan, and most fleets
    publish exactly once (the measured spread is in docs/controller.md).
    """
    counts = []
    for seed in range(20):
        published, results = run_steady(seed, tmp_path)
        assert results[0].result == "kept" and "warming up" in results[0].reasons[0]
        assert all(r.result in ("kept", "published") for r in results)
        assert not any(reason.startswith("overload") for r in results for reason in r.reasons)
        counts.append(len(published))
    assert max(counts) <= 2, counts
    assert counts.count(1) >= 18, counts


# the loop's other rules, pure (``decide``): the controller only does the effects around them


def test_warming_up_is_decided_and_said_by_decide():
    """No plan in force (or the measurement plan: no current evaluation) and a cold estimate:
    no publication, and the reason says how much was averaged and how much is awaited."""
    s = Situation(
        now=NOW,
        interval_s=30,
        names=("a",),
        capacity_pps=np.ones(1),
        candidate=evaluation([0.5], 1.0),
        warm=False,
        averaged=2,
        warm_s=90.0,
    )
    d = decide(s, POLICY)
    assert not d.publish and d.gain_streak == 0
    assert d.reasons == ("warming up: 2 snapshot(s) averaged, publishing after 90 s of them",)
    warm = decide(Situation(**{**s.__dict__, "warm": True}), POLICY)
    assert warm.publish and warm.reasons == ("no current plan",)


@given(st.integers(0, 20), st.floats(1, 60), st.floats(0, 600))
def test_is_warm(averaged, interval, warm_s):
    assert is_warm(averaged, interval, warm_s) == (averaged * interval >= warm_s)
    if is_warm(averaged, interval, warm_s):
        assert is_warm(averaged + 1, interval, warm_s)  # never cools by averaging more


def test_full_window():
    assert full_window(30.0, 30.0, 30.0)  # steady
    assert not full_window(10.0, 5.0, 10.0)  # still growing: the one before was shorter
    assert not full_window(20.0, 30.0, 30.0)  # shorter than the longest seen (a restart)
    assert full_window(27.0, 30.0, 30.0)  # within FULL_WINDOW of both


@given(st.booleans(), st.booleans(), st.booleans())
def test_remembers(quiet, full, sparse):
    assert remembers(quiet, full, sparse) == (full and not quiet and not sparse)


def shares_of(local, pairs):
    src, dst, rate = (
        (np.asarray(c, dtype=float if k == 2 else np.int64) for k, c in enumerate(zip(*pairs)))
        if pairs
        else (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    )
    return PlanShares(1, "x", np.asarray(local, dtype=float), src, dst, rate)


PAIRS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from([0.25, 0.5, 0.5 + 1e-12, 1.0])),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(PAIRS, PAIRS, st.randoms(use_true_random=False))
def test_same_shares_whatever_the_order_of_the_pairs(pairs, others, shuffler):
    """``same_as`` compares the pairs as sets (sorted), with or without its shortcut for pairs
    already in the same order: the same answer as sorting both first."""

    def sorted_same(a: PlanShares, b: PlanShares) -> bool:
        if a.mirror_src.size != b.mirror_src.size:
            return False
        mine, theirs = (np.lexsort((x.mirror_dst, x.mirror_src)) for x in (a, b))
        return (
            np.array_equal(a.mirror_src[mine], b.mirror_src[theirs])
            and np.array_equal(a.mirror_dst[mine], b.mirror_dst[theirs])
            and np.allclose(a.mirror_rate[mine], b.mirror_rate[theirs], rtol=1e-9, atol=0)
        )

    shuffled = list(pairs)
    shuffler.shuffle(shuffled)
    local = [0.5] * 4
    for a, b in ((pairs, pairs), (pairs, shuffled), (pairs, others), (shuffled, others)):
        assert shares_of(local, a).same_as(shares_of(local, b)) == sorted_same(
            shares_of(local, a), shares_of(local, b)
        )


def test_two_phases_only_from_a_running_real_plan():
    old = shares_of([0.5, 1.0], [])
    new = shares_of([0.5, 1.0], [(0, 1, 0.3)])  # only rises: any order of hosts is safe
    risky = shares_of([1.0, 0.5], [(0, 1, 0.6)])  # s1 receives more but samples less
    later = NOW + timedelta(hours=1)
    assert needs_two_phases(old, risky) and two_phases(old, later, False, risky, NOW)
    assert not needs_two_phases(old, new) and not two_phases(old, later, False, new, NOW)
    assert not two_phases(old, NOW - timedelta(seconds=1), False, risky, NOW)  # expired
    assert not two_phases(old, later, True, risky, NOW)  # the measurement plan
    assert not two_phases(None, later, False, risky, NOW)  # no plan in force
    assert not two_phases(old, None, False, risky, NOW)


def test_quiet_lasts_until_the_agents_and_the_window_have_the_plan():
    class Timing:
        lead_s, settle_s, interval_s = 3.0, 6.0, 5.0

    assert quiet_s(Timing, False, 15.0, False) == 9.0
    assert quiet_s(Timing, True, 15.0, False) == 15.0
    assert quiet_s(Timing, False, 15.0, True) == 9.0 + 5.0 + 15.0
