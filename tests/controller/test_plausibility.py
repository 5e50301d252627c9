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
