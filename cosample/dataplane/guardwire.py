"""The guard's report: one UDP datagram an agent sends its collector when its host steps along
the ladder (agents/guarding.py), read by the collector (collector/guardstate.py). Pure.

It goes to the collector's sFlow address and port, from the host's sFlow agent address, so it
passes the same admission rule as the host's sFlow (UDP source = a planned agent's address)
and needs no other port or firewall rule; it cannot be taken for sFlow (whose datagrams begin
with the version, 5, as a 32-bit integer) because it begins with ``MAGIC``. After it, compact
JSON with exactly the keys of ``GuardReport``. Nothing in it is believed beyond what the plan
allows: the collector checks the rung against the host's ladder in the plan it runs.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

MAGIC = b"cosample-guard 1\n"
#: A report is a few dozen bytes of JSON; anything longer is refused unread.
MAX_BYTES = 512


class GuardReport(NamedTuple):
    """What a host's guard runs now: rung ``rung`` of the ladder of plan ``plan_version`` (0: the
    plan itself), i.e. sFlow 1-in-``sflow_sampling`` (None: no sFlow) and every mirror rate
    times ``mirror_scale``; ``time`` (Unix seconds) orders reports, ``busy`` is the reading
    that made the guard step."""

    host: str
    plan_version: int
    rung: int
    sflow_sampling: int | None
    mirror_scale: float
    time: float
    busy: float


def encode(report: GuardReport) -> bytes:
    return MAGIC + json.dumps(report._asdict(), separators=(",", ":")).encode()


def decode(data: bytes) -> GuardReport:
    """The report in ``data``; ``ValueError`` with a short reason for anything else."""
    if not data.startswith(MAGIC):
        raise ValueError("not a guard report")
    if len(data) > MAX_BYTES:
        raise ValueError("too long")
    try:
        body = json.loads(data[len(MAGIC) :])
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(body, dict) or set(body) != set(GuardReport._fields):
        raise ValueError("wrong keys")
    host, version, rung = body["host"], body["plan_version"], body["rung"]
    sampling, scale = body["sflow_sampling"], body["mirror_scale"]
    when, busy = body["time"], body["busy"]
    if not isinstance(host, str) or not 0 < len(host) <= 255:
        raise ValueError("bad host")
    for value in (version, rung):
        if type(value) is not int or value < 0:
            raise ValueError("bad integer")
    if sampling is not None and (type(sampling) is not int or not 1 <= sampling < 2**32):
        raise ValueError("bad sflow_sampling")
    for value in (scale, when, busy):
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise ValueError("bad number")
    if scale > 1:
        raise ValueError("bad mirror_scale")
    return GuardReport(host, version, rung, sampling, float(scale), float(when), float(busy))
