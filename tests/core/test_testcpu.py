"""The suite's per-test CPU records (tests/testcpu.py): one line per test when asked, none
otherwise, and a summary by group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nested_pytest import run_pytest

TESTS = Path(__file__).resolve().parents[1]
SAMPLE = """\
import gc, subprocess, sys

def test_computes():
    sum(range(200_000))
    gc.collect()

def test_starts_a_child():
    subprocess.run([sys.executable, "-c", "sum(range(200_000))"], check=True)
"""


def _pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """pytest with the plugin on SAMPLE, COSAMPLE_TEST_CPU as ``env`` says (absent if not)."""
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    return run_pytest(
        ["-p", "testcpu", "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
        tmp_path,
        {"PYTHONPATH": str(TESTS), **env},
        drop=("COSAMPLE_TEST_CPU",),
    )


def test_each_test_gets_one_line_and_the_summary_adds_them(tmp_path):
    prefix = tmp_path / "cpu"
    done = _pytest(tmp_path, COSAMPLE_TEST_CPU=str(prefix))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "cpu.main").read_text().splitlines()
    fields = [line.split("\t") for line in lines]
    assert [f[4].rsplit("::", 1)[1] for f in fields] == ["test_computes", "test_starts_a_child"]
    assert all(f[3] == "-" and all(float(x) >= 0 for x in (*f[:3], f[5])) for f in fields)
    assert float(fields[1][1]) > 0  # the child's CPU, reaped within the test
    assert float(fields[0][5]) > 0  # the full collection the first test asked for
    shown = subprocess.run(
        [sys.executable, str(TESTS / "testcpu.py"), str(prefix)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1].startswith("-\t2\t")
    assert "test_starts_a_child" in shown.stdout


def test_nothing_is_recorded_unless_asked(tmp_path):
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.glob("cpu*")) and not list(tmp_path.glob("*.main"))
    missing = subprocess.run(
        [sys.executable, str(TESTS / "testcpu.py"), str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no records under" in missing.stderr
