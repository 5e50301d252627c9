"""Agents nobody named: counted, and a short expiring list of their addresses (bounded state).

The collector keeps no per-agent state for addresses that neither plan nor inventory names (a
flood from random sources costs no memory); the snapshot still lists the most recent of them,
so a user sees which agents they forgot to plan.
"""

from __future__ import annotations

from collections import OrderedDict

#: Unknown agent addresses listed in the snapshot, and for how long after their last datagram.
UNKNOWN_AGENTS_LISTED = 32
UNKNOWN_AGENT_TTL_S = 300.0


class UnknownAgents:
    """Addresses of agents nobody named, most recent first: at most ``UNKNOWN_AGENTS_LISTED``,
    each forgotten ``UNKNOWN_AGENT_TTL_S`` after its last datagram (what a user forgot to plan)."""

    def __init__(self) -> None:
        self._heard: OrderedDict[str, list[float]] = OrderedDict()  # address -> [last, datagrams]

    def heard(self, agent: str, now: float) -> None:
        entry = self._heard.get(agent)
        if entry is None:
            if len(self._heard) >= UNKNOWN_AGENTS_LISTED:
                self._heard.popitem(last=False)
            self._heard[agent] = [now, 1]
            return
        entry[0] = max(entry[0], now)
        entry[1] += 1
        self._heard.move_to_end(agent)

    def listed(self, now: float) -> dict[str, int]:
        """address -> datagrams heard from it, after forgetting the expired."""
        heard = self._heard
        while heard and next(iter(heard.values()))[0] < now - UNKNOWN_AGENT_TTL_S:
            heard.popitem(last=False)
        return {agent: int(entry[1]) for agent, entry in reversed(heard.items())}
