"""Which datagrams reach the estimator: the UDP source must be the agent it claims, and planned.

An sFlow datagram names its agent inside (the header's agent address); nothing authenticates
it. Before this check anyone who could send UDP to the collector could claim a server's agent
address and set its estimate at will (two datagrams took a server from 5.2k to 3.1e9 pps, and
the controller planned from it). The admission rule, applied before any state is touched:

- the datagram's UDP source address (IPv4-mapped IPv6 normalised to IPv4) must equal the agent
  address in its header, else it is dropped as ``source_mismatch``;
- that agent must be one the attribution in force names (a server's agent address in the plan,
  or the inventory's ``agent_ip``), else ``unplanned_agent``.

Datagrams whose header cannot even be read (too short, not version 5, an unknown address type)
pass to the decoder, which drops them under its own reason without touching any estimate.
What it does not protect against: a sender on the same L2 segment (or any path that does not
filter spoofed source addresses) can forge a planned agent's source address; that is why the
controller also authenticates snapshots and bounds estimates by what a host can carry.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable

from cosample.dataplane.guardwire import MAGIC as GUARD_MAGIC

_V5 = b"\0\0\0\5"
_IPV4, _IPV6 = b"\0\0\0\1", b"\0\0\0\2"
SOURCE_MISMATCH, UNPLANNED_AGENT = "source_mismatch", "unplanned_agent"


def is_guard_report(data: bytes) -> bool:
    return data.startswith(GUARD_MAGIC)


def packed(address: str) -> bytes | None:
    """The address as the sFlow header carries it (4 or 16 bytes), IPv4-mapped IPv6 as IPv4;
    None for something that is not an address (an IPv6 scope ``%eth0`` is dropped)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed


class Admission:
    """``admit(data, source)`` is True when the datagram may be decoded and counted; every
    refusal increments ``dropped[reason]`` (the estimator's drop counter: one place for all)."""

    def __init__(self, dropped: Counter[str]) -> None:
        self.dropped = dropped
        self.known: frozenset[bytes] | None = None  # None: no attribution yet (all refused)
        self._source: dict[str, bytes | None] = {}  # UDP source text -> packed, memoised

    def plan(self, agents: Iterable[str] | None) -> None:
        """The agents of the attribution now in force (None: no attribution at all)."""
        if agents is None:
            self.known = None
            return
        self.known = frozenset(p for p in map(packed, agents) if p is not None)

    def admit(self, data: bytes, source: str) -> bool:
        """False also for a guard's report (``guardwire``), which is not sFlow: the caller
        hands it to the estimator's ``guard_report`` (``is_guard_report``)."""
        head = data[4:8]
        if data[:4] != _V5 or (head != _IPV4 and head != _IPV6):
            return not data.startswith(GUARD_MAGIC)  # else the decoder names what is wrong
        agent = data[8:12] if head == _IPV4 else data[8:24]
        if len(agent) != (4 if head == _IPV4 else 16):
            return True  # truncated: the decoder's reason
        sender = self._source.get(source)
        if sender is None:
            if len(self._source) > 65536:  # bounded: a scan of many sources cannot grow it
                self._source.clear()
            sender = self._source[source] = packed(source)
        if agent != sender:
            self.dropped[SOURCE_MISMATCH] += 1
            return False
        if self.known is None or agent not in self.known:
            self.dropped[UNPLANNED_AGENT] += 1
            return False
        return True
