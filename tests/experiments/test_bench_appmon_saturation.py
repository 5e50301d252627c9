"""``bench_appmon_saturation`` end to end at small rates (root, OVS, nginx, wrk): each step's
frames all reach both live analysers (the Python path's and the compiled one's) without a drop,
and the records receiver takes every record (the rates where drops start are docs/results.md's,
measured with the default steps)."""

from __future__ import annotations

import re

import pytest

from cosample.experiments import bench_appmon_saturation as bench
from cosample.lab.appmirror import rig_unavailable

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_small_steps_run_without_drops(capsys):
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    argv = ["--rates", "2000,4000", "--step-seconds", "1", "--record-rates", "5000"]
    assert bench.main([*argv, "--record-seconds", "1"]) == 0
    out = capsys.readouterr().out
    frames = re.findall(
        r"^\s+(python|compiled)\s+([\d,]+)\s+[\d,]+\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s",
        out,
        re.M,
    )
    assert [f[:2] for f in frames] == [
        ("python", "2,000"),
        ("compiled", "2,000"),
        ("python", "4,000"),
        ("compiled", "4,000"),
    ]
    for _, offered, passed, drops, analysed in frames:
        count = int(offered.replace(",", ""))
        assert (passed, drops, analysed) == (f"{count:,}", "0", f"{count:,}")
    for path in ("python", "compiled"):
        assert f"live analyser, {path} path (packet ring): no kernel_drops up to" in out
    assert re.search(r"python / compiled CPU per frame, live, at the same rates: .* over 2 ", out)
    assert "records receiver: no losses up to" in out
