"""Fixtures of the collector's tests."""

from __future__ import annotations

import json

import pytest
from collector_plans import FOUR, plan_document

from cosample.plan.document import parse_plan


@pytest.fixture
def four_plan():
    return parse_plan(json.dumps(plan_document(FOUR)).encode())


@pytest.fixture
def write_plan(tmp_path):
    def write(hosts=FOUR, name="plan.json", **kwargs):
        path = tmp_path / name
        path.write_text(json.dumps(plan_document(hosts, **kwargs)))
        return path

    return write
