"""Packet rates of agents' ports from sFlow generic interface counters (exact, not estimated).

Two readings of one port's counters give its rates. State is bounded: at most
``MAX_PORTS_PER_AGENT`` rows per agent (more are refused: ``port_limit``), and rows not refreshed
within the window expire, so a host that renumbers its ports or sends random ``ifIndex`` values
cannot grow the collector's memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

#: Port-counter rows kept per agent (a host has tens to hundreds of ports).
MAX_PORTS_PER_AGENT = 1024
_WRAP = 1 << 32


class PortRates:
    """(agent, ifIndex) -> last reading; server -> port -> ``{"in_pps", "out_pps"}``."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], tuple[float, int, int, str]] = {}
        self.per_agent: Counter[str] = Counter()  # agent -> rows in ``rows``
        self.rates: dict[str, dict[str, dict[str, float]]] = {}

    def add(self, counters, server: str, now: float) -> bool:
        """Take one reading (``decode.InterfaceCounters``) of ``server``'s agent; False when the
        agent already has ``MAX_PORTS_PER_AGENT`` rows and this port is not one of them."""
        key = (counters.agent, counters.if_index)
        previous = self.rows.get(key)
        if previous is None:
            if self.per_agent[counters.agent] >= MAX_PORTS_PER_AGENT:
                return False
            self.per_agent[counters.agent] += 1
        self.rows[key] = (now, counters.in_packets, counters.out_packets, server)
        if previous is None or now <= previous[0]:
            return True
        elapsed = now - previous[0]
        self.rates.setdefault(server, {})[str(counters.if_index)] = {
            "in_pps": ((counters.in_packets - previous[1]) % _WRAP) / elapsed,
            "out_pps": ((counters.out_packets - previous[2]) % _WRAP) / elapsed,
        }
        return True

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the rows of agents ``keep`` rejects (a plan that no longer names them)."""
        for key in [key for key in self.rows if not keep(key[0])]:
            del self.rows[key]
            self.per_agent[key[0]] -= 1

    def expire(self, horizon: float) -> None:
        """Drop the rows last read before ``horizon``, and their rates."""
        for key in [key for key, row in self.rows.items() if row[0] < horizon]:
            server = self.rows.pop(key)[3]
            self.per_agent[key[0]] -= 1
            rows = self.rates.get(server)
            if rows is not None:
                rows.pop(str(key[1]), None)
                if not rows:
                    del self.rates[server]
