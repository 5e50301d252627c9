"""bench_guard_signals at a few readings: every signal measured against a private OVS, the
table printed (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import pytest

from cosample.agents.headroom import SIGNALS
from cosample.experiments import bench_guard_signals
from cosample.lab.ovs import ovs_available


def test_every_signal_is_read_and_timed(capsys):
    reason = ovs_available()
    if reason:
        pytest.skip(reason)
    assert bench_guard_signals.main(["--reads", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {
        line.split("|")[1].strip(): line
        for line in lines
        if line.startswith("| ") and "signal" not in line
    }
    assert set(rows) == set(SIGNALS)
    for line in rows.values():
        cpu, wall = (float(cell) for cell in line.strip("|").split("|")[1:3])
        assert cpu >= 0 and wall > 0
