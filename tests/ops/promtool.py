"""Prometheus's own tools for the operations tests: ``promtool`` and the server (Debian package
``prometheus``, installed by bin/bootstrap.sh in full mode); a test skips with the reason when
they are missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "cosample-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "cosample-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "cosample.json"
OPERATIONS = ROOT / "docs" / "operations.md"


def need(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"{program} not installed (Debian package prometheus; bin/bootstrap.sh full)")
    return path


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS``, output as text, 60 s at most."""
    result = subprocess.run([need("promtool"), *args], input=stdin, capture_output=True, timeout=60)
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode(errors="replace"),
        result.stderr.decode(errors="replace"),
    )
