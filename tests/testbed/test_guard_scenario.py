"""``testbed run --scenario guard``: what its report computes (pure, on made-up rows), its
options refused with one line, and, as root, one short round trip on a real testbed: the
guarded host steps down under the hog and its collector hears of it, the other does not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cosample.cli import main
from cosample.experiments.testbed import build, guard_report, guardrun

SETTINGS = {**guardrun.GuardSettings(before_s=3, hog_s=6, after_s=3, window_s=2).__dict__}


def _rows(losses: list[float], rungs: list[int], estimates=None):
    rows = []
    total = 0
    for k, (loss, rung) in enumerate(zip(losses, rungs)):
        total += 100
        entry = {
            "sent": 100,
            "taken": 100,
            "delivered": round(100 * (1 - loss)),
            "rung": rung,
            "busy": 0.95,
            "taken_total": total,
        }
        if estimates is not None:
            entry["estimate"] = estimates[k]
            entry["window_s"] = 2.0
        rows.append(
            {"t": k + 1.0, "wall": 1000.0 + k + 1, "snapshot_time": 1000.0 + k + 1, "a": entry}
        )
    return rows


def test_relief_is_three_good_seconds_in_a_row():
    seconds = [(t, {"sent": 100, "delivered": d}) for t, d in enumerate([50, 60, 100, 100, 100])]
    assert guard_report.relief_time([(t + 1.0, e) for t, e in seconds]) == 2.0
    never = [(t + 1.0, {"sent": 100, "delivered": 90}) for t in range(5)]
    assert guard_report.relief_time(never) is None
    unhurt = [(t + 1.0, {"sent": 100, "delivered": 100}) for t in range(5)]
    assert guard_report.relief_time(unhurt) == 0.0


def test_server_rows_from_a_round():
    losses = [0, 0, 0, 0.5, 0.4, 0, 0, 0, 0, 0, 0, 0]
    rungs = [0, 0, 0, 1, 3, 3, 3, 3, 3, 2, 1, 0]
    estimates = [[100, 95, 105]] * 12
    estimates[5] = [60, 55, 65]  # one estimate off while rates change
    result = {
        "settings": SETTINGS,
        "rounds": [{"round": 1, "guarded": "a", "rows": _rows(losses, rungs, estimates)}],
    }
    (row,) = guard_report.server_rows(result)
    assert row["guard"] == "on" and row["before_loss"] == 0.0
    assert row["hog_lost"] == 90 and row["hog_sent"] == 600
    assert row["relief_s"] == 2.0 and row["first_step_s"] == 1.0 and row["max_rung"] == 3
    assert row["back_on_plan_s"] == 3.0
    # a whole window (2 s, and the 1 s a sample may take to arrive) lies in the run from the
    # fourth row on: 9 checked, one outside
    assert (row["estimates_checked"], row["estimates_inside"]) == (9, 8)
    assert row["step_estimates_inside"] == row["step_estimates_checked"] - 1
    text = guard_report.markdown(result, "cosample testbed run --scenario guard")
    assert "| 1 | a | on | 0.00% | 15.00% | 90 of 600 | 2 | 1 | 3 | 3 |" in text
    assert row["median_error"] == 0.0


def test_the_description_plans_the_sampling_asked_with_the_floors():
    from cosample.experiments.testbed.topology import from_config, skewed_config

    topology = from_config(skewed_config(2, 2, 2400, 0.5, 3000), prefix="gtt")
    settings = guardrun.GuardSettings(pps=500, floor_sampling=64, limit=0.9)
    document = guardrun.description(topology, settings)
    from cosample.planner import solve
    from cosample.planner.datacentre import DataCentre
    from cosample.planner.planfile import build_plan

    dc = DataCentre.from_dict(document)
    plan = build_plan(dc, solve(dc))
    for name in ("s1", "s2"):
        assert plan["hosts"][name]["sflow_sampling"] == settings.sampling
        assert plan["hosts"][name]["guard"]["floor_sampling"] == 64
    assert plan["summary"]["guard"]["servers"] == 2


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--guard-pps", "10", "--guard-pps: must be >= 100, got 10"),
        ("--budget-cpus", "0", "--budget-cpus: must be >= 0.1, got 0"),
        ("--hog-seconds", "3", "--hog-seconds: must be >= 10, got 3"),
    ],
)
def test_bad_options_are_one_line(tmp_path, capsys, option, value, message):
    argv = ["testbed", "run", "--scenario", "guard", "--state-dir", str(tmp_path), option, value]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"cosample: error: {message}"


@pytest.mark.root
@pytest.mark.slow
def test_a_short_guard_round_on_a_real_testbed(tmp_path):
    reason = build.requirements() or guardrun.requirements()
    if reason:
        pytest.skip(reason)
    state, out = tmp_path / "state", tmp_path / "out"
    prefix = f"gq{__import__('os').getpid() % 1000}"
    assert (
        main(["testbed", "up", "--prefix", prefix, "--state-dir", str(state), "--servers", "2"])
        == 0
    )
    try:
        testbed = build.Testbed.load(state)
        # a small budget: three hogs leave ovs-vswitchd a quarter of it, far less than it needs
        # (one hog left it half, busy near the 0.9 limit: the step came late or not at all)
        settings = guardrun.GuardSettings(
            pps=4000, budget_cpus=0.3, before_s=4, hog_s=12, after_s=4, rounds=1, window_s=4, hogs=3
        )
        result = guardrun.run_guard(testbed, settings, out, log=lambda line: None)
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "cosample", "testbed", "down", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    (round_,) = result["rounds"]
    rows = round_["rows"]
    guarded = [row["s1"] for row in rows if row["hog"]]
    other = [row["s2"] for row in rows]
    assert max(entry["rung"] or 0 for entry in guarded) > 0  # the guard stepped down
    assert all(not entry["rung"] for entry in other)  # the other one has no guard
    # the collector heard the guarded host leave its plan (its report, from its agent address)
    assert any(entry.get("reported_rung") for entry in (row["s1"] for row in rows))
    json.dumps(result)  # what the scenario writes
