"""research/slow_peers.py on this tree alone, briefly: a row per scenario, the drip answered."""

from __future__ import annotations

import re

from research.slow_peers import main


def test_every_scenario_prints_its_peak_and_the_drip_is_answered(capsys):
    assert main(["--seconds", "4", "--max-plan-mib", "16", "--drippers", "64"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if " | this tree | " in line]
    assert [row.split(" | ")[0][2:] for row in rows] == [
        "controller-endless-snapshot",
        "collector-endless-plan",
        "collector-drip",
    ]
    for row in rows:
        assert re.search(r"\| this tree \| [\d,]+ MB", row), row
    answered = re.search(r"answered (\d+) of (\d+)", rows[-1])
    assert answered and answered[1] == answered[2] and int(answered[2]) >= 3, rows[-1]
