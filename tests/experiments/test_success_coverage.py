"""The success-interval coverage experiment runs and prints both intervals side by side."""

from __future__ import annotations

import re

from research.success_coverage import main


def test_it_prints_each_row_and_the_summary(capsys):
    assert main(["--trials", "20", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[1:] if ":" not in line]
    assert len(rows) > 300 and all(len(row) == 8 for row in rows)
    (summary,) = [line for line in out.splitlines() if line.startswith("all rows")]
    level, naive = map(float, re.findall(r"median (\d\.\d+)", summary))
    assert level > naive  # clustered failures: the per-request interval is too narrow
