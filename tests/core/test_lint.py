"""The habits a tool checks: ruff's lint rules (pyproject.toml, ``[tool.ruff]``) and its format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_ruff_finds_nothing():
    result = ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_is_formatted_as_ruff_formats_it():
    result = ruff("format", "--no-cache", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "source,rule",
    [("import os\n", "F401"), ("import sys\nimport os\n\nos, sys\n", "I001")],
)
def test_the_check_can_fail(tmp_path, source, rule):
    """The rules are live: an unused import and unsorted imports are reported."""
    (tmp_path / "bad.py").write_text(source)
    result = ruff("check", "--no-cache", "--output-format", "concise", str(tmp_path / "bad.py"))
    assert result.returncode == 1 and rule in result.stdout
