"""Change vs noise: steps, the hold, the gain waiting for a settled estimate, and the loop seen
through a collector's sliding window (a step arrives as a ramp lasting one window)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
from controller_helpers import inventory_doc, snapshot_doc
from controller_window import TESTBED, chunked_noise, swapped
from controller_window import run as run_loop
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector.snapshot import parse_snapshot
from cosample.controller.decide import Policy, Situation, decide
from cosample.controller.estimate import measure
from cosample.controller.evaluate import Evaluation
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.smoothing import steps, update

NOW = datetime.now(timezone.utc).replace(microsecond=0)
CAPACITY = np.full(3, 3000.0)
INVENTORY = inventory_from_dict(inventory_doc([3000.0] * 3))
totals = st.lists(st.floats(100, 2500), min_size=3, max_size=3)


def measured(traffic, seconds, window=15.0):
    document = snapshot_doc(
        NOW + timedelta(seconds=seconds), traffic, servers=["s1", "s2", "s3"], window_s=window
    )
    return measure(parse_snapshot(json.dumps(document)), INVENTORY)


@settings(max_examples=100, deadline=None)
@given(totals, st.lists(st.floats(-0.2, 0.2), min_size=3, max_size=3))
def test_moves_within_the_change_are_no_steps(old, moves):
    old = np.asarray(old)
    rose, fell = steps(old, old * (1 + np.asarray(moves)), np.ones(3, dtype=bool), 0.25, CAPACITY)
    assert not rose.any() and not fell.any()


@settings(max_examples=100, deadline=None)
@given(totals, st.lists(st.sampled_from([-0.6, -0.3, 0.3, 1.0, 3.0]), min_size=3, max_size=3))
def test_moves_beyond_the_change_are_steps_in_their_direction(old, moves):
    old = np.asarray(old)
    new = old * (1 + np.asarray(moves))
    big = np.abs(new - old) > 0.02 * CAPACITY
    rose, fell = steps(old, new, np.ones(3, dtype=bool), 0.25, CAPACITY)
    assert np.array_equal(rose, big & (new > old)) and np.array_equal(fell, big & (new < old))
    rose, fell = steps(old, new, np.zeros(3, dtype=bool), 0.25, CAPACITY)
    assert not rose.any() and not fell.any()  # unmeasured servers never step


def run(traffic, seconds, **kwargs):
    """``update`` over snapshots every 5 s; ``traffic(t)`` the matrix at ``t``."""
    state = None
    for t in seconds:
        state = update(
            state, measured(traffic(t), t), 15.0, 0.0, change=0.25, capacity=CAPACITY, **kwargs
        )
    return state


def test_a_trough_shorter_than_the_hold_never_reaches_the_plan():
    low = {src: {dst: v * 0.8 for dst, v in row.items()} for src, row in TESTBED.items()}
    state = run(lambda t: low if 40 <= t < 60 else TESTBED, range(5, 60, 5), hold_s=30.0)
    planned = state.planning().totals()
    assert np.allclose(planned, [2400, 1200, 600])  # the hold keeps the level before
    assert np.all(state.totals() < planned)  # while the average follows the trough
    assert not state.settling().any()  # 20 % is noise, not a step
    later = run(lambda t: low if t >= 40 else TESTBED, range(5, 100, 5), hold_s=30.0)
    assert np.all(later.planning().totals() < planned * 0.9)  # a lasting fall counts after it


def test_a_step_is_rising_for_one_window_and_a_fall_step_is_taken_at_once():
    shifted = swapped(TESTBED, "s1", "s3")
    state = run(lambda t: TESTBED if t < 50 else shifted, range(5, 56, 5), hold_s=30.0)
    assert list(state.rising()) == [False, False, True]
    assert list(state.settling()) == [True, False, True]
    # a whole window after the step: settled, and s1's fall was followed (not held, not smoothed)
    state = run(lambda t: TESTBED if t < 50 else shifted, range(5, 80, 5), hold_s=30.0)
    assert not state.settling(NOW.timestamp() + 80).any()
    assert abs(state.planning().totals()[0] - 600.0) < 1.0


def situation(streak, settling=()):
    use = np.array([0.8, 0.8])
    return Situation(
        now=NOW,
        interval_s=5.0,
        names=("s1", "s2"),
        capacity_pps=np.full(2, 1e3),
        candidate=Evaluation(use * 1e3, use, 150.0),
        current=Evaluation(use * 1e3, use, 100.0),
        current_expires=NOW + timedelta(hours=1),
        gain_streak=streak,
        settling=settling,
    )


@given(st.integers(0, 10))
def test_a_gain_waits_while_traffic_settles_and_keeps_its_streak(streak):
    policy = Policy(confirm_cycles=3)
    waiting = decide(situation(streak, ("s1",)), policy)
    assert not waiting.publish and waiting.gain_streak == streak + 1
    settled = decide(situation(waiting.gain_streak), policy)
    assert settled.publish == (waiting.gain_streak + 1 >= 3)


def loop(traffic, tmp_path, seed, **overrides):
    """The controller every 5 s over a 15-s collector window (3 % sampling noise), 160 s."""
    return run_loop(traffic, seed, tmp_path, **overrides).published


def test_a_shift_seen_through_the_window_publishes_twice(tmp_path):
    """The busiest and the quietest server swap at 100 s: one overload publication as the rise
    shows (the rising server gets no budget), one gain once the window has passed; not one
    plan per cycle of the ramp. Without steps, the same run publishes a plan per cycle."""
    shifted = swapped(TESTBED, "s1", "s3")
    traffic = lambda t: TESTBED if t < 100 else shifted  # noqa: E731
    for seed in range(5):
        published = loop(traffic, tmp_path, seed)
        after = [(t, reason) for t, reason in published if t > 100]
        assert [reason for _, reason in after] == ["overload", "gain"], after
        assert after[0][0] <= 110 and 115 <= after[1][0] <= 145, after
    without = loop(traffic, tmp_path, 99, change=None)
    assert len([t for t, _ in without if t > 100]) >= 4


def test_steady_chunked_noise_publishes_the_first_plan_only(tmp_path):
    """+/-10 % on every flow, redrawn every 15 s (the testbed's steady scenario), through the
    15-s window, with dense samples from the start: the first plan, then nothing, on at least
    9 of 10 seeds and at most one more on any."""
    counts = []
    for seed in range(10):
        traffic = chunked_noise(TESTBED, np.random.default_rng(1000 + seed), 0.10, 15.0, 200.0)
        published = loop(traffic, tmp_path, seed, planless_start=False)
        assert published and published[0][1] == "no current plan"
        counts.append(len(published))
    assert max(counts) <= 2 and counts.count(1) >= 9, counts


def test_steady_noise_after_a_planless_start(tmp_path):
    """The same, starting plan-less: the first plan rests on sparse 1-in-128 samples (their
    sampling error simulated, the hold not remembering them); the first publication is the
    real plan, never a measurement plan, and at most one correction follows, except an
    overload on the knife edge after a gain (measured: 17 of 30 seeds publish once, 12 twice,
    one three times, docs/controller.md "Known limits"; here at least half of the same 30: ten
    seeds were too few for a threshold, 5 of 10 passing or failing by one seed)."""
    counts, thirds = [], []
    for seed in range(30):
        traffic = chunked_noise(TESTBED, np.random.default_rng(1000 + seed), 0.10, 15.0, 200.0)
        published = loop(traffic, tmp_path, seed)
        assert published[0][1] == "no current plan"
        assert not [r for _, r in published if r.startswith("bootstrap")]
        counts.append(len(published))
        thirds += [reason for _, reason in published[2:]]
    # Since the planner plans over every plan OVS can apply (i44), a gain may make a sender
    # also receive, up to the overload rule's capacity x (1 - margin): seed 17's gain (+28.3 %,
    # s2 at 1-in-3 mirroring to s3 and taking s1's copies) is then predicted at 95.1 % on the
    # next +/-10 % draw and relieved (the documented overload rule, not noise chasing): a third
    # publication, and only ever an overload, on at most one seed in ten.
    assert max(counts) <= 3 and counts.count(1) >= 15, counts
    assert thirds.count("overload") == len(thirds) <= 3, (counts, thirds)
