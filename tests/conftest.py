"""Shared fixtures: a private OVS sandbox, and skips that say why a test cannot run here; and how
the suite runs in parallel (docs/testing.md).

``bin/test`` runs pytest-xdist workers (``-n``). Tests that need root share the machine's root
namespace (links, addresses, routes, the one userspace OVS it holds), so the scheduler
(``pytest_xdist_make_scheduler``) puts the tests of each module that builds rigs into one of
two groups by what it builds (tests/xdist_groups.py): each group runs on one worker, one test
at a time, as in a serial run, beside the other groups and the rest. Everything else runs on
whichever worker is free, at a lower priority than the groups' tests (``pytest_runtest_setup``).
Hypothesis runs without deadlines and without the "too slow" health check: the workers load the
machine, and timing is not what it tests.
"""

from __future__ import annotations

import copy
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from plan_documents import plan_bytes, plan_document
from xdist_groups import RootGroupScheduling, module_group

from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

# the agents' OVS sandbox fixtures (``sandbox``, ``root_links``), for every test that asks for them
pytest_plugins = ["agentsandbox"]

#: The niceness of the tests outside the root groups in a parallel run (pytest_runtest_setup).
OTHERS_NICENESS = 10

settings.register_profile("cosample", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cosample")


def pytest_xdist_make_scheduler(config, log):
    """Each root group on one worker (tests/xdist_groups.py), the other tests anywhere."""
    return RootGroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """In an xdist worker, a test of a root group runs at the normal priority and any other at
    niceness ``OTHERS_NICENESS`` (with the daemons it starts): the rigs' tests measure time and
    CPU against a reference (nginx's log, iperf3's rate, sFlow's share) and must not be starved
    by the other workers' computing. A serial run is left alone."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    niceness = 0 if module_group(Path(item.path)) else OTHERS_NICENESS
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except PermissionError:  # not root: back to 0 is refused, and the rigs' tests skip anyway
        pass


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
