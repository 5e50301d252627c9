"""bench_hostjson at a small size: the compiled writer, the Python one and a git revision's
(``--baseline``) write the same host table, and every column is printed (no timing is
asserted)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cosample.planner import hostjson, jsonpieces
from research import bench_hostjson

ROOT = Path(__file__).resolve().parents[2]


def _revision() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def test_every_writer_writes_the_same_table():
    row = bench_hostjson.measure(300, repeats=1)
    assert row["same_bytes"] and row["servers"] == 300 and row["table_mb"] > 0
    assert jsonpieces.compiled is not None  # restored after the Python path's rounds


def test_a_revisions_writer_is_timed_beside(capsys):
    revision = _revision()
    if revision is None:
        pytest.skip("not a git checkout: --baseline reads the revision with git show")
    assert bench_hostjson.main(["--sizes", "200", "--repeats", "1", "--baseline", revision]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert "baseline/compiled" in header
    assert line.split()[0] == "200" and line.split()[-2] == "True"  # the same bytes
    baseline = bench_hostjson.baseline(revision)
    assert baseline.__file__ == f"{revision}:planner/planfile.py"
    assert baseline.hostjson is not hostjson  # that revision's writer, not this one
