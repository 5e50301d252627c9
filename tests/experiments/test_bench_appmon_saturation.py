"""``bench_appmon_saturation`` end to end at small rates (root, OVS, nginx, wrk, tcpreplay):
each step's frames (whole passes over the recording) all reach both live analysers (the Python
path's and the compiled one's) without a drop, each counts the requests and responses ``appmon
replay`` counts in the same frames (the recording's times the loops), and the records receiver
takes every record (the rates where drops start are docs/results/appmon.md's, measured with
the steps written there)."""

from __future__ import annotations

import re

import pytest

from cosample.lab.appmirror import rig_unavailable
from research import bench_appmon_saturation as bench
from research.bench_appmon_sender import sender_missing

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_small_steps_run_without_drops(capsys):
    reason = rig_unavailable() or sender_missing()
    if reason:
        pytest.skip(reason)
    argv = ["--rates", "5000,10000", "--step-seconds", "1", "--record-rates", "5000"]
    assert bench.main([*argv, "--record-seconds", "1"]) == 0
    out = capsys.readouterr().out
    recorded = re.search(r"^recording .*: (\d+) frames, .* ([\d,]+) responses;", out, re.M)
    frames = re.findall(
        r"^\s+(python|compiled)\s+([\d,]+)\s+[\d,]+\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s"
        r".*\s([\d,]+)\s+(right|WRONG)\s+[\d.]+$",
        out,
        re.M,
    )
    assert [f[:2] for f in frames] == [
        ("python", "5,000"),
        ("compiled", "5,000"),
        ("python", "10,000"),
        ("compiled", "10,000"),
    ]
    recording, responses = int(recorded[1]), int(recorded[2].replace(",", ""))
    for _, offered, passed, drops, analysed, counted, counts in frames:
        loops = bench.loops_for(int(offered.replace(",", "")), 1, recording)
        assert (passed, drops, analysed) == (
            f"{recording * loops:,}",
            "0",
            f"{recording * loops:,}",
        )
        assert (counted, counts) == (f"{responses * loops:,}", "right")
    for path in ("python", "compiled"):
        assert f"live analyser, {path} path (packet ring): no kernel_drops up to" in out
    assert re.search(r"python / compiled CPU per frame, live, at the same rates: .* over 2 ", out)
    assert "counts: in every step without drops, live = replay = recording x loops" in out
    assert "records receiver: no losses up to" in out
