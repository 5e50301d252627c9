"""The suite's Hypothesis seed is fixed; ``explore`` draws with fresh seeds (tests/conftest.py,
docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_profile_follows_the_environment():
    assert settings.get_profile("cosample").derandomize
    assert not settings.get_profile("explore").derandomize
    chosen = os.environ.get("COSAMPLE_HYPOTHESIS", "cosample")
    assert settings().derandomize == (chosen == "cosample")


def test_explore_draws_fresh_examples():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["COSAMPLE_HYPOTHESIS"] = "explore"
    here = Path(__file__).relative_to(ROOT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            f"{here}::test_the_profile_follows_the_environment",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
