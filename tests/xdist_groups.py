"""Which xdist group a test that needs root runs in (tests/conftest.py, docs/testing.md).

Tests that need root share the machine's root namespace, so each such test runs in one of three
groups, one test at a time per group, beside the other groups and the tests that need no root.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

#: What in a test module's source shows it builds namespaces, links or a real-datapath OVS (the
#: rigs, their availability checks, the commands that run them), by the group it runs in: the
#: first that matches. ``onehost``: the one-host testbed, whose OVS holds the root namespace's
#: only userspace datapath (the rig also takes a machine-wide lock); ``web``: the web and
#: mirroring rigs, wholly inside namespaces of their own; ``root``: everything else that needs
#: root (links, addresses and routes in the root namespace, the agents' sandbox, the testbed).
ROOT_MODULES = (
    ("onehost", re.compile(r"OneHostTestbed|one_host_testbed_unavailable|\"--testbed\"")),
    ("web", re.compile(r"WebRig|MirrorRig|rig_unavailable|web_available")),
    (
        "root",
        re.compile(
            r"\bLab\b|netns_available|geteuid|testbed_unavailable|\"testbed\", \"up\""
            r"|build\.up\b|dummy=False"
        ),
    ),
)
#: Fixtures that make a test need root (the agents' sandbox: VXLAN devices, routes).
ROOT_FIXTURES = frozenset({"dataplane", "root_links", "sandbox"})


@cache
def _module_group(path: Path) -> str | None:
    try:
        source = path.read_text()
    except OSError:
        return None
    return next((group for group, pattern in ROOT_MODULES if pattern.search(source)), None)


def root_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that needs root, None for one that does not (docs/testing.md)."""
    group = _module_group(Path(item.path))
    if group is None and (
        item.get_closest_marker("root") is not None
        or not ROOT_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
    ):
        group = "root"
    return group
