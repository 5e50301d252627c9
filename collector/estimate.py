"""The collector's state: a fast path that only updates windowed sums, a normal path that estimates.

``ingest`` decodes one datagram, attributes each flow sample (``attribution``) and adds it to
per-second buckets keyed by (origin server, reporting agent, local or mirrored, destination
server); counter samples update per-port packet rates; every datagram or sample not counted
increments a named reason. ``snapshot`` (the normal path, combine.py) turns the buckets inside
the window into per-server estimates (docs/collector.md, "Renormalisation"):

- the local stream estimates the server's packets as ``L = sum 1/l`` (``l = 1/N``, the 1-in-N the
  agent reports in each sample), the mirrored stream as ``M = sum 1/Q`` (``Q = sum_j m_j / N_j``,
  mirror shares from the plan, receivers' rates as reported); both are unbiased;
- each stream counts only over its *exposure*, the part of the window in which it ran (a plan
  change starts and stops streams, the agents follow with a lag: ``exposure``); a stream seen
  over a fraction ``phi`` of the window estimates the window as ``L / phi`` (``extrapolate``);
- they are combined by their precisions ``P = phi / (1/w + 1 - phi)`` with ``w = p/(1-p)``
  (``w`` itself over a whole window): ``X = a L/phi_L + (1-a) M/phi_M``, ``a = P_L / (P_L +
  P_M)``, variance ``a^2 Var_L + (1-a)^2 Var_M`` (each term additive across instances); a
  stream's variance is its samples' ``sum w(w-1)`` (Horvitz-Thompson), so rates that change
  within the window count right; 1-in-1 streams are exact;
- samples lost between agent and collector (sequence gaps) or dropped by the agent (``drops``)
  scale that agent's sums by ``(received + lost) / received``, both over the window; ``loss``
  tells lost from late, duplicate and reset, and books a gap over the time it covers.

Per-agent state is kept only for agents the attribution names (plan or inventory); datagrams
from any other address are counted (``unknown_agent``) and their addresses kept in a short,
expiring list (``unknown.UnknownAgents``), so a flood from random sources costs no memory; port
counters keep bounded rows (``ports.PortRates``).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from socket import inet_ntoa as _ntoa

from cosample.collector import decode
from cosample.collector.attribution import LOCAL, Attribution, Source
from cosample.collector.combine import Estimates
from cosample.collector.declared import MAX_FRAME_BYTES, Declared
from cosample.collector.decode import DecodeError, FlowSample, parse_counted, parse_grouped
from cosample.collector.exposure import MIRRORED_KIND, PENDING, Streams
from cosample.collector.guardstate import GuardBook
from cosample.collector.ipfix import Templates
from cosample.collector.ipfixingest import IpfixIngest
from cosample.collector.loss import LossTracker
from cosample.collector.ports import PortRates
from cosample.collector.records import flow_record
from cosample.collector.unknown import UnknownAgents

#: Verdicts cached per (agent, VNI, outer source); cleared when full (tenant tunnels are many).
VERDICT_CACHE = 4096
#: Drop reasons of samples that declare what no interface or plan gives (``declared``).
UNPLANNED_RATE, OVERSIZED_FRAME = "unplanned_sampling_rate", "oversized_frame"

Hook = Callable[[FlowSample, Source, float], None]


class Estimator(Estimates, IpfixIngest):
    """Windowed per-server estimates from sFlow datagrams and IPFIX messages (OVS's ``sample``
    action, ``ipfixingest``), renormalised by a plan (the fast path here; ``snapshot``, the
    normal path, in combine.py)."""

    def __init__(
        self,
        attribution: Attribution | None,
        *,
        window_s: float | None = 30.0,
        name: str = "collector",
        partial: bool = False,
        safe_sampling: int | None = None,
    ) -> None:
        """``safe_sampling``: the 1-in-N of the agents' safe state (no plan in force, or it
        expired), the only one they may declare then; None: any (replay without a plan)."""
        self.attribution = attribution
        #: Another instance may hold the other stream of a server (SO_REUSEPORT workers): never
        #: conclude that a stream the plan expects is missing.
        self.partial = partial
        self.window_s = window_s  # None: everything since the start (replay)
        self.name = name
        self.dropped = Counter()
        self.ignored = Counter()
        self.datagrams = 0
        self.samples = 0
        self.rate_of = {}  # agent -> the 1-in-N it reported last
        self._hooks: list = [None, None]  # on_sample, on_datagram (properties below)
        self._modes()  # a record per sample (``_each``); flows counted only (``_lean``)
        #: sums are kept per bucket of ``bucket_s`` seconds: a tenth of the window (memory grows
        #: with the number of buckets, the window slides by one bucket)
        self.bucket_s = max(1.0, window_s / 10) if window_s else 60.0
        self._buckets = deque()
        self.loss = LossTracker(self._book)
        self._lost = {}  # bucket -> agent -> samples lost in it
        self.unknown = UnknownAgents()
        self.discards = {}  # server -> drop reason -> discards
        self.ports = PortRates()  # interface counters -> port rates
        self._last = {}
        self._mirror_q: dict[str, float] = {}
        self._verdicts: dict[tuple, Source | str] = {}
        #: (agent, rate, VNI, outer source) -> the verdict on such samples and their sums in
        #: the newest bucket (``_slot``): what the common case looks up once per datagram
        self._slots: dict[tuple, list] = {}
        #: agents that sample mirrored copies: their 1-in-N is in other servers' weights
        self._receivers = {agent for agent, _ in attribution.mirrors} if attribution else set()
        #: the 1-in-N (and IPFIX probabilities) each agent may declare (``declared``)
        self.declared = Declared(safe_sampling)
        self._next_bucket = -math.inf  # where the newest bucket ends (``_tick``)
        #: what the compiled common case works on: [newest bucket, the loss tracker's agents,
        #: the slots, the newest sample per server, the newest bucket's tallies and sums]
        self._context: list = [None, self.loss._agents, self._slots, self._last, {}, {}]
        self._compiled = decode.compiled_ingest  # None: the Python path does all
        self._first = None
        self._now = None
        self.streams = Streams(gated=not partial)
        self.templates = Templates()  # IPFIX templates per (exporter, domain)
        self.ipfix_messages = 0
        self.ipfix_records = 0
        #: the rung each host's guard runs (its reports: ``guard_report``)
        self.guards = GuardBook()
        if attribution is not None:
            self.streams.plan(attribution, None)
            self.declared.plan(attribution, {})

    #: Sees every sample counted, as its record (re-export).
    on_sample = property(lambda self: self._hooks[0], lambda self, hook: self._hook(0, hook))
    #: Sees every decoded datagram as ``(agent, flows, counters, discards)`` (replay's list of
    #: the agents heard).
    on_datagram = property(lambda self: self._hooks[1], lambda self, hook: self._hook(1, hook))

    def _hook(self, which: int, hook: Callable | None) -> None:
        self._hooks[which] = hook
        self._modes()

    def _modes(self) -> None:
        """How ``ingest`` takes datagrams: each sample on its own when a record of it is needed
        (re-export, the traffic matrix); otherwise samples alike together, and, when no hook
        looks at them, only counted (``parse_counted``: no tuple per sample)."""
        attribution = self.attribution
        self._each = self.on_sample is not None or bool(
            attribution is not None and attribution.server_of_address
        )
        self._lean = not self._each and self.on_datagram is None

    # fast path -----------------------------------------------------------------------------
    def set_attribution(self, attribution: Attribution, now: float | None = None) -> None:
        """A new plan seen at ``now`` (default: the newest datagram's time): sums already taken
        keep their weights, new samples use the new plan, streams start and stop (``exposure``)."""
        self.attribution = attribution
        moment = now if now is not None else self._now
        last = self._arrivals()
        for server in self.guards.forget():  # the new plan starts every host on its rung 0:
            if moment is not None:  # mirrors a guard shed start again at their first copy
                self.streams.restart(server, MIRRORED_KIND, moment, True, last)
        self.streams.plan(attribution, moment, last)
        self._mirror_q.clear()
        self._verdicts.clear()
        self._slots.clear()
        self._modes()
        self._receivers = {agent for agent, _ in attribution.mirrors}
        known = set(attribution.server_of_agent)
        known.update(plan.ipfix_key for plan in attribution.servers.values() if plan.ipfix_key)
        self.loss.forget(known.__contains__)
        for agent in [agent for agent in self.rate_of if agent not in known]:
            del self.rate_of[agent]
        self.declared.plan(attribution, self.rate_of)  # what agents still declare is carried
        self.ports.forget(known.__contains__)
        self.templates.forget(lambda exporter, _: exporter in attribution.server_of_exporter)

    def _arrivals(self) -> Callable[[str, str, int], float | None]:
        """``last(server, agent, kind)``: arrival of the newest datagram of a stream in the
        window (one pass over the buckets, on the first call)."""
        latest: dict[tuple[str, str, int], float] = {}

        def last(server: str, agent: str, kind: int) -> float | None:
            if not latest:
                for _, sums, _ in self._buckets:
                    for (s, a, k, _), acc in sums.items():
                        latest[(s, a, k)] = max(latest.get((s, a, k), acc[6]), acc[6])
            return latest.get((server, agent, kind))

        return last

    def ingest(self, data: bytes, now: float) -> None:
        """Account for one datagram received at ``now`` (Unix seconds); never raises on input.

        The common case (flow samples only, from a known agent whose samplers continue, of
        groups already decided in this bucket: ``_slot``) is the compiled ``decode.
        compiled_ingest``, on this estimator's own state; anything else is decided here."""
        if self._lean and now < self._next_bucket and self._compiled is not None:
            counted = self._compiled(data, now, self._context)
            if counted is not None:
                self.datagrams += 1
                self.samples += counted
                if self._now is None or now > self._now:  # (never None here: a bucket began)
                    self._now = now
                return
        try:
            parsed = parse_counted(data) if self._lean else None  # flows: their number only
            if parsed is None:
                parsed = parse_grouped(data)
        except DecodeError as exc:
            self.dropped[exc.reason] += 1
            return
        agent, sub_agent, number, uptime, flows, counters, discards, alike, runs = parsed
        count = flows if flows.__class__ is int else len(flows)
        self.datagrams += 1
        if self.on_datagram is not None:
            self.on_datagram(agent, flows, counters, discards)
        if now >= self._next_bucket:  # time moves on (``_tick``), cheaply within a bucket
            self._tick(now)
        elif self._now is None or now > self._now:
            self._now = now
        attribution = self.attribution
        if attribution is None:
            self.dropped["no_plan"] += count + len(discards)
            return
        self.samples += count
        home = attribution.server_of_agent.get(agent)
        if home is None:  # no state for agents nobody named
            self.unknown.heard(agent, now)
            self.dropped["unknown_agent"] += count + len(discards)
            if counters:
                self.dropped["unknown_agent_counters"] += len(counters)
            return
        if discards:
            self._discarded(home, discards)
        kept = self.loss.datagram(agent, sub_agent, number, uptime, flows, now, runs, data)
        if kept is not flows:  # looked at one by one (decoded if they were only counted)
            assert isinstance(kept, tuple)  # the flows kept, always a tuple of their own
            if len(kept) < count:
                self.dropped["duplicate"] += count - len(kept)
            flows, alike = kept, None
        if alike is None or self._each:  # the compiled scan did not group them (or a record
            assert isinstance(flows, tuple)  # is needed per sample): only counted, they were
            alike = self._groups(flows, self._each)
        bucket, sums, agents = self._buckets[-1]
        received, starting, slots = 0, None, self._slots
        for group in alike:
            slot = slots.get((agent, group[0], group[1], group[2]))
            if slot is None or slot[0] != bucket or starting is not None:
                slot, starting = self._slot(agent, group, bucket, sums, now, starting)
                if not slot:  # None: refused; empty: received, not counted (streams)
                    if slot is not None:
                        received += group[3]
                    continue
            n = group[3]
            received += n
            if group[6] is not None:  # each sample on its own: its record
                self._add_one(agent, group, data, slot, sums, now)
                continue
            acc, weight, variance = slot[1], slot[2], slot[3]
            acc[0] += n
            acc[1] += n * weight
            acc[2] += group[4] * weight
            acc[3] += group[5] * weight
            acc[4] += n * variance
            acc[5] += group[5] * variance
            acc[6] = now  # arrival of the stream's newest datagram (where a dropped one ends)
            if self._last.get(slot[4], 0.0) < now:
                self._last[slot[4]] = now
        if received:
            agents[agent] = agents.get(agent, 0) + received
        for counter in counters:
            self._interface(counter, now)

    def _slot(
        self, agent: str, group: tuple, bucket: int, sums: dict, now: float, starting: set | None
    ) -> tuple[list | None, set | None]:
        """The verdict on a group of samples alike (whose they are, how they were taken, what
        each weighs) and the sums they go to, kept for the next datagrams (``_slots``, cleared
        whenever a weight may change); None for samples refused, ``[]`` for samples received
        but not counted (a stream's first datagram, a stopped stream), each under its reason.
        ``starting``: the streams this datagram started."""
        rate, vni, outer, n = group[0], group[1], group[2], group[3]
        attribution = self.attribution
        assert attribution is not None  # ``ingest`` decides nothing without a plan
        source: Source | str | None
        if vni is None and outer is None:  # taken on a VM port: the agent's own server
            source = attribution.source(agent, None, None)
        else:
            verdict_key = (agent, vni, outer)
            source = self._verdicts.get(verdict_key)
            if source is None:
                if len(self._verdicts) >= VERDICT_CACHE:
                    self._verdicts.clear()
                source = self._verdicts[verdict_key] = attribution.source(
                    agent, vni, _ntoa(outer) if outer is not None else None
                )
        if isinstance(source, str):
            (self.ignored if source == "overlay_ingress" else self.dropped)[source] += n
            return None, starting
        previous = self.rate_of.get(agent)
        if rate != previous:  # only a 1-in-N the plan gave the agent (declared)
            if rate <= 0 or not self.declared.allows(agent, rate):
                self.dropped["bad_sampling_rate" if rate <= 0 else UNPLANNED_RATE] += n
                return None, starting
            self.rate_of[agent] = rate
            if previous is not None or (
                agent in self._receivers  # mirrored copies' weights follow receivers' rates
                and rate != attribution.servers[attribution.server_of_agent[agent]].sampling
            ):  # else no weight changes: the agent's first rate, as planned or no receiver's
                self._weights_changed()
        server, kind = source.server, 0 if source.kind is LOCAL else 1
        stream = (server, agent, kind)
        gate = self.streams.gate
        state = gate.get(stream) if gate else None
        if state == PENDING:  # the agent started this stream: it runs from now on, and the
            self.streams.start(server, agent, kind, now)  # samples of this first datagram
            self._weights_changed(server)  # were taken before
            starting = (starting or set()) | {stream}
        if starting is not None and stream in starting:
            self.ignored["stream_start"] += n
            return [], starting
        if state is not None:  # stopped: by a plan (local), by a guard (mirrored)
            self.dropped["stale_local" if kind == 0 else "guard_shed"] += n
            return [], starting
        weight = float(rate) if kind == 0 else 1.0 / self._q(server)
        acc = key = None
        if group[6] is None:  # grouped: their sums (per sample, ``_add_one`` finds them)
            key = (server, agent, kind, None)
            acc = sums.get(key)
            if acc is None:
                acc = sums[key] = [0, 0.0, 0.0, 0.0, 0.0, 0.0, now]
        # (1-p)/p^2: a sample's share of the variance
        slot = [bucket, acc, weight, weight * (weight - 1.0), server, source, kind, key]
        if acc is not None:
            self._slots[(agent, rate, vni, outer)] = slot
        return slot, starting

    def _weights_changed(self, server: str | None = None) -> None:
        """A rate or a running stream changed: mirrored copies' ``Q`` (of ``server``, or of
        every server) and the slots holding weights are computed again."""
        if server is None:
            self._mirror_q.clear()
        else:
            self._mirror_q.pop(server, None)
        self._slots.clear()

    def _add_one(self, agent: str, group: tuple, data: bytes, slot: list, sums: dict, now: float):
        """One sample on its own: its destination server (the traffic matrix) and the
        re-export's record."""
        _, _, weight, variance, server, source, kind, _ = slot
        flow, size, squares = group[6], group[4], group[5]
        record = flow_record(agent, flow, data)
        assert self.attribution is not None  # ``ingest`` decides nothing without a plan
        server_of_address = self.attribution.server_of_address
        dst = None
        if server_of_address:  # ("": no address, no server)
            dst = server_of_address.get(record.dst_ip or "") or server_of_address.get(
                record.dst_mac or ""
            )
        key = (server, agent, kind, dst)
        acc = sums.get(key)
        if acc is None:
            acc = sums[key] = [0, 0.0, 0.0, 0.0, 0.0, 0.0, now]
        acc[0] += 1
        acc[1] += weight
        acc[2] += size * weight
        acc[3] += squares * weight
        acc[4] += variance
        acc[5] += squares * variance
        acc[6] = now
        if self._last.get(server, 0.0) < now:
            self._last[server] = now
        if self.on_sample is not None:
            self.on_sample(record, source, self.weight(server, kind, weight))

    def _groups(self, flows: tuple, each: bool) -> list[tuple]:
        """The flow samples as ``ingest`` adds them: ``(rate, vni, outer, n, sum of frame
        lengths, sum of their squares, flow)``, samples alike but for their size added once
        (``each``: every sample on its own, with its flow for its record). A frame longer than
        any interface carries is dropped (``oversized_frame``), never weighed."""
        groups: dict[tuple, list] = {}
        out = []
        for flow in flows:
            size = flow[4]
            if size > MAX_FRAME_BYTES:
                self.dropped[OVERSIZED_FRAME] += 1
                continue
            if each:
                out.append((flow[2], flow[5], flow[6], 1, size, size * size, flow))
                continue
            like = (flow[2], flow[5], flow[6])
            group = groups.get(like)
            if group is None:
                groups[like] = [1, size, size * size]
            else:
                group[0] += 1
                group[1] += size
                group[2] += size * size
        if each:
            return out
        return [
            (rate, vni, outer, n, sizes, squares, None)
            for (rate, vni, outer), (n, sizes, squares) in groups.items()
        ]

    def guard_report(self, data: bytes, source: str, now: float) -> None:
        """A host's guard report (``guardstate``) arrived at ``now`` from ``source``: when its
        mirror rates changed, its mirrored streams restart (their first datagram after the
        report only marks the moment, as after a plan change) or stop (scale 0)."""
        self._tick(now)
        verdict = self.guards.read(data, source, now, self.attribution)
        if isinstance(verdict, str):
            self.dropped[verdict] += 1
            return
        server, rung, before = verdict
        if rung.mirror_scale != before:
            self._weights_changed(server)
            self.streams.restart(
                server, MIRRORED_KIND, now, rung.mirror_scale > 0, self._arrivals()
            )

    def _tick(self, now: float) -> None:
        """Time moves to ``now`` (a datagram's arrival): the newest bucket is ``now``'s."""
        if self._now is None or now > self._now:
            if self._first is None:
                self._first = now
            self._now = now
        bucket = int(now // self.bucket_s)
        if not self._buckets or self._buckets[-1][0] < bucket:
            self._buckets.append((bucket, {}, {}))
            self._expire(bucket)
        newest, sums, tallies = self._buckets[-1]
        self._next_bucket = (newest + 1) * self.bucket_s
        self._context[0], self._context[4], self._context[5] = newest, tallies, sums

    def _q(self, sender: str) -> float:
        """``Q`` of ``sender`` over the mirrored streams running now (pending ones do not count)."""
        q = self._mirror_q.get(sender)
        if q is None:
            q = self._mirror_q[sender] = self._running_q(sender) or 1.0
        return q

    def _running_q(self, sender: str) -> float:
        attribution = self.attribution
        assert attribution is not None  # only planned servers have mirrored streams
        servers, runs = attribution.servers, self.streams.runs
        return min(
            1.0,
            math.fsum(
                q
                for receiver, q in attribution.mirror_rates(
                    sender, self.rate_of, self.guards.scale(sender)
                ).items()
                if runs(sender, servers[receiver].agent, 1)
            ),
        )

    def _book(self, agent: str, count: float, t0: float, t1: float) -> None:
        """Spread ``count`` lost samples of ``agent`` over the buckets of ``[t0, t1]`` (the time
        the gap covers), in proportion to time; buckets already out of the window get none."""
        size = self.bucket_s
        first, last = int(t0 // size), int(t1 // size)
        oldest = self._buckets[0][0] if self.window_s is not None and self._buckets else first
        lost = self._lost
        for bucket in range(max(first, oldest), last + 1):
            share = (
                1.0
                if last == first
                else (min(t1, (bucket + 1) * size) - max(t0, bucket * size)) / (t1 - t0)
            )
            if share > 0.0:
                row = lost.get(bucket)
                if row is None:
                    row = lost[bucket] = {}
                row[agent] = row.get(agent, 0.0) + count * share

    def _discarded(self, server: str, discards: tuple) -> None:
        """Packets the agent's switch dropped: not traffic the server sent on, so not in its
        estimate (``ignored.discarded_packet``), counted per drop reason."""
        self.ignored["discarded_packet"] += len(discards)
        reasons = self.discards.setdefault(server, {})
        for discard in discards:
            reason = str(discard.reason)
            if reason in reasons or len(reasons) < 64:
                reasons[reason] = reasons.get(reason, 0) + 1

    def _interface(self, counters, now: float) -> None:
        if self.attribution is None:
            return
        server = self.attribution.server_of_agent.get(counters.agent)
        if server is None:
            self.dropped["unknown_agent_counters"] += 1
            return
        if not self.ports.add(counters, server, now):
            self.dropped["port_limit"] += 1

    def _expire(self, bucket: int) -> None:
        if self.window_s is None:
            return
        oldest = bucket - round(self.window_s / self.bucket_s)
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()
        if not self._buckets:
            self._next_bucket = -math.inf
        for old in [old for old in self._lost if old <= oldest]:
            del self._lost[old]
        self.ports.expire(bucket * self.bucket_s - self.window_s)
