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

from cosample.collector.attribution import LOCAL, Attribution, Source
from cosample.collector.combine import Estimates
from cosample.collector.decode import DecodeError, FlowSample, parse_grouped
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
    ) -> None:
        self.attribution = attribution
        #: Another instance may hold the other stream of a server (SO_REUSEPORT workers): never
        #: conclude that a stream the plan expects is missing.
        self.partial = partial
        self.window_s = window_s  # None: everything since the start (replay)
        self.name = name
        self.dropped: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()
        self.datagrams = 0
        self.samples = 0
        self.rate_of: dict[str, int] = {}  # agent -> the 1-in-N it reported last
        self.on_sample: Hook | None = None  # re-export
        #: Sees every decoded datagram as ``(agent, flows, counters, discards)`` (replay's list
        #: of the agents heard).
        self.on_datagram: Callable[[str, tuple, tuple, tuple], None] | None = None
        #: sums are kept per bucket of ``bucket_s`` seconds: a tenth of the window (memory grows
        #: with the number of buckets, the window slides by one bucket)
        self.bucket_s = max(1.0, window_s / 10) if window_s else 60.0
        self._buckets: deque[tuple[int, dict, dict]] = deque()
        self.loss = LossTracker(self._book)
        self._lost: dict[int, dict[str, float]] = {}  # bucket -> agent -> samples lost in it
        self.unknown = UnknownAgents()
        self.discards: dict[str, dict[str, int]] = {}  # server -> drop reason -> discards
        self.ports = PortRates()  # interface counters -> port rates
        self._last: dict[str, float] = {}
        self._mirror_q: dict[str, float] = {}
        self._verdicts: dict[tuple, Source | str] = {}
        self._first: float | None = None
        self._now: float | None = None
        self.streams = Streams(gated=not partial)
        self.templates = Templates()  # IPFIX templates per (exporter, domain)
        self.ipfix_messages = 0
        self.ipfix_records = 0
        #: the rung each host's guard runs (its reports: ``guard_report``)
        self.guards = GuardBook()
        if attribution is not None:
            self.streams.plan(attribution, None)

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
        known = set(attribution.server_of_agent)
        known.update(plan.ipfix_key for plan in attribution.servers.values() if plan.ipfix_key)
        self.loss.forget(known.__contains__)
        for agent in [agent for agent in self.rate_of if agent not in known]:
            del self.rate_of[agent]
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
        """Account for one datagram received at ``now`` (Unix seconds); never raises on input."""
        try:
            agent, sub_agent, number, uptime, flows, counters, discards, alike, runs = (
                parse_grouped(data)
            )
        except DecodeError as exc:
            self.dropped[exc.reason] += 1
            return
        self.datagrams += 1
        if self.on_datagram is not None:
            self.on_datagram(agent, flows, counters, discards)
        self._tick(now)
        _, sums, agents = self._buckets[-1]
        attribution = self.attribution
        if attribution is None:
            self.dropped["no_plan"] += len(flows) + len(discards)
            return
        self.samples += len(flows)
        home = attribution.server_of_agent.get(agent)
        if home is None:  # no state for agents nobody named
            self.unknown.heard(agent, now)
            self.dropped["unknown_agent"] += len(flows) + len(discards)
            if counters:
                self.dropped["unknown_agent_counters"] += len(counters)
            return
        if discards:
            self._discarded(home, discards)
        kept = self.loss.datagram(agent, sub_agent, number, uptime, flows, now, runs)
        if kept is not flows:
            self.dropped["duplicate"] += len(flows) - len(kept)
            flows, alike = kept, None
        received = 0
        server_of_address = attribution.server_of_address
        verdicts, rate_of = self._verdicts, self.rate_of
        last_seen, hook = self._last, self.on_sample
        need_record = hook is not None or bool(server_of_address)
        agent_rate = rate_of.get(agent)
        gate, starting = self.streams.gate, None
        if need_record:  # each sample on its own: its destination, the re-export's record
            groups = [
                (flow[2], flow[5], flow[6], 1, flow[4], flow[4] * flow[4], flow) for flow in flows
            ]
        elif alike is not None:  # grouped by the compiled scan, as below
            groups = alike
        else:  # samples alike but for their size are added once per datagram (the common case)
            alike = {}
            for flow in flows:
                like = (flow[2], flow[5], flow[6])
                size = flow[4]
                group = alike.get(like)
                if group is None:
                    alike[like] = [1, size, size * size]
                else:
                    group[0] += 1
                    group[1] += size
                    group[2] += size * size
            groups = [
                (rate, vni, outer, n, sizes, squares, None)
                for (rate, vni, outer), (n, sizes, squares) in alike.items()
            ]
        for rate, vni, outer, n, sizes, squares, flow in groups:
            verdict_key = (agent, vni, outer)
            source = verdicts.get(verdict_key)
            if source is None:
                if len(verdicts) >= VERDICT_CACHE:
                    verdicts.clear()
                source = verdicts[verdict_key] = attribution.source(
                    agent, vni, _ntoa(outer) if outer is not None else None
                )
            if source.__class__ is str:
                (self.ignored if source == "overlay_ingress" else self.dropped)[source] += n
                continue
            if rate <= 0:
                self.dropped["bad_sampling_rate"] += n
                continue
            if rate != agent_rate:
                rate_of[agent] = agent_rate = rate
                self._mirror_q.clear()
            received += n
            server = source.server
            kind = 0 if source.kind is LOCAL else 1
            if gate or starting is not None:
                stream = (server, agent, kind)
                state = gate.get(stream) if gate else None
                if state == PENDING:  # the agent started this stream: it runs from now on, and
                    self.streams.start(server, agent, kind, now)  # the samples of this first
                    self._mirror_q.pop(server, None)  # datagram were taken before
                    starting = (starting or set()) | {stream}
                if starting is not None and stream in starting:
                    self.ignored["stream_start"] += n
                    continue
                if state is not None:  # stopped: by a plan (local), by a guard (mirrored)
                    self.dropped["stale_local" if kind == 0 else "guard_shed"] += n
                    continue
            weight = float(rate) if kind == 0 else 1.0 / self._q(server)
            variance = weight * (weight - 1.0)  # (1-p)/p^2: the sample's share of the variance
            dst = record = None
            if flow is not None:
                record = flow_record(agent, flow, data)
                if server_of_address:
                    dst = server_of_address.get(record.dst_ip) or server_of_address.get(
                        record.dst_mac
                    )
            key = (server, agent, kind, dst)
            acc = sums.get(key)
            if acc is None:
                acc = sums[key] = [0, 0.0, 0.0, 0.0, 0.0, 0.0, now]
            acc[0] += n
            acc[1] += n * weight
            acc[2] += sizes * weight
            acc[3] += squares * weight
            acc[4] += n * variance
            acc[5] += squares * variance
            acc[6] = now  # arrival of the stream's newest datagram (where a dropped one ends)
            if last_seen.get(server, 0.0) < now:
                last_seen[server] = now
            if hook is not None:
                hook(record, source, self.weight(server, kind, weight))
        if received:
            agents[agent] = agents.get(agent, 0) + received
        for counter in counters:
            self._interface(counter, now)

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
            self._mirror_q.pop(server, None)
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

    def _q(self, sender: str) -> float:
        """``Q`` of ``sender`` over the mirrored streams running now (pending ones do not count)."""
        q = self._mirror_q.get(sender)
        if q is None:
            q = self._mirror_q[sender] = self._running_q(sender) or 1.0
        return q

    def _running_q(self, sender: str) -> float:
        servers, runs = self.attribution.servers, self.streams.runs
        return min(
            1.0,
            math.fsum(
                q
                for receiver, q in self.attribution.mirror_rates(
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
        for old in [old for old in self._lost if old <= oldest]:
            del self._lost[old]
        self.ports.expire(bucket * self.bucket_s - self.window_s)
