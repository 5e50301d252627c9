"""The guard's decisions and its ladder, without a host: property tests over random readings,
ladders and loads (agents/guard.py, cosample/plan/guard.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.agents.guard import GuardPolicy, GuardState, Reading, step
from cosample.plan.guard import (
    GuardSpec,
    Rung,
    declared_sampling,
    ladder,
    mirror_scales,
    sampling_ladder,
)

LIMIT = 0.8
POLICY = GuardPolicy(band=0.1, up_after=3)

busy = st.floats(min_value=0.0, max_value=1.5, allow_nan=False)
readings = st.lists(
    st.builds(Reading, busy=busy, drops=st.integers(min_value=0, max_value=3)), max_size=80
)


def run(readings, last, limit=LIMIT, policy=POLICY):
    """Every state the guard goes through, from a fresh one."""
    state, states = GuardState(), []
    for reading in readings:
        state = step(state, reading, last, limit, policy)
        states.append(state)
    return states


# the ladder ------------------------------------------------------------------------------
def test_ladder_sheds_mirrors_first_then_doubles_n_to_the_floor():
    guard = GuardSpec(floor_sampling=48, floor_mirror_share=0.0, limit=0.9)
    assert ladder(4, True, guard) == (
        Rung(4, 1.0),
        Rung(4, 0.5),
        Rung(4, 0.25),
        Rung(4, 0.125),
        Rung(4, 0.0),
        Rung(8, 0.0),
        Rung(16, 0.0),
        Rung(32, 0.0),
        Rung(48, 0.0),
    )
    assert ladder(4, False, guard) == tuple(Rung(n, 1.0) for n in (4, 8, 16, 32, 48))
    assert declared_sampling(4, guard) == {4, 8, 16, 32, 48}


def test_no_guard_entry_no_room():
    assert ladder(8, True, None) == (Rung(8, 1.0),)
    assert declared_sampling(8, None) == {8}
    assert declared_sampling(None, None) == frozenset()


def test_a_floor_below_the_plan_leaves_no_sampling_room():
    # a transition's first phase may sample more sparsely than the floor NEW's entry names
    guard = GuardSpec(floor_sampling=16, floor_mirror_share=1.0, limit=0.9)
    assert sampling_ladder(64, 16) == (64,)
    assert ladder(64, True, guard) == (Rung(64, 1.0),)


@given(
    n=st.one_of(st.none(), st.integers(min_value=1, max_value=2**20)),
    floor=st.integers(min_value=1, max_value=2**32 - 1),
    share=st.floats(min_value=0.0, max_value=1.0),
    mirrors=st.booleans(),
)
def test_every_rung_lies_between_plan_and_floor(n, floor, share, mirrors):
    guard = GuardSpec(floor_sampling=floor, floor_mirror_share=share, limit=0.5)
    rungs = ladder(n, mirrors, guard)
    assert rungs[0] == Rung(n, 1.0)
    for rung in rungs:
        if n is None:
            assert rung.sampling is None
        else:
            assert n <= rung.sampling <= max(n, floor)
        assert (share if mirrors else 1.0) <= rung.mirror_scale <= 1.0
    if n is not None:
        assert rungs[-1].sampling == max(n, floor)
    assert rungs[-1].mirror_scale == (min(share, 1.0) if mirrors else 1.0)
    # each rung monitors less than the one before, in exactly one respect
    for upper, lower in zip(rungs, rungs[1:]):
        assert (lower.sampling or 0) >= (upper.sampling or 0)
        assert lower.mirror_scale <= upper.mirror_scale
        assert (lower.sampling != upper.sampling) != (lower.mirror_scale != upper.mirror_scale)
    assert {r.sampling for r in rungs if r.sampling} == declared_sampling(n, guard)
    assert mirror_scales(share)[0] == 1.0


# the decisions ---------------------------------------------------------------------------
@settings(max_examples=300)
@given(readings=readings, last=st.integers(min_value=0, max_value=20))
def test_never_below_the_floor_never_above_the_plan(readings, last):
    for state in run(readings, last):
        assert 0 <= state.rung <= last


@settings(max_examples=300)
@given(readings=readings, last=st.integers(min_value=1, max_value=20))
def test_hysteresis(readings, last):
    """Down only on a reading over the limit (or with drops); up only after ``up_after``
    readings in a row below ``limit - band``, one rung at a time; never in the band."""
    before, below = GuardState(), 0
    for reading, state in zip(readings, run(readings, last)):
        over = reading.busy > LIMIT or reading.drops > 0
        calm = not over and reading.busy < LIMIT - POLICY.band
        below = below + 1 if calm else 0
        if state.rung > before.rung:
            assert over
        if state.rung < before.rung:
            assert calm and below >= POLICY.up_after
            assert state.rung == before.rung - 1
            below = 0  # a step up starts the count again
        if not over and not calm:
            assert state.rung == before.rung
        before = state


@settings(max_examples=300)
@given(
    base=st.floats(min_value=0.0, max_value=1.2),
    costs=st.lists(st.floats(min_value=0.0, max_value=0.3), min_size=1, max_size=15),
    ticks=st.integers(min_value=1, max_value=200),
)
def test_no_oscillation_on_a_constant_load(base, costs, ticks):
    """A load that does not change: the host is as busy on each rung as its monitoring there
    costs (less on every rung further down). The guard may step down, never back up."""
    last = len(costs)
    remaining = [sum(costs[r:]) for r in range(last + 1)]  # monitoring cost on rung r
    state, rungs = GuardState(), []
    for _ in range(ticks):
        state = step(state, Reading(base + remaining[state.rung]), last, LIMIT, POLICY)
        rungs.append(state.rung)
    assert rungs == sorted(rungs)
    # and it went exactly as far as needed: the first rung at or below the limit, or the floor
    # (strides may overshoot by at most what the last jump skipped)
    final = rungs[-1]
    if base + remaining[0] <= LIMIT:
        assert final == 0
    elif ticks >= 2 * last + 2:
        assert base + remaining[final] <= LIMIT or final == last


@given(drop=st.floats(min_value=0.2, max_value=1.0))
def test_climbs_back_to_the_plan_once_the_overload_passes(drop):
    """A hog takes ``drop`` of the host while it runs; after it stops the guard returns to the
    plan, one rung per ``up_after`` calm readings (and stays there)."""
    costs = [0.05] * 6
    remaining = [sum(costs[r:]) for r in range(7)]
    state, rungs = GuardState(), []
    for tick in range(200):
        load = 0.35 + (drop if 10 <= tick < 40 else 0.0)
        state = step(state, Reading(load + remaining[state.rung]), 6, LIMIT, POLICY)
        rungs.append(state.rung)
    assert max(rungs[10:40]) > 0
    assert rungs[-1] == 0
    assert rungs[100:] == [0] * 100


def test_strides_double_while_over():
    states = run([Reading(1.0)] * 4, last=20)
    assert [s.rung for s in states] == [1, 3, 7, 15]
    # a reading in the band resets the stride
    states = run([Reading(1.0), Reading(0.75), Reading(1.0)], last=20)
    assert [s.rung for s in states] == [1, 1, 2]


def test_drops_alone_step_down():
    assert run([Reading(0.1, drops=5)], last=3)[0].rung == 1


@pytest.mark.parametrize("last", [0, 1])
def test_at_the_floor_it_stays(last):
    states = run([Reading(1.0)] * 5, last=last)
    assert {s.rung for s in states} == {last}
