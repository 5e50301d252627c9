"""The suite's Hypothesis seed is fixed; ``explore`` draws with fresh seeds (tests/conftest.py,
docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings
from nested_pytest import run_pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_profile_follows_the_environment():
    assert settings.get_profile("cosample").derandomize
    assert not settings.get_profile("explore").derandomize
    chosen = os.environ.get("COSAMPLE_HYPOTHESIS", "cosample")
    assert settings().derandomize == (chosen == "cosample")


def test_explore_draws_fresh_examples():
    here = Path(__file__).relative_to(ROOT)
    done = run_pytest(
        ["-p", "no:xdist", f"{here}::test_the_profile_follows_the_environment"],
        ROOT,
        {"COSAMPLE_HYPOTHESIS": "explore"},
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
