"""Shared fixtures: a private OVS sandbox, and skips that say why a test cannot run here; and how
the suite runs in parallel (docs/testing.md).

``bin/test`` runs pytest-xdist workers (``-n``, ``--dist loadgroup``). Tests that need root
share the machine's root namespace (links, addresses, routes, the one userspace OVS it holds),
so ``pytest_collection_modifyitems`` puts them into three xdist groups by the rig their module
builds (tests/xdist_groups.py; a test marked ``root`` or using a root fixture elsewhere goes to
``root``): each group runs on one worker, one test at a time, as in a serial run, beside the
other groups and the rest. Everything else runs on whichever worker is free. Hypothesis runs
without deadlines and without the "too slow" health check: the workers load the machine, and
timing is not what it tests.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, settings
from plan_documents import plan_bytes, plan_document
from xdist_groups import root_group

from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

# the agents' OVS sandbox fixtures (``sandbox``, ``root_links``), for every test that asks for them
pytest_plugins = ["agentsandbox"]

settings.register_profile("cosample", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cosample")


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = root_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


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
