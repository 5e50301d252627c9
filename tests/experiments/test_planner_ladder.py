"""``python -m research.planner_ladder``: the MILP's explicit start rates, side by side."""

from __future__ import annotations

import numpy as np
import pytest

from cosample.planner.applied_milp import DENSE, LADDER
from research import planner_ladder


def test_each_start_finds_the_same_best_plans_and_proves_them(capsys):
    starts = [(4, 11), (DENSE, LADDER), (1, 1)]
    count, totals = planner_ladder.compare([3, 4], range(2), starts)
    assert count == 6  # the testbed and two random data centres per seed
    reference = np.asarray(totals[(4, 11)]["objective"])
    assert np.all(reference > 0)
    for start in starts:
        # every start is lazily refined to the optimum: the same plans, each proved
        assert totals[start]["proved"] == count, (start, totals[start])
        assert np.allclose(totals[start]["objective"], reference, rtol=1e-6)
        assert totals[start]["rounds"] >= count
    # one explicit rate each: the intervals must be split, so more rounds than a dense start
    assert totals[(1, 1)]["rounds"] > totals[(4, 11)]["rounds"]
    planner_ladder.report(count, totals)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("start 4,11: ")
    assert all(f"proved {count} of {count}" in line for line in lines)


def test_a_malformed_start_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        planner_ladder.main(["--start", "4"])
    assert stopped.value.code == 2
    assert "--start '4': expected DENSE,LADDER" in capsys.readouterr().err
