"""Shared fixtures: a private OVS sandbox, and skips that say why a test cannot run here; and how
the suite runs in parallel (docs/testing.md).

``bin/test`` runs pytest-xdist workers (``-n``). Tests that need root share the machine's root
namespace (links, addresses, routes, the one userspace OVS it holds), so the scheduler
(``pytest_xdist_make_scheduler``) puts the tests of each module that builds rigs into one of
three groups by what it builds (tests/xdist_groups.py): each group runs on one worker, one test
at a time, as in a serial run, beside the other groups and the rest. Everything else runs on
whichever worker is free; the groups' tests run at a higher priority (``pytest_runtest_setup``).
Hypothesis runs without deadlines and without the "too slow" health check: the workers load the
machine, and timing is not what it tests. Its random seed is fixed (the ``cosample`` profile
is derandomised): the draws no longer change with the day. They still change with the modules a
worker has loaded (Hypothesis mixes constants it finds in them into its draws), so a property
must hold on its whole domain. ``COSAMPLE_HYPOTHESIS=explore`` draws with fresh seeds to look
for counterexamples (docs/testing.md); what it finds is fixed and kept as an explicit example.
"""

from __future__ import annotations

import copy
import gc
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from plan_documents import plan_bytes, plan_document
from xdist_groups import RootGroupScheduling, module_group

from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

# the agents' OVS sandbox fixtures (``sandbox``, ``root_links``), for every test that asks for
# them; each test's CPU when COSAMPLE_TEST_CPU is set (tests/testcpu.py); the collector in a
# thread beside a real controller (``collector_thread``, tests/collector_beside.py)
pytest_plugins = ["agentsandbox", "testcpu", "collector_beside"]

#: The niceness of the root groups' tests in a parallel run (pytest_runtest_setup).
GROUP_NICENESS = -5
#: The groups raised to it: those whose tests time or count against a reference. Not the
#: emulated machines (``machines``), which wait for polls: raised, their daemons competed with
#: the timed rigs at the same priority.
RAISED_GROUPS = frozenset({"measure", "root"})

settings.register_profile(
    "cosample", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile(
    "explore", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=False
)
settings.load_profile(os.environ.get("COSAMPLE_HYPOTHESIS", "cosample"))


#: The collector's thresholds for the tests' processes (Python's: 700, 10, 10): the young
#: generation collected every 10,000 allocations net instead of 700 (``pytest_collection_finish``).
GC_THRESHOLDS = (10_000, 20, 20)


def pytest_collection_finish(session):
    """Once the tests are collected, what collection made (every test's item, its module and
    what it imported: hundreds of thousands of objects that live until the run ends) is moved
    out of the cyclic garbage collector's sight (``gc.freeze``), and the collector runs less
    often: each later collection walks only what the tests themselves make. The tests' own
    garbage is still collected; nothing a test checks depends on when. ``COSAMPLE_TEST_GC=python``
    keeps Python's collector as it is, to compare (``tests/testcpu.py`` times the collector per
    test; docs/testing.md, "Measured")."""
    if os.environ.get("COSAMPLE_TEST_GC") == "python":
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@pytest.hookimpl(optionalhook=True)  # known only while pytest-xdist is loaded (not -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """Each root group on one worker (tests/xdist_groups.py), the other tests anywhere."""
    return RootGroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """In an xdist worker, a test of a ``RAISED_GROUPS`` group runs (with its daemons) at niceness
    ``GROUP_NICENESS``, any other at 0: the rigs' tests measure time and CPU against a reference
    (nginx's log, a calibration's curve, a sampled share) and must not be starved by the other
    workers' computing. Only the rigs' tests are raised: lowering the others instead starved
    them behind the other users of a shared machine (41 min, timeouts, in one run). A serial
    run, or one without root (whose rigs' tests skip), is left alone."""
    if "PYTEST_XDIST_WORKER" not in os.environ or os.geteuid() != 0:
        return
    niceness = GROUP_NICENESS if module_group(Path(item.path)) in RAISED_GROUPS else 0
    os.setpriority(os.PRIO_PROCESS, 0, niceness)


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
