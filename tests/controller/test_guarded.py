"""The controller and hosts whose guard backs off (controller/guarded.py): the load a host
sustained on its guard's rung, the capacity it is then planned with, for how long, and the
plan that follows."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import numpy as np
import pytest
from controller_helpers import inventory_doc, iso, snapshot_doc

from cosample.controller.evaluate import PlanShares, evaluate
from cosample.controller.guarded import sustained_load, update
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings
from cosample.plan.document import parse_document

NOW = datetime.now(timezone.utc).replace(microsecond=0)
BUSY_S1 = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}
INDEX = {"s": 0, "r": 1}
#: sender s: 1-in-8, half its traffic mirrored to r (1-in-1)
SHARES = PlanShares(1, "p", np.array([1 / 8, 1.0]), np.array([0]), np.array([1]), np.array([0.5]))
OWN, FORWARDING = np.array([1000.0, 100.0]), np.array([1000.0, 100.0])
ALPHA, BETA = np.array([1.5, 1.5]), np.array([0.5, 0.5])


def entry(sampling, scale):
    return SimpleNamespace(sflow_sampling=sampling, mirror_scale=scale)


def test_load_on_the_plan_is_the_evaluation():
    load = sustained_load(SHARES, {}, INDEX, OWN, FORWARDING, ALPHA, BETA)
    expected = evaluate(SHARES, OWN, FORWARDING, np.ones(2), ALPHA, BETA).load_pps
    np.testing.assert_allclose(load, expected)


def test_load_on_a_rung():
    # s at 1-in-32 with its mirror at a quarter: 1000 + 1.5*1000/32 + 0.5*125 = 1109.375;
    # r receives 125 copies and samples them all: 100 + 1.5*100 + (0.5 + 1.5)*125 = 500
    load = sustained_load(SHARES, {"s": entry(32, 0.25)}, INDEX, OWN, FORWARDING, ALPHA, BETA)
    np.testing.assert_allclose(load, [1109.375, 500.0])
    # r at 1-in-4 samples a quarter of what it receives (500 copies) and of its own
    load = sustained_load(SHARES, {"r": entry(4, 1.0)}, INDEX, OWN, FORWARDING, ALPHA, BETA)
    np.testing.assert_allclose(load[1], 100 + 1.5 * 100 / 4 + 0.5 * 500 + 1.5 * 500 / 4)


def test_derated_while_seen_then_back_after_the_hold():
    capacity = np.array([2000.0, 2000.0])
    load = np.array([1200.0, 500.0])
    limit = np.array([0.8, 0.8])
    first = update(None, capacity, {"s": entry(32, 0.0)}, load, INDEX, limit, 100.0, 60.0)
    assert first.capacity_pps[0] == pytest.approx(1500.0) and first.until[0] == 160.0
    assert first.capacity_pps[1] == 2000.0 and not first.derated()[1]
    # seen again on a lighter load: the smaller capacity stays; not seen: held, then back
    again = update(first, capacity, {"s": entry(64, 0.0)}, load * 0.5, INDEX, limit, 130.0, 60.0)
    assert again.capacity_pps[0] == pytest.approx(750.0) and again.until[0] == 190.0
    held = update(again, capacity, {}, None, INDEX, limit, 180.0, 60.0)
    assert held.capacity_pps[0] == pytest.approx(750.0)
    back = update(held, capacity, {}, None, INDEX, limit, 190.0, 60.0)
    assert back.capacity_pps[0] == 2000.0 and not back.derated().any()
    # never above the inventory's; entries about another plan teach nothing
    high = update(None, capacity, {"s": entry(32, 0.0)}, load * 10, INDEX, limit, 0.0, 60.0)
    assert high.capacity_pps[0] == 2000.0
    assert (
        not update(None, capacity, {"s": entry(32, 0.0)}, None, INDEX, limit, 0, 60).derated().any()
    )


def test_a_host_backing_off_gets_a_plan_that_fits_it(tmp_path, caplog):
    """s1 runs below its plan (its guard shed its mirrors and samples 4x sparser): the plan in
    force is judged against the capacity that shows, and the next plan fits it."""
    snapshot = tmp_path / "snapshot.json"
    inventory = inventory_from_dict(inventory_doc([3000, 3000, 3000]))
    settings = Settings((str(snapshot),), interval_s=30, tau_s=30.0, settle_s=60, guard_hold_s=300)
    clock = [NOW]
    controller = Controller(
        inventory,
        settings,
        DirectoryTarget(tmp_path / "pub"),
        tmp_path / "state",
        clock=lambda: clock[0],
    )

    def cycle(guard=None, version=None):
        doc = snapshot_doc(clock[0], BUSY_S1, servers=["s1", "s2", "s3"])
        if version is not None:
            doc["plan"] = {"version": version, "plan_id": "x" * 64}
        if guard:
            doc["guard"] = guard
        snapshot.write_text(json.dumps(doc))
        status = controller.cycle()
        clock[0] += timedelta(seconds=30)
        return status

    first = cycle()
    before = json.loads((tmp_path / "state" / "current-report.json").read_bytes())
    plan = parse_document((tmp_path / "pub" / "plan.json").read_bytes())[-1]
    s1 = plan.hosts["s1"]
    assert first.result == "published" and s1.mirrors  # s1 mirrors: it cannot sample it all
    for _ in range(2):
        assert cycle(version=plan.version).result == "kept"
    rung = {
        "rung": 9,
        "sflow_sampling": (s1.sflow_sampling or 1) * 4,
        "mirror_scale": 0.0,
        "since": iso(clock[0]),
        "busy": 0.97,
    }
    status = cycle({"s1": rung}, version=plan.version)
    assert [d["server"] for d in status.derated] == ["s1"]
    assert status.derated[0]["capacity_pps"] < 3000
    assert "s1 backs off (its guard)" in caplog.text
    assert status.result == "published" and "s1" in status.over_limit
    newer = parse_document((tmp_path / "pub" / "plan.json").read_bytes())[-1]
    report = json.loads((tmp_path / "state" / "current-report.json").read_bytes())
    k = report["names"].index("s1")
    # the new plan loads s1 less, and no more than the capacity it showed (the planner's own
    # margin in), unless its forwarding alone is more (then it monitors nothing but the floor)
    assert report["load_pps"][k] < before["load_pps"][k]
    fits = max(report["forwarding_pps"][k], status.derated[0]["capacity_pps"] * (1 - 0.15))
    assert report["load_pps"][k] <= fits * 1.001
    assert newer.version > plan.version
    # a hold later, with no back-off seen, s1 is planned with its inventory capacity again
    for _ in range(11):
        status = cycle(version=newer.version)
    assert status.derated == ()
