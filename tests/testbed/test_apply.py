"""Checking that an agent really runs the plan it was given (the integration test runs real agents)."""

from __future__ import annotations

import json

import pytest

from cosample.experiments.testbed.apply import check_applied
from cosample.experiments.testbed.errors import TestbedError


def _status(tmp_path, **fields):
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"mode": "plan", "plan_version": 7, "errors": [], **fields}))
    return path


def test_the_plan_version_in_plan_mode_passes(tmp_path):
    check_applied("s1", _status(tmp_path), 7)


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {
                "mode": "safe",
                "plan_version": None,
                "reason": "safe state: no plan yet",
                "errors": ["hosts.s1.sflow_sampling: null although local_rate is 2.46828e-17"],
            },
            "null although local_rate",
        ),
        ({"plan_version": 6}, "version 6"),  # kept the last good plan
        ({"errors": ["bridge ctbr1 does not exist"]}, "does not exist"),
    ],
)
def test_a_rejected_plan_is_an_error_naming_the_agent_s_reason(tmp_path, fields, message):
    with pytest.raises(TestbedError, match="agent of s1 did not apply plan version 7") as info:
        check_applied("s1", _status(tmp_path, **fields), 7)
    assert message in str(info.value)


def test_missing_status_is_an_error(tmp_path):
    with pytest.raises(TestbedError, match="no readable status"):
        check_applied("s1", tmp_path / "status.json", 7)
