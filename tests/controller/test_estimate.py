"""Snapshots to a traffic matrix: counters win for totals, samples give the structure."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from controller_helpers import inventory_doc, snapshot_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector.snapshot import parse_snapshot
from cosample.controller.errors import SnapshotError
from cosample.controller.estimate import measure
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.smoothing import update, weight

NOW = datetime.now(timezone.utc).replace(microsecond=0)
INVENTORY = inventory_from_dict(inventory_doc([5000, 5000, 5000]))


def snap(traffic, **kwargs):
    return parse_snapshot(json.dumps(snapshot_doc(kwargs.pop("time", NOW), traffic, **kwargs)))


def dense(m, n=3):
    out = np.zeros((n, n))
    out[m.traffic_src, m.traffic_dst] = m.traffic_pps
    return out


def test_samples_alone_give_the_matrix():
    m = measure(snap({"s1": {"s1": 100, "s2": 300}, "s3": {"s1": 50}}), INVENTORY)
    assert dense(m).tolist() == [[100, 300, 0], [0, 0, 0], [50, 0, 0]]
    assert m.measured.tolist() == [True, True, True]
    assert not m.from_counters.any()


def test_samples_win_and_counters_are_the_cross_check():
    # the sampled estimate says s1 sends 400 pps; its VM ports' counter rate says 800
    m = measure(
        snap({"s1": {"s1": 100, "s2": 300}}, servers=["s1", "s2"], counters={"s1": 800}), INVENTORY
    )
    assert dense(m)[0].tolist() == [100, 300, 0]
    assert m.own_pps[0] == 400 and not m.from_counters.any()
    (disagreement,) = m.disagreements
    assert disagreement.server == "s1" and disagreement.counters_pps == 800
    agreeing = measure(
        snap({"s1": {"s1": 100, "s2": 300}}, servers=["s1"], counters={"s1": 410}), INVENTORY
    )
    assert agreeing.disagreements == ()


def test_counters_fill_in_a_server_without_samples():
    document = snapshot_doc(
        NOW,
        {"s1": {"s2": 300}},
        servers=["s1", "s3"],
        counters={"s3": 250},
        rows={"s3": {"packets_per_s": 0.0, "packets_per_s_ci95": [0.0, 0.0]}},
    )
    m = measure(parse_snapshot(json.dumps(document)), INVENTORY)
    assert dense(m)[2].tolist() == [0, 0, 250]
    assert m.from_counters.tolist() == [False, False, True]


def test_traffic_to_unknown_destinations_stays_on_the_diagonal():
    document = snapshot_doc(
        NOW,
        {"s1": {"s2": 100}},
        rows={  # 150 pps left the data centre
            "s1": {"packets_per_s": 250.0, "packets_per_s_ci95": [240.0, 260.0]}
        },
    )
    m = measure(parse_snapshot(json.dumps(document)), INVENTORY)
    assert dense(m)[0].tolist() == [150, 100, 0]


def test_a_total_below_the_mapped_rows_shrinks_them():
    document = snapshot_doc(
        NOW,
        {"s1": {"s2": 300, "s3": 100}},
        servers=["s1"],
        rows={"s1": {"packets_per_s": 200.0, "packets_per_s_ci95": [190.0, 210.0]}},
    )
    m = measure(parse_snapshot(json.dumps(document)), INVENTORY)
    assert dense(m)[0].tolist() == [0, 150, 50]


@pytest.mark.parametrize(
    "traffic, servers, field",
    [
        ({"s1": {"s9": 5}}, ["s1"], r"traffic_pps\.names\[1\]"),
        ({"s9": {"s1": 5}}, ["s1"], r"traffic_pps\.names\[1\]"),
        ({"s1": {"s1": 5}}, ["s1", "s7"], r"servers\.name\[1\]"),
    ],
)
def test_servers_unknown_to_the_inventory_are_an_error(traffic, servers, field):
    document = snapshot_doc(NOW, traffic, servers=servers, matrix=traffic)
    with pytest.raises(SnapshotError, match=f"c1: {field}: server .* not in the inventory"):
        measure(parse_snapshot(json.dumps(document)), INVENTORY, source="c1")


def test_ewma_weight_and_step_response():
    assert weight(30, 90) == pytest.approx(1 - np.exp(-1 / 3))
    state = update(None, measure(snap({"s1": {"s1": 1000}}), INVENTORY), tau_s=90)
    for k in range(1, 4):  # warm-up: a running mean
        state = update(
            state,
            measure(snap({"s1": {"s1": 1000}}, time=NOW + timedelta(seconds=30 * k)), INVENTORY),
            tau_s=90,
        )
    assert state.pps.tolist() == [1000]
    for k in range(4, 4 + 9):  # a step to 2000 for 3 tau: 95 % of the way
        state = update(
            state,
            measure(snap({"s1": {"s1": 2000}}, time=NOW + timedelta(seconds=30 * k)), INVENTORY),
            tau_s=90,
        )
    assert 1940 < state.pps[0] < 1960


def test_silent_servers_are_held_and_old_snapshots_ignored():
    first = update(None, measure(snap({"s1": {"s2": 1000}, "s2": {"s2": 10}}), INVENTORY), 90)
    later = measure(
        snap({"s2": {"s2": 10}}, servers=["s2"], time=NOW + timedelta(seconds=30)), INVENTORY
    )
    held = update(first, later, 90)
    assert dict(zip(held.keys.tolist(), held.pps.tolist()))[1] == 1000  # s1 -> s2 held
    assert held.seen.tolist() == [True, True, False]
    assert update(held, later, 90) is held


def test_rises_followed_at_once_falls_smoothed():
    state = update(None, measure(snap({"s1": {"s1": 1000}}), INVENTORY), tau_s=90, rise_tau_s=0)
    for k in range(1, 4):
        state = update(
            state,
            measure(snap({"s1": {"s1": 1000}}, time=NOW + timedelta(seconds=30 * k)), INVENTORY),
            tau_s=90,
            rise_tau_s=0,
        )
    up = update(
        state,
        measure(snap({"s1": {"s1": 1500}}, time=NOW + timedelta(seconds=120)), INVENTORY),
        tau_s=90,
        rise_tau_s=0,
    )
    assert up.pps.tolist() == [1500]
    down = update(
        up,
        measure(snap({"s1": {"s1": 1000}}, time=NOW + timedelta(seconds=150)), INVENTORY),
        tau_s=90,
        rise_tau_s=0,
    )
    assert down.pps[0] == pytest.approx(1500 - 500 * weight(30, 90))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.floats(0.1, 1e6)), max_size=40),
    st.lists(st.tuples(st.integers(0, 11), st.floats(0.1, 1e6)), max_size=12),
)
def test_merging_into_a_sorted_matrix_equals_sorting_it(n, entries, diagonal):
    """``_combine``'s merge of the appended entries into an already sorted matrix gives what
    sorting all of them gives (and unsorted input takes the sort)."""
    from cosample.controller.estimate import _combine

    head = {}
    for src, dst, pps in entries:
        if src < n and dst < n:
            head[src * n + dst] = pps
    keys = np.asarray(sorted(head), dtype=np.int64)
    local = np.asarray(sorted({i for i, _ in diagonal if i < n}), dtype=np.int64)
    rest = np.asarray([dict(diagonal)[i] for i in local.tolist()], dtype=float)
    src = np.concatenate((keys // n, local))
    dst = np.concatenate((keys % n, local))
    pps = np.concatenate((np.asarray([head[k] for k in keys.tolist()], dtype=float), rest))
    merged = _combine(src, dst, pps, n, sorted_up_to=keys.size)
    reference = _combine(src, dst, pps, n)
    for a, b in zip(merged, reference):
        assert np.array_equal(a, b) if a.dtype.kind == "i" else np.allclose(a, b, rtol=1e-12)
    shuffled = np.random.default_rng(n).permutation(src.size)
    again = _combine(src[shuffled], dst[shuffled], pps[shuffled], n, sorted_up_to=src.size)
    for a, b in zip(again, reference):
        assert np.allclose(a, b, rtol=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.integers(0, 400), max_size=30),
    st.sets(st.integers(0, 400), max_size=30),
    st.sampled_from(["same", "apart", "a few moved"]),
)
def test_the_pairs_of_two_cycles_matched_as_by_a_dict(before, now, how):
    """``pairkeys.matched``: every pair of either cycle in order, with each cycle's value on it
    or 0; the same pairs taken as they are, pairs drawn apart, and a few added and removed."""
    from cosample.controller.pairkeys import matched

    if how == "same":
        now = set(before)
    elif how == "a few moved":
        now = (set(before) - set(sorted(now)[:2])) | set(sorted(now)[-3:])
    keys_before = np.asarray(sorted(before), dtype=np.int64)
    keys_now = np.asarray(sorted(now), dtype=np.int64)
    values_before = np.arange(1, keys_before.size + 1, dtype=float)
    values_now = np.arange(1, keys_now.size + 1, dtype=float) * 10
    keys, old, new = matched(keys_before, values_before, keys_now, values_now)
    was = dict(zip(keys_before.tolist(), values_before.tolist()))
    is_ = dict(zip(keys_now.tolist(), values_now.tolist()))
    assert keys.tolist() == sorted(set(was) | set(is_))
    assert old.tolist() == [was.get(k, 0.0) for k in keys.tolist()]
    assert new.tolist() == [is_.get(k, 0.0) for k in keys.tolist()]
