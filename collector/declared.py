"""What a sender may declare: the sampling the plan gave it, frames an interface can carry (pure).

Every sFlow flow sample states the 1-in-N its agent sampled with, and every IPFIX record of
OVS's ``sample`` action the probability ``P`` out of 65535 (``observationPointId``) and counts
``65535 // P`` per sampled packet (``packetDeltaCount``); the estimate weighs each sample by what
it declares. Nothing authenticates a datagram, so before this rule whoever could send from an
agent's address chose its weight: one sample declaring 1-in-(2^32-1) took a server from 4,071
to 621 million pps, and rates raised step by step walked a plan from 1-in-1 to 1-in-4096
(issue 41). The collector knows from the plan what each agent was given, so it compares:

- **sFlow**: an agent may declare the 1-in-N its server's plan entry gives (``sflow_spans``),
  and, when the entry has a ``guard``, each 1-in-N of its guard's ladder (N, 2N, 4N, ... up to
  ``max(N, floor)``: ``cosample.plan.guard.declared_sampling``, the agents' own definition) and
  no other; a server without a 1-in-N and without mirrors is in the agents' safe state (an
  expired plan, or none yet), which samples at ``safe_sampling`` (the agents' ``safe_sampling``
  setting; None: any, for a replay without a plan, whose agents are only known by what they
  declare);
- **IPFIX**: a ``sample`` host's records may declare the plan's ``P`` (``probability_spans``);
- **a plan change** (``Declared.plan``): agents apply a plan some seconds after the collector
  switches to it (a two-phase transition changes N twice), so the value an agent was last seen
  declaring stays allowed (*carried*) until it declares one of the new plan's;
- **physical bounds**: a frame longer than ``MAX_FRAME_BYTES`` (the largest IP packet and an
  Ethernet header with two VLAN tags) is no frame an interface carries; an IPFIX record cannot
  hold more sampled packets than ``record_packets_bound``: the fastest interface's packets over
  the record's span, which is at most the flow cache's active timeout (the plan's
  ``ipfix.cache_active_timeout_s``, else the agents' default, 1 s: an operator who raises the
  agents' setting puts it in the plan).

The allowed values are *spans*, inclusive ranges: the plan's N is the span ``(N, N)``, a
guard's ladder one span per rung (the values between two rungs are no rung: refused). Everything
else (the carried value, the estimator's checks, the counters) follows from the spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE

if TYPE_CHECKING:
    from cosample.collector.attribution import Attribution, ServerPlan

Spans = tuple[tuple[int, int], ...]
#: Any 1-in-N sFlow can state (a replay without a plan: agents known only by what they declare).
ANY_SAMPLING: Spans = ((1, 2**32 - 1),)
#: The longest frame an interface carries: the largest IPv4 or IPv6 packet (65,535 bytes, no
#: jumbogram) and an Ethernet header with two VLAN tags (22 bytes).
MAX_FRAME_BYTES = 65_535 + 22
#: The most packets per second one interface forwards: 400 Gb/s of minimum-size Ethernet frames
#: (64 bytes, 20 more of preamble and gap on the wire).
MAX_LINK_PPS = 400e9 / (84 * 8)


def sflow_spans(server: ServerPlan, safe_sampling: int | None) -> Spans:
    """The 1-in-N values the agent of ``server`` may declare under its plan entry."""
    if server.sampling is not None:
        if server.guard is None:
            return ((server.sampling, server.sampling),)
        from cosample.plan.guard import declared_sampling  # pydantic's: a guard is one of them

        return tuple((n, n) for n in sorted(declared_sampling(server.sampling, server.guard)))
    if server.mirrors or server.sample_probability:
        return ()  # local sFlow off; not sampling copies either
    return ((safe_sampling, safe_sampling),) if safe_sampling else ANY_SAMPLING


def probability_spans(server: ServerPlan) -> Spans:
    """The probabilities (out of 65535) the IPFIX records of a ``sample`` host may declare."""
    probability = server.sample_probability
    return ((probability, probability),) if probability else ()


def allowed(attribution: Attribution, safe_sampling: int | None) -> dict[str, Spans]:
    """Per sender key (an sFlow agent address, an IPFIX stream's ``ipfix/<domain>``) the values
    it may declare under ``attribution``."""
    out: dict[str, Spans] = {}
    for server in attribution.servers.values():
        if server.agent is not None:
            out[server.agent] = sflow_spans(server, safe_sampling)
        if server.ipfix_key is not None:
            out[server.ipfix_key] = probability_spans(server)
    return out


def within(spans: Spans, value: int) -> bool:
    for low, high in spans:
        if low <= value <= high:
            return True
    return False


def record_packets_bound(probability: int, span_s: float) -> float:
    """The most sampled packets one IPFIX record can hold: the fastest interface's packets over
    the record's span (plus a second for rounding), each sampled with ``probability``/65535."""
    return MAX_LINK_PPS * (max(span_s, 0.0) + 1.0) * probability / SAMPLE_PROBABILITY_SCALE


class Declared:
    """The values each sender may declare under the attribution in force, and the ones carried
    over a plan change (see the module's docstring)."""

    def __init__(self, safe_sampling: int | None = None) -> None:
        self.safe_sampling = safe_sampling
        self.spans: dict[str, Spans] = {}
        self.carried: dict[str, int] = {}

    def plan(self, attribution: Attribution, last: Mapping[str, int]) -> None:
        """A new attribution; ``last``: what each sender was last seen declaring (accepted)."""
        spans = allowed(attribution, self.safe_sampling)
        self.spans = spans
        self.carried = {
            key: value
            for key, value in last.items()
            if key in spans and not within(spans[key], value)
        }

    def allows(self, key: str, value: int) -> bool:
        """May ``key`` declare ``value`` now? A value of the plan ends what was carried."""
        if within(self.spans.get(key, ()), value):
            if self.carried:
                self.carried.pop(key, None)
            return True
        return self.carried.get(key) == value
