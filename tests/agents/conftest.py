"""Fixtures for the agents' tests: a config with a private state dir (plan documents and the
``now``/``make_plan`` fixtures are in tests/conftest.py and tests/plan_documents.py).
"""

from __future__ import annotations

import pytest

from cosample.agents.config import make_config


@pytest.fixture
def config_for(tmp_path):
    """``config_for(host, **overrides)`` with a state dir in tmp_path."""

    def build(host: str = "s1", **overrides):
        values = {
            "host": host,
            "state_dir": str(tmp_path / "state"),
            "jitter_s": 0.0,
            "insecure_unsigned": True,
        }
        values.update(overrides)
        return make_config(values)

    return build
