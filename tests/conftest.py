"""Shared fixtures: a private OVS sandbox, and skips that say why a test cannot run here."""

from __future__ import annotations

import pytest

from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available


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
