"""Plans for the collector's tests, built relative to the current time (never a fixed date)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from cosample.agents.plan import parse_plan


def plan_document(hosts: dict, *, version: int = 7, now: datetime | None = None) -> dict:
    """``hosts``: name -> (sflow 1-in-N or None, {receiver: share}); tunnel IPs 172.29.0.k."""
    now = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    names = sorted(hosts)
    document = {"format": "cosample.plan", "format_version": 1, "version": version,
                "created": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "expires": (now + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "plan_id": f"{version:064x}", "sflow": {"collector": "127.0.0.1:6343"},
                "hosts": {}}
    for k, name in enumerate(names):
        sampling, mirrors = hosts[name]
        receives = [{"from": other, "rate": hosts[other][1][name]} for other in names
                    if name in hosts[other][1]]
        document["hosts"][name] = {
            "role": "sender" if mirrors else "receiver",
            "local_rate": 1.0 / sampling if sampling else 0.0, "sflow_sampling": sampling,
            "mirrors": [{"to": to, "rate": rate} for to, rate in sorted(mirrors.items())],
            "receives": receives, "tunnel_ip": f"172.29.0.{k + 1}"}
    return document


#: s1 samples 1-in-64 and mirrors 30 % to s2 (1-in-1) and 20 % to s3 (1-in-2); s4 only samples.
FOUR = {"s1": (64, {"s2": 0.3, "s3": 0.2}), "s2": (1, {}), "s3": (2, {}), "s4": (16, {})}


