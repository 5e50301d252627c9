"""Small plan documents for the collector's tests and experiments, valid around now."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from cosample.plan.formats import FORMAT_VERSION, PLAN_FORMAT
from cosample.times import format_time


def plan_document(
    hosts: dict,
    *,
    version: int = 7,
    now: datetime | None = None,
    not_before: datetime | None = None,
    agents: str | None = None,
) -> dict:
    """``hosts``: name -> (sflow 1-in-N or None, {receiver: share}); tunnel IPs 172.29.0.k;
    ``not_before``: the earliest moment agents may apply it (None: at once); ``agents``: each
    host's sFlow agent address is ``agents``.k (``agent_ip``; a daemon test on loopback passes
    ``127.29.0``, local addresses its senders can send from), else its tunnel IP."""
    now = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    names = sorted(hosts)
    document: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "version": version,
        "created": format_time(now - timedelta(hours=1)),
        "expires": format_time(now + timedelta(hours=6)),
        "plan_id": f"{version:064x}",
        "sflow": {"collector": "127.0.0.1:6343"},
        "hosts": {},
    }
    if not_before is not None:
        document["not_before"] = format_time(not_before)
    for k, name in enumerate(names):
        sampling, mirrors = hosts[name]
        receives = [
            {"from": other, "rate": hosts[other][1][name]}
            for other in names
            if name in hosts[other][1]
        ]
        document["hosts"][name] = {
            "role": "sender" if mirrors else "receiver",
            "local_rate": 1.0 / sampling if sampling else 0.0,
            "sflow_sampling": sampling,
            "mirrors": [{"to": to, "rate": rate} for to, rate in sorted(mirrors.items())],
            "receives": receives,
            "tunnel_ip": f"172.29.0.{k + 1}",
        }
        if agents is not None:
            document["hosts"][name]["agent_ip"] = f"{agents}.{k + 1}"
    return document
