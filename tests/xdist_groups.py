"""Which worker group a test that needs root runs in, and the pytest-xdist scheduler that keeps
each group on one worker (tests/conftest.py, docs/testing.md).

Tests that need root share the machine's root namespace, so each test module that builds rigs
runs in one of two groups, decided by its source: a group is one unit of work for xdist (one
worker, one test at a time, as in a serial run), beside the other groups and the tests that need
no root, each of which is a unit of its own. The scheduler is ours, not xdist's ``loadgroup``:
that one tags node ids with the group (``item._nodeid``), which pytest 9.2 no longer reads, so
its groups silently spread over all workers.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

#: What in a test module's source shows it builds namespaces, links or a real-datapath OVS, by
#: the group it runs in: the first that matches. ``measure``: the rigs whose tests measure time
#: or CPU against a reference and fail when another rig computes beside them (the one-host
#: testbed's calibrations, whose OVS also holds the root namespace's only userspace datapath;
#: the web and mirroring rigs, timed against nginx's log); ``machines``: the operations
#: documents run on emulated machines (tests/ops/machines.py: every link, address, mount and
#: OVS in namespaces of their own, nothing in the root namespace; a third of the root tests'
#: wall time, mostly waiting for the agent's polls); ``root``: everything else that needs
#: root (links, addresses and routes in the root namespace, the agents' sandbox and its
#: fixtures, the testbed, a test marked ``root``).
ROOT_MODULES = (
    (
        "measure",
        re.compile(
            r"OneHostTestbed|one_host_testbed_unavailable|\"--testbed\""
            r"|WebRig|MirrorRig|rig_unavailable|web_available"
        ),
    ),
    ("machines", re.compile(r"\bNetwork\(")),
    (
        "root",
        re.compile(
            r"\bLab\b|netns_available|geteuid|testbed_unavailable|\"testbed\", \"up\""
            r"|build\.up\b|dummy=False|mark\.root\b|[(,]\s*(dataplane|root_links|sandbox)\s*[,)]"
        ),
    ),
)


@cache
def _source(path: Path) -> str:
    """The module's source; empty when it cannot be read (its tests then run alone)."""
    try:
        return path.read_text()
    except OSError:
        return ""


#: Modules whose tests run mypy over the package (``bin/check-types``, and ``bin/lint``, which
#: runs it too): one unit of work, so the first fills ``.mypy_cache`` and the next reads it
#: (about 17 s of CPU cold, 0.5 s warm), where side by side on two workers both paid in full.
#: Not a root group: its tests run at the workers' usual priority.
MYPY_MODULES = re.compile(r'"bin" / "(lint|check-types)"')


@cache
def module_group(path: Path) -> str | None:
    """The group of the tests in the module at ``path``; None when they need no root."""
    source = _source(path)
    return next((group for group, pattern in ROOT_MODULES if pattern.search(source)), None)


#: A fixture made once per module (or session) that is not ``autouse``: a set-up the module's
#: tests share (the operations tests' fleet and Prometheus, a capture's analysis). Each worker a
#: module's tests land on makes its own, so such a module is one unit of work: made once.
SHARED_SETUP = re.compile(r'@pytest\.fixture\((?![^)]*autouse=True)[^)]*scope="(module|session)"')


@cache
def scope_of_module(path: Path) -> str | None:
    """The unit of work the tests of the module at ``path`` share: its root group, ``mypy``
    (``MYPY_MODULES``), the module itself when it or its folder's ``conftest.py`` has a shared
    set-up (``SHARED_SETUP``), or None: each test alone."""
    group = module_group(path)
    if group is not None:
        return group
    source = _source(path)
    if MYPY_MODULES.search(source):
        return "mypy"
    if SHARED_SETUP.search(source) or SHARED_SETUP.search(_source(path.parent / "conftest.py")):
        return str(path)
    return None


class RootGroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling where a scope is a root group, the ``mypy`` modules or a
    module with a shared set-up, or else one test alone; the largest scopes (the groups) are
    handed out first."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        self.rootpath = Path(config.rootpath)

    def _split_scope(self, nodeid: str) -> str:
        return scope_of_module(self.rootpath / nodeid.split("::", 1)[0]) or nodeid
