"""``python -m research.planner_applied``: every plan as applied, and the brute force."""

from __future__ import annotations

import numpy as np

from research import planner_applied


def test_the_comparison_runs_and_the_exact_plan_is_never_below_a_rival(capsys):
    status = planner_applied.main(["--seeds", "3", "--sizes", "3", "5", "--brute-force-up-to", "3"])
    out = capsys.readouterr().out
    assert status == 0, out
    table = planner_applied.compare([3], range(3), 0.0, brute_force_up_to=3)
    brute = table[planner_applied.BRUTE]
    assert brute.notna().all()
    exact = table[planner_applied.EXACT_APPLIED]
    assert np.all(exact >= brute * (1 - 1e-7))  # N <= 32: the exact plan reaches it
    assert np.all(table[planner_applied.SPLIT] <= brute * (1 + 1e-9))
    assert "vs brute force N <= 32 (3 data centres of [3] servers)" in out
    assert "said optimal while below it: 0" in out.split("exact as applied", 2)[-1]
