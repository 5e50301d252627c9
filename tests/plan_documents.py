"""Plan documents as dicts (docs/formats.md) for the tests of the plan's home and of the agents.

Plans are built relative to a ``created`` moment (the ``now`` fixture in tests/conftest.py), so
the suite passes on any day and in any time zone; nothing here names a calendar date.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from cosample.times import format_time

_time = format_time


def plan_document(
    version: int = 100,
    *,
    sender_mirrors=(("s2", 0.2), ("s3", 0.3)),
    sampling: int = 10,
    local_rate: float = 0.1,
    created: datetime,
    hours: float = 6,
    collector: str = "127.0.0.1:6343",
    vm_ports=None,
    bridge: str | None = "br-int",
) -> dict:
    """A plan with sender s1 mirroring to receivers s2 and s3, and idle s4."""

    def host(role, ip, **extra):
        doc = {
            "role": role,
            "capacity_pps": 1e6,
            "forwarding_pps": 5e5,
            "own_pps": 4e5,
            "local_rate": 1.0,
            "sflow_sampling": 1,
            "mirrors": [],
            "receives": [],
            "tunnel_ip": ip,
        }
        if bridge:
            doc["bridge"] = bridge
        doc.update(extra)
        return doc

    mirrors = [{"to": to, "rate": rate} for to, rate in sender_mirrors]
    hosts = {
        "s1": host(
            "sender", "10.0.0.1", local_rate=local_rate, sflow_sampling=sampling, mirrors=mirrors
        ),
        "s2": host("receiver", "10.0.0.2"),
        "s3": host("receiver", "10.0.0.3"),
        "s4": host("idle", "10.0.0.4", local_rate=0.0, sflow_sampling=None),
    }
    if vm_ports is not None:
        hosts["s1"]["vm_ports"] = list(vm_ports)
    for to, rate in sender_mirrors:
        hosts[to]["receives"].append({"from": "s1", "rate": rate, "pps": rate * 4e5})
    return {
        "format": "cosample.plan",
        "format_version": 1,
        "version": version,
        "created": _time(created),
        "expires": _time(created + timedelta(hours=hours)),
        "plan_id": "ab" * 32,
        "datacentre": "test",
        "sflow": {"collector": collector, "agent": "127.0.0.1"},
        "cost": {"alpha": 1.54, "beta": 0.46},
        "summary": {},
        "solver": {"name": "exact"},
        "hosts": hosts,
    }


def plan_bytes(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, indent=2).encode()
