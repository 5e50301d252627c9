"""The plausibility checks (pure): capacity bounds the evidence, jumps wait for a disjoint window."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.controller.estimate import Measurement
from cosample.controller.plausibility import vet

NAMES = ("s1", "s2", "s3")
CAPACITY = np.array([10_000.0, 10_000.0, 0.0])  # s3: capacity unknown
T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def measured(own, at_s=0.0, window_s=30.0):
    own = np.asarray(own, dtype=float)
    n = own.size
    return Measurement(
        T0 + timedelta(seconds=at_s),
        window_s,
        own > 0,
        own,
        np.zeros(n, bool),
        np.arange(n),
        np.arange(n),
        own.copy(),
    )


def test_an_estimate_above_what_the_server_can_forward_is_refused():
    first = vet(measured([5_000, 2_000, 1e12]), None, NAMES, CAPACITY)
    assert first.refusals == ()  # s3 has no capacity: not bounded
    forged = vet(measured([3.1e9, 2_000, 1e12], at_s=30), first.screen, NAMES, CAPACITY)
    (refusal,) = forged.refusals
    assert (refusal.server, refusal.reason, refusal.bound_pps) == ("s1", "above_capacity", 12_500)
    assert "3.1e+09 pps" in refusal.describe() and "refused" in refusal.describe()
    m = forged.measurement
    assert not m.measured[0] and m.own_pps[0] == 0 and 0 not in m.traffic_src  # held, not zero
    assert m.measured[1] and m.own_pps[1] == 2_000
    assert forged.screen.accepted_pps[0] == 5_000  # the refused value is never a baseline
    # within the slack (sampling noise at the limit): evidence
    assert vet(measured([12_000, 2_000, 0], at_s=60), forged.screen, NAMES, CAPACITY).refusals == ()


def test_a_jump_is_believed_only_when_a_disjoint_window_shows_it_too():
    screen = vet(measured([1_000, 1_000, 1]), None, NAMES, CAPACITY).screen
    jump = vet(measured([9_000, 1_000, 1], at_s=10), screen, NAMES, CAPACITY)
    assert [(r.server, r.reason) for r in jump.refusals] == [("s1", "unconfirmed_jump")]
    assert not jump.measurement.measured[0]
    still = vet(measured([9_000, 1_000, 1], at_s=20), jump.screen, NAMES, CAPACITY)
    assert [r.server for r in still.refusals] == ["s1"]  # 10 s later: the window overlaps
    confirmed = vet(measured([9_000, 1_000, 1], at_s=40), still.screen, NAMES, CAPACITY)
    assert confirmed.refusals == () and confirmed.measurement.own_pps[0] == 9_000
    assert confirmed.screen.accepted_pps[0] == 9_000


def test_a_burst_that_leaves_the_window_never_reaches_a_plan():
    screen = vet(measured([1_000, 1_000, 1]), None, NAMES, CAPACITY).screen
    burst = vet(measured([9_000, 1_000, 1], at_s=30), screen, NAMES, CAPACITY)
    gone = vet(measured([1_100, 1_000, 1], at_s=60), burst.screen, NAMES, CAPACITY)
    assert gone.refusals == () and np.isnan(gone.screen.jumped_at[0])
    again = vet(measured([9_000, 1_000, 1], at_s=90), gone.screen, NAMES, CAPACITY)
    assert [r.reason for r in again.refusals] == ["unconfirmed_jump"]  # a new jump starts over


def test_small_rises_first_sightings_and_disabled_jumps_pass():
    screen = vet(measured([1_000, 0, 1]), None, NAMES, CAPACITY).screen
    # s1 x3.5 (below the factor), s2 first seen (no baseline)
    assert vet(measured([3_500, 8_000, 1], at_s=30), screen, NAMES, CAPACITY).refusals == ()
    # x8, but by less than a quarter of the capacity: noise of a quiet server, not a jump
    assert (
        vet(
            measured([2_000, 0, 1], at_s=30),
            vet(measured([250, 0, 1]), None, NAMES, CAPACITY).screen,
            NAMES,
            CAPACITY,
        ).refusals
        == ()
    )
    assert (
        vet(measured([9_000, 0, 1], at_s=30), screen, NAMES, CAPACITY, factor=None).refusals == ()
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e10), min_size=3, max_size=3), st.floats(0, 1e10))
def test_nothing_refused_is_ever_planned_from(before, after):
    """Whatever the numbers: a refused server leaves the measurement, an accepted one keeps
    its value, and no accepted value is above capacity and slack."""
    first = vet(measured(before), None, NAMES, CAPACITY)
    second = vet(measured([after, before[1], before[2]], at_s=5), first.screen, NAMES, CAPACITY)
    for m in (first.measurement, second.measurement):
        bounded = CAPACITY > 0
        assert np.all(m.own_pps[bounded] <= CAPACITY[bounded] * 1.25)
    refused = {r.server for r in second.refusals}
    assert second.measurement.measured[0] == (after > 0 and "s1" not in refused)


def test_steps_under_the_factor_cannot_walk_the_baseline():
    """Issue 41: rises of 3.5x, none a jump against the step before, walked s1 into the plan's
    overload regime. The baseline is the lowest accepted over the last windows: the third step
    is a jump against it, held, and so are the steps after it until a disjoint window."""
    steps = [1_000, 3_500, 12_000, 16_000, 12_400]
    assert all(b / a < 4 for a, b in zip(steps, steps[1:]))  # a per-step rule passes each
    capacity = np.array([20_000.0, 20_000.0, 0.0])
    screen, reasons = None, []
    for k, pps in enumerate(steps):
        vetted = vet(measured([pps, 1_000, 1], at_s=k), screen, NAMES, capacity)
        screen = vetted.screen
        reasons.append([r.reason for r in vetted.refusals if r.server == "s1"])
    assert reasons == [[], [], ["unconfirmed_jump"], ["unconfirmed_jump"], ["unconfirmed_jump"]]
    assert screen.accepted_pps[0] == 3_500  # what s1 is planned from meanwhile
    assert vetted.refusals[0].bound_pps == 1_000  # judged against the baseline, not 3,500


def test_a_confirmed_rise_becomes_the_baseline_and_a_climb_while_held_is_a_new_jump():
    capacity = np.array([2e6, 2e6, 0.0])
    screen = vet(measured([1_000, 1_000, 1]), None, NAMES, capacity).screen
    first = vet(measured([600_000, 1_000, 1], at_s=1), screen, NAMES, capacity)
    assert [r.reason for r in first.refusals] == ["unconfirmed_jump"]
    steady = vet(measured([610_000, 1_000, 1], at_s=31), first.screen, NAMES, capacity)
    assert steady.refusals == () and steady.measurement.own_pps[0] == 610_000  # confirmed
    assert steady.screen.baseline()[0] == 600_000  # the level first seen, which stayed
    assert (
        vet(measured([2_000_000, 1_000, 1], at_s=32), steady.screen, NAMES, capacity).refusals == ()
    )
    # the same first jump, but climbing on while held: confirmed at its first level only
    climbed = vet(measured([2_450_000, 1_000, 1], at_s=31), first.screen, NAMES, capacity)
    ((server, reason, bound),) = [(r.server, r.reason, r.bound_pps) for r in climbed.refusals]
    assert (server, reason, bound) == ("s1", "unconfirmed_jump", 600_000)
    assert (
        climbed.screen.baseline()[0] == 600_000
        and climbed.screen.jumped_at[0] == (T0 + timedelta(seconds=31)).timestamp()
    )


def test_the_baseline_follows_traffic_over_two_windows():
    """A server whose traffic grew slowly is judged against what it carried one to two windows
    ago, not against what it carried at the start."""
    capacity = np.array([1e6, 1e6, 0.0])
    screen = None
    for k, pps in enumerate([1_000, 2_000, 3_000, 5_000, 8_000, 13_000]):
        vetted = vet(measured([pps, 1_000, 1], at_s=30 * k), screen, NAMES, capacity)
        assert vetted.refusals == (), (k, pps)
        screen = vetted.screen
    assert screen.baseline()[0] == 8_000


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(1.0, 2e6)), min_size=2, max_size=12))
def test_within_a_window_nothing_rises_past_the_cumulative_bound(steps):
    """Whatever the sequence, within one window (no confirmation possible) every accepted
    estimate is at most ``max(4 m, m + capacity / 4)``, ``m`` the lowest accepted before it."""
    capacity = np.array([1e6, 1e6, 0.0])
    screen, at, lowest = None, 0.0, None
    for gap, pps in steps:
        at += gap * 2.0  # at most 24 s in all: inside a 30-s window
        vetted = vet(measured([pps, 1_000, 1], at_s=at), screen, NAMES, capacity)
        screen = vetted.screen
        if vetted.measurement.measured[0]:
            if lowest is not None:
                assert pps <= max(4 * lowest, lowest + 250_000)
            lowest = pps if lowest is None else min(lowest, pps)
