"""``research/tc_copy_cost.py`` on real namespaces: the mirror arm copies every datagram sent
(an ARP of the sender's may add one), the classifier arm and the bare arm none."""

from __future__ import annotations

import argparse

import pytest

from cosample.lab.netns import netns_available
from research.tc_copy_cost import ARMS, run_rounds

pytestmark = [pytest.mark.root]


def test_mirror_copies_every_packet_and_the_others_none():
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    rows = run_rounds(argparse.Namespace(packets=2000, rounds=1))
    assert sorted(row["arm"] for row in rows) == sorted(ARMS)
    copies = {row["arm"]: row["copies"] for row in rows}
    assert 2000 <= copies["mirror"] <= 2002, copies
    assert copies["classifier"] == 0 and copies["none"] == 0, copies
    assert all(row["cpu_s"] > 0 for row in rows)
