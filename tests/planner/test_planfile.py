"""The plan file is canonical: same input, same content; sFlow rounding never overshoots."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from cosample.planner import solve
from cosample.planner.commands import example_datacentre
from cosample.planner.planbytes import canonical_json, plan_id, write_plan
from cosample.planner.planfile import build_plan
from cosample.planner.realise import sampling_interval

# Any whole second will do; relative to now so nothing here ages (build_plan takes it explicitly).
MOMENT = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=400)


def strip_timing(plan):
    return {**plan, "solver": {**plan["solver"], "seconds": 0}}


def test_same_input_same_bytes():
    dc = example_datacentre()
    first = build_plan(dc, solve(dc), created=MOMENT)
    second = build_plan(example_datacentre(), solve(dc), created=MOMENT)
    assert canonical_json(strip_timing(first)) == canonical_json(strip_timing(second))
    assert first["plan_id"] == plan_id(first)


def test_version_time_and_expiry():
    dc = example_datacentre()
    plan = build_plan(dc, solve(dc), created=MOMENT, valid_for=timedelta(minutes=30))
    assert plan["version"] == int(MOMENT.timestamp())
    for field, expected in (("created", MOMENT), ("expires", MOMENT + timedelta(minutes=30))):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", plan[field])
        assert datetime.fromisoformat(plan[field].replace("Z", "+00:00")) == expected
    assert build_plan(dc, solve(dc), created=MOMENT, version=7)["version"] == 7


def test_different_solution_different_id():
    dc = example_datacentre()
    assert build_plan(dc, solve(dc))["plan_id"] != build_plan(dc, solve(dc, "noncollab"))["plan_id"]


@pytest.mark.parametrize(
    "rate,interval",
    [
        (1.0, 1),
        (0.5, 2),
        (0.25, 4),
        (0.2499, 5),
        (0.25 * (1 - 1e-12), 4),
        (0.0, 0),
        (1e-6, 1000000),
        (1e-10, 0),
        (4.6e-17, 0),
    ],
)
def test_sampling_interval(rate, interval):
    assert sampling_interval(np.array([rate]))[0] == interval


def test_rounding_frees_capacity_that_mirrors_take_back():
    # The reduced LP (HiGHS) leaves senders with local rates that are not 1/N; rounding them
    # down frees capacity the existing pairs take back as mirrored traffic, within capacity.
    dc = example_datacentre()
    plan = build_plan(dc, solve(dc, "reduced", lp_backend="highs"))
    rounded = [
        host
        for host in plan["hosts"].values()
        if host["planned"]["local_rate"] > host["local_rate"] * (1 + 1e-9)
    ]
    assert rounded and any(host["mirrors"] for host in rounded)
    for host in rounded:
        planned = sum(m["rate"] for m in host["planned"]["mirrors"])
        applied = sum(m["rate"] for m in host["mirrors"])
        assert applied >= planned
        assert host["load_pps"] <= host["capacity_pps"] * (1 - host["margin"]) * (1 + 1e-9)
    assert any(
        sum(m["rate"] for m in host["mirrors"])
        > sum(m["rate"] for m in host["planned"]["mirrors"]) * (1 + 1e-9)
        for host in rounded
    )


def test_plan_carries_applied_values_on_top_and_the_optimum_under_planned():
    dc = example_datacentre()
    plan = build_plan(dc, solve(dc, "reduced", lp_backend="highs"))
    for host in plan["hosts"].values():
        if host["sflow_sampling"]:
            assert host["local_rate"] == pytest.approx(1 / host["sflow_sampling"], rel=1e-12)
        else:
            assert host["local_rate"] == 0
        assert sum(m["rate"] for m in host["mirrors"]) <= 1 + 1e-9
        assert [m["to"] for m in host["planned"]["mirrors"]] == [m["to"] for m in host["mirrors"]]


def test_write_is_atomic_and_canonical(tmp_path):
    dc = example_datacentre()
    plan = build_plan(dc, solve(dc))
    path = tmp_path / "plan.json"
    write_plan(plan, path)
    assert path.read_text() == canonical_json(plan)
    assert json.loads(path.read_text()) == plan
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_distinct_packets_account_for_independent_sflow_and_mirrors():
    dc = example_datacentre()
    plan = build_plan(dc, solve(dc, "reduced", lp_backend="highs"))
    expected = 0.0
    for host in plan["hosts"].values():
        local = 1 / host["sflow_sampling"] if host["sflow_sampling"] else 0.0
        mirrored = sum(m["rate"] for m in host["mirrors"])
        expected += host["own_pps"] * (local + mirrored - local * mirrored)
    summary = plan["summary"]
    assert summary["collected_pps"] == pytest.approx(expected, rel=1e-9)
    assert summary["collected_inbound_pps"] == 0.0
    assert summary["samples_pps"] == pytest.approx(
        summary["collected_pps"] + summary["overlap_pps"]
    )


def test_an_overlapping_plan_says_so_and_reports_its_gap():
    # The reduced LP (HiGHS) on the example mixes local and mirrored sampling: its distinct
    # packets fall below its own objective, and the plan states the gap to the bound.
    dc = example_datacentre()
    plan = build_plan(dc, solve(dc, "reduced", lp_backend="highs"))
    summary = plan["summary"]
    assert summary["overlap_pps"] > 0
    assert summary["objective"]["gap"] > 0 and not summary["objective"]["optimal"]
    exact = build_plan(dc, solve(dc))["summary"]
    assert exact["objective"]["optimal"] and exact["overlap_pps"] == pytest.approx(0, abs=1e-3)
    assert exact["collected_pps"] > summary["collected_pps"]
