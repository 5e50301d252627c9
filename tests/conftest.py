"""Shared fixtures: a private OVS sandbox, and skips that say why a test cannot run here."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest
from plan_documents import plan_bytes, plan_document

from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

# the agents' OVS sandbox fixtures (``sandbox``, ``root_links``), for every test that asks for them
pytest_plugins = ["agentsandbox"]


@pytest.fixture
def ovs_sandbox(tmp_path):
    """A private OVS with the dummy datapath (no root, no kernel features needed)."""
    reason = ovs_available()
    if reason:
        pytest.skip(reason)
    with OvsInstance(tmp_path / "ovs", dummy=True) as ovs:
        yield ovs


@pytest.fixture
def dataplane():
    """Skip unless real packets can flow: root, namespaces, OVS binaries."""
    reason = ovs_available() or netns_available()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def now():
    """The moment a test runs, in UTC to the second (plans are created a minute before it)."""
    return datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def make_plan(now):
    """``make_plan(**kwargs)`` -> a fresh plan dict created a minute before ``now``."""

    def make(**kwargs):
        kwargs.setdefault("created", now - timedelta(minutes=1))
        return copy.deepcopy(plan_document(**kwargs))

    return make


@pytest.fixture
def to_bytes():
    return plan_bytes
