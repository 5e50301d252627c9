"""The agent's warning when the underlay is too small for copies of full-size frames (pure logic;
the real thing: tests/agents/test_dataplane.py::test_full_size_copies_need_underlay_room)."""

from __future__ import annotations

from cosample.agents.mtu import mirror_mtu_warnings
from cosample.agents.state import MirrorTarget


def target(peer: str, remote_ip: str) -> MirrorTarget:
    return MirrorTarget(
        peer=peer,
        rate=0.1,
        probability=0.1,
        prio=0xC000,
        device=f"cosm-{peer}",
        remote_ip=remote_ip,
        vni=7,
    )


def test_warns_only_where_the_underlay_lacks_room():
    targets = [target("a", "10.0.0.2"), target("b", "10.0.1.2"), target("c", "fd00::2")]
    paths = {"10.0.0.2": ("eth0", 1500), "10.0.1.2": ("eth1", 1550), "fd00::2": ("eth1", 1550)}
    warnings = mirror_mtu_warnings(targets, {"vm1": 1500, "vm2": 1400}, paths)
    assert len(warnings) == 2
    assert warnings[0].startswith("mirror to a: the underlay toward 10.0.0.2 (eth0) has MTU 1500")
    assert "1550 bytes" in warnings[0] and "VM port vm1 (MTU 1500)" in warnings[0]
    assert "copies of frames over 1464 bytes" in warnings[0]
    # IPv6 outer headers are 20 bytes longer: 1550 leaves room for frames of 1494 bytes only
    assert warnings[1].startswith("mirror to c:") and "over 1494 bytes" in warnings[1]
    assert "raise the underlay MTU to 1570" in warnings[1]


def test_silent_without_ports_or_routes():
    targets = [target("a", "10.0.0.2")]
    assert mirror_mtu_warnings(targets, {}, {"10.0.0.2": ("eth0", 1000)}) == []
    assert mirror_mtu_warnings(targets, {"vm1": 9000}, {}) == []
    assert mirror_mtu_warnings(targets, {"vm1": 1450}, {"10.0.0.2": ("eth0", 1500)}) == []
