"""Shared fixtures: a private OVS sandbox, and skips that say why a test cannot run here; and how
the suite runs in parallel (docs/testing.md).

``bin/test`` runs pytest-xdist workers (``-n``, ``--dist loadgroup``). Tests that need root
share the machine's root namespace (links, addresses, routes, the one userspace OVS it holds),
so they go to one worker, one at a time, as in a serial run: ``pytest_collection_modifyitems``
puts every test marked ``root``, every test using a root fixture (``ROOT_FIXTURES``) and every
test of a module that builds rigs (``ROOT_MODULE``) into the xdist group ``root``. Everything
else runs on whichever worker is free. Hypothesis runs without deadlines and without the
"too slow" health check: the workers load the machine, and timing is not what it tests.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from plan_documents import plan_bytes, plan_document

from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

# the agents' OVS sandbox fixtures (``sandbox``, ``root_links``), for every test that asks for them
pytest_plugins = ["agentsandbox"]

settings.register_profile("cosample", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cosample")

#: The xdist group of the tests that need root (one worker, one test at a time).
ROOT_GROUP = "root"
#: Fixtures that make a test need root.
ROOT_FIXTURES = frozenset({"dataplane", "root_links", "sandbox"})
#: What in a test module's source shows it builds namespaces, links or a real-datapath OVS: the
#: rigs, their availability checks, and commands that run them.
ROOT_MODULE = re.compile(
    r"\bLab\b|WebRig|MirrorRig|OneHostTestbed|netns_available|rig_unavailable|web_available"
    r"|one_host_testbed_unavailable|testbed_unavailable|geteuid|\"--testbed\"|\"testbed\", \"up\""
    r"|build\.up\b|dummy=False"
)


@cache
def _builds_rigs(path: Path) -> bool:
    try:
        return bool(ROOT_MODULE.search(path.read_text()))
    except OSError:
        return False


def needs_root(item: pytest.Item) -> bool:
    """True for a test that needs the root namespace (docs/testing.md, "Markers")."""
    return (
        item.get_closest_marker("root") is not None
        or not ROOT_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        or _builds_rigs(Path(item.path))
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if needs_root(item):
            item.add_marker(pytest.mark.xdist_group(ROOT_GROUP))


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
