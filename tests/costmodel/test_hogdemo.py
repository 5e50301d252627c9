"""The documented hog demo (docs/costmodel.md): ``calibrate --passive --testbed`` estimates the
one-host testbed's capacity under a constant load, a CPU hog in its budget from ``--hog-at``."""

from __future__ import annotations

import pandas as pd
import pytest
from costmodel_leftovers import leftovers

from cosample.cli import main
from cosample.costmodel.onehost import one_host_testbed_unavailable

REASON = one_host_testbed_unavailable()
PREFIX = "ccH"


@pytest.mark.root
@pytest.mark.ovs
@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"hog demo: {REASON}")
def test_the_hog_demo_marks_the_intervals_with_the_hog(tmp_path):
    data = tmp_path / "hog.csv"
    code = main(
        ["calibrate", "--passive", "--testbed", "--count", "3", "--hog-at", "2", "--interval",
         "1", "--cpu-budget", "1", "-d", str(data), "--prefix", PREFIX, "--offered-pps", "2000"]
    )  # fmt: skip
    assert code == 0
    frame = pd.read_csv(data)
    assert frame["interval"].tolist() == [0, 1, 2]
    assert frame["hog"].tolist() == [False, False, True]  # the hog from the third interval on
    assert (frame["budget_cpus"] == 1).all() and (frame["forwarding_cpus"] > 0).all()
    assert not leftovers(PREFIX)
