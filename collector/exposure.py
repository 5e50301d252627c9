"""Which sample streams ran when (their exposure), and how streams of unequal exposure combine.

A server's packets reach the collector through *streams*: its local samples (key
``(agent, LOCAL_KIND)``) and one mirrored stream per receiver (key ``(receiver agent,
MIRRORED_KIND)``). A plan change starts and stops streams, and the agents follow some seconds
after the collector saw the plan (docs/collector.md, "Plan changes"):

- a stream the new plan drops stops when the collector sees the plan: later mirrored copies are
  ``stale_mirror`` (the attribution no longer knows the pair), later local samples
  ``stale_local``. Its exposure ends with its last datagram before that moment: agents that
  applied the plan *before* the collector saw it stopped the stream earlier, and the time
  between would otherwise count as a stream that ran and saw nothing;
- a stream the new plan adds is *pending* until its first datagram arrives: that datagram only
  marks the moment the agent had started it (its samples of the stream were taken before and are
  not counted, ``ignored: stream_start``), the stream runs from then on. An agent fills one
  datagram at a time, so the later datagrams hold samples taken after that moment: for a Poisson
  stream an unbiased rate, whatever the agents' lag;
- streams both plans have continue.

``Streams`` keeps, per (server, kind), the time spans during which at least one stream of that
kind ran; ``exposure`` is their length inside the window. The pure functions below turn a
stream's sums over its exposure into an estimate for the whole window (``extrapolate``) and give
its precision (``precision``), which ``_share`` in ``estimate`` turns into combination weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from cosample.collector.attribution import Attribution

LOCAL_KIND, MIRRORED_KIND = 0, 1
PENDING, STOPPED = "pending", "stopped"
_OPEN = math.inf


class Streams:
    """Running, pending and stopped streams, and each server's spans per kind (pure state)."""

    def __init__(self, gated: bool = True) -> None:
        #: False (``--partial``): every planned stream runs from the moment the plan is seen, so
        #: instances that each see part of a server's streams weigh them alike.
        self.gated = gated
        self.active: dict[str, set[tuple[str, int]]] = {}
        self.gate: dict[tuple[str, str, int], str] = {}  # (server, agent, kind) -> PENDING/STOPPED
        self.spans: dict[tuple[str, int], list[list[float]]] = {}  # [begin, end]; end inf: open
        self._planned: dict[str, set[tuple[str, int]]] = {}
        self._seen_plan = False

    def plan(
        self,
        attribution: Attribution,
        at: float | None,
        last: Callable[[str, str, int], float | None] = lambda *_: None,
    ) -> None:
        """A new plan seen at ``at`` (None: before any sample, the streams ran all along).

        ``last(server, agent, kind)``: arrival time of the stream's newest datagram, if any.
        """
        first, self._seen_plan = not self._seen_plan, True
        when = -math.inf if at is None else at
        planned = {server: _planned(attribution, server) for server in attribution.servers}
        for server in set(planned) | set(self._planned):
            new, old = planned.get(server, set()), self._planned.get(server, set())
            active = self.active.setdefault(server, set())
            ends: dict[int, float] = {}  # kind -> when its stopped streams ended
            for agent, kind in old - new:
                arrival = last(server, agent, kind) if (agent, kind) in active else None
                if arrival is not None and arrival < when:
                    ends[kind] = max(ends.get(kind, -math.inf), arrival)
                else:
                    ends[kind] = when
                active.discard((agent, kind))
                self.gate.pop((server, agent, kind), None)
                if kind == LOCAL_KIND and self.gated:
                    self.gate[(server, agent, kind)] = STOPPED
            for agent, kind in new - old:
                if first or not self.gated:
                    active.add((agent, kind))
                    self.gate.pop((server, agent, kind), None)
                else:
                    self.gate[(server, agent, kind)] = PENDING
            self._update_spans(server, when, ends)
        self._planned = planned

    def start(self, server: str, agent: str, kind: int, at: float) -> None:
        """The first sample of a pending stream arrived at ``at``: it runs from now on."""
        del self.gate[(server, agent, kind)]
        self.active.setdefault(server, set()).add((agent, kind))
        self._update_spans(server, at)

    def restart(
        self,
        server: str,
        kind: int,
        at: float,
        run: bool,
        last: Callable[[str, str, int], float | None] = lambda *_: None,
    ) -> None:
        """A host's guard changed the rates of its streams of ``kind``; the collector learnt it
        at ``at``. The running ones end with their last datagram before ``at`` (later ones hold
        copies of both rates and are not counted), and each starts again at its first datagram
        after it, as a stream a new plan adds (``run``), or stays stopped (``run`` False: the
        guard shed its mirrors; later copies are ``guard_shed``)."""
        active = self.active.setdefault(server, set())
        ends: dict[int, float] = {}
        for agent, planned_kind in self._planned.get(server, ()):
            if planned_kind != kind:
                continue
            if (agent, kind) in active:
                active.discard((agent, kind))
                arrival = last(server, agent, kind)
                end = arrival if arrival is not None and arrival < at else at
                ends[kind] = max(ends.get(kind, -math.inf), end)
            self.gate[(server, agent, kind)] = PENDING if run else STOPPED
        self._update_spans(server, at, ends)

    def runs(self, server: str, agent: str | None, kind: int) -> bool:
        return (agent, kind) in self.active.get(server, ())

    def exposure(self, server: str, kind: int, start: float, now: float) -> float:
        """Seconds of ``[start, now]`` during which a stream of ``kind`` of ``server`` ran."""
        total = 0.0
        for begin, end in self.spans.get((server, kind), ()):
            total += max(0.0, min(end, now) - max(begin, start))
        return total

    def forget(self, before: float) -> None:
        """Drop spans that ended before ``before`` (the window's start)."""
        gone = []
        for key, spans in self.spans.items():
            if len(spans) == 1 and spans[0][1] >= before:  # the usual case: one span, kept
                continue
            kept = [span for span in spans if span[1] >= before]
            if kept:
                self.spans[key] = kept  # (an existing key: the dict keeps its size and order)
            else:
                gone.append(key)
        for key in gone:
            del self.spans[key]

    def _update_spans(self, server: str, at: float, ends: dict[int, float] | None = None) -> None:
        active = self.active.get(server, ())
        for kind in (LOCAL_KIND, MIRRORED_KIND):
            running = any(k == kind for _, k in active)
            spans = self.spans.setdefault((server, kind), [])
            is_open = bool(spans) and spans[-1][1] == _OPEN
            if running and not is_open:
                spans.append([at, _OPEN])
            elif is_open and not running:
                spans[-1][1] = max(spans[-1][0], (ends or {}).get(kind, at))
            if not spans:
                del self.spans[(server, kind)]


def _planned(attribution: Attribution, server: str) -> set[tuple[str, int]]:
    """The streams ``attribution`` expects of ``server``: (agent, kind) pairs.

    Local sampling runs unless the plan turns it off for a server that mirrors (no 1-in-N and
    mirrors); a server without either is in its safe state or plan-less: its agent samples at its
    own rate.
    """
    plan = attribution.servers[server]
    streams: set[tuple[str, int]] = set()
    key = plan.ipfix_key  # OVS's sample action: its IPFIX records are the local stream
    if key is not None:
        streams.add((key, LOCAL_KIND))
    elif plan.agent is not None and (plan.sampling is not None or not plan.mirrors):
        streams.add((plan.agent, LOCAL_KIND))
    for receiver, share in plan.mirrors.items():
        agent = attribution.servers[receiver].agent if receiver in attribution.servers else None
        if agent is not None and share > 0:
            streams.add((agent, MIRRORED_KIND))
    return streams


def precision(fraction: float, inverse_precision: float) -> float:
    """Precision (per packet of the window) of a stream seen over ``fraction`` of the window.

    ``inverse_precision`` is ``(1-p)/p`` averaged over the stream's samples. Extrapolating a
    stream's count from a fraction ``phi`` of the window to all of it (Poisson traffic at a
    steady rate ``r``) has variance ``r W (1/w + 1 - phi) / phi``: the sampling noise of the
    ``phi`` it saw, scaled up, plus the traffic's own noise in the part it did not see. So the
    precision is ``phi / (1/w + 1 - phi)``: ``w`` for a stream that saw the whole window, about
    ``phi p`` for one that saw little of it (an exact stream seen over 1 % of the window is worth
    1 %, not everything).
    """
    if fraction <= 0.0:
        return 0.0
    denominator = inverse_precision + 1.0 - fraction
    return math.inf if denominator <= 0.0 else fraction / denominator


def extrapolate(total: float, variance: float, fraction: float) -> tuple[float, float]:
    """(estimate, variance) of the window's count from a stream's sums over ``fraction`` of it.

    ``total`` is the Horvitz-Thompson sum over the exposure and ``variance`` its estimated
    variance; the estimate is ``total / phi``, its variance ``(variance + total (1 - phi)) /
    phi^2`` (scaled-up sampling noise plus Poisson traffic in the unseen part). ``phi = 1`` gives
    back ``(total, variance)``.
    """
    if fraction <= 0.0:
        return 0.0, 0.0
    return total / fraction, (variance + total * (1.0 - fraction)) / fraction**2
