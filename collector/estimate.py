"""The collector's state: a fast path that only updates windowed sums, a normal path that estimates.

``ingest`` decodes one datagram, attributes each flow sample (``attribution``) and adds it to
per-second buckets keyed by (origin server, reporting agent, local or mirrored, destination
server); counter samples update per-port packet rates; every datagram or sample not counted
increments a named reason. ``snapshot`` turns the buckets inside the window into per-server
estimates (docs/collector.md, "Renormalisation"):

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
expiring list (``UnknownAgents``), so a flood from random sources costs no memory.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from socket import inet_ntoa as _ntoa
from collections.abc import Callable
from datetime import datetime, timezone

from cosample.collector.attribution import LOCAL, Attribution, Source
from cosample.collector.decode import DecodeError, FlowSample, flow_record, parse_grouped
from cosample.collector.exposure import PENDING, Streams, extrapolate, precision
from cosample.collector.loss import LossTracker
from cosample.collector.intervals import normal_interval, packets_interval
from cosample.collector.snapshot import PlanRef, ServerEstimate, Snapshot

#: Expected mirrored (or local) samples in a window above which none arriving means the data
#: plane does not do what the plan says (agent in its safe state, mirror not yet set up).
MISSING_STREAM_SAMPLES = 20.0
#: Verdicts cached per (agent, VNI, outer source); cleared when full (tenant tunnels are many).
VERDICT_CACHE = 4096
#: Unknown agent addresses listed in the snapshot, and for how long after their last datagram.
UNKNOWN_AGENTS_LISTED = 32
UNKNOWN_AGENT_TTL_S = 300.0
#: Port-counter rows kept per agent (a host has tens to hundreds of ports); more are dropped
#: (``port_limit``), and rows not refreshed for a window expire: bounded state.
MAX_PORTS_PER_AGENT = 1024
_WRAP = 1 << 32

Hook = Callable[[FlowSample, Source, float], None]


class Estimator:
    """Windowed per-server estimates from sFlow datagrams, renormalised by a plan."""

    def __init__(self, attribution: Attribution | None, *, window_s: float | None = 30.0,
                 name: str = "collector", partial: bool = False) -> None:
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
        self._counters: dict[tuple[str, int], tuple[float, int, int, str]] = {}
        self._ports: Counter[str] = Counter()  # agent -> rows in ``_counters``
        self.interfaces: dict[str, dict[str, dict[str, float]]] = {}
        self._last: dict[str, float] = {}
        self._mirror_q: dict[str, float] = {}
        self._verdicts: dict[tuple, Source | str] = {}
        self._first: float | None = None
        self._now: float | None = None
        self.streams = Streams(gated=not partial)
        if attribution is not None:
            self.streams.plan(attribution, None)

    # fast path -----------------------------------------------------------------------------
    def set_attribution(self, attribution: Attribution, now: float | None = None) -> None:
        """A new plan seen at ``now`` (default: the newest datagram's time): sums already taken
        keep their weights, new samples use the new plan, streams start and stop (``exposure``)."""
        self.attribution = attribution
        latest: dict[tuple[str, str, int], float] = {}

        def last(server: str, agent: str, kind: int) -> float | None:
            """Arrival of the newest datagram of a stream in the window (one pass, on demand)."""
            if not latest:
                for _, sums, _ in self._buckets:
                    for (s, a, k, _), acc in sums.items():
                        latest[(s, a, k)] = max(latest.get((s, a, k), acc[6]), acc[6])
            return latest.get((server, agent, kind))

        self.streams.plan(attribution, now if now is not None else self._now, last)
        self._mirror_q.clear()
        self._verdicts.clear()
        known = attribution.server_of_agent
        self.loss.forget(known.__contains__)
        for agent in [agent for agent in self.rate_of if agent not in known]:
            del self.rate_of[agent]
        for key in [key for key in self._counters if key[0] not in known]:
            del self._counters[key]
            self._ports[key[0]] -= 1

    def ingest(self, data: bytes, now: float) -> None:
        """Account for one datagram received at ``now`` (Unix seconds); never raises on input."""
        try:
            agent, sub_agent, number, uptime, flows, counters, discards, alike = \
                parse_grouped(data)
        except DecodeError as exc:
            self.dropped[exc.reason] += 1
            return
        self.datagrams += 1
        if self.on_datagram is not None:
            self.on_datagram(agent, flows, counters, discards)
        if self._now is None or now > self._now:
            if self._first is None:
                self._first = now
            self._now = now
        bucket = int(now // self.bucket_s)
        if not self._buckets or self._buckets[-1][0] < bucket:
            self._buckets.append((bucket, {}, {}))
            self._expire(bucket)
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
        kept = self.loss.datagram(agent, sub_agent, number, uptime, flows, now)
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
            groups = [(flow[2], flow[5], flow[6], 1, flow[4], flow[4] * flow[4], flow)
                      for flow in flows]
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
            groups = [(rate, vni, outer, n, sizes, squares, None)
                      for (rate, vni, outer), (n, sizes, squares) in alike.items()]
        for rate, vni, outer, n, sizes, squares, flow in groups:
            verdict_key = (agent, vni, outer)
            source = verdicts.get(verdict_key)
            if source is None:
                if len(verdicts) >= VERDICT_CACHE:
                    verdicts.clear()
                source = verdicts[verdict_key] = attribution.source(
                    agent, vni, _ntoa(outer) if outer is not None else None)
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
                    self._mirror_q.pop(server, None)              # datagram were taken before
                    starting = (starting or set()) | {stream}
                if starting is not None and stream in starting:
                    self.ignored["stream_start"] += n
                    continue
                if state is not None:
                    self.dropped["stale_local"] += n
                    continue
            weight = float(rate) if kind == 0 else 1.0 / self._q(server)
            variance = weight * (weight - 1.0)  # (1-p)/p^2: the sample's share of the variance
            dst = record = None
            if flow is not None:
                record = flow_record(agent, flow, data)
                if server_of_address:
                    dst = server_of_address.get(record.dst_ip) or \
                        server_of_address.get(record.dst_mac)
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

    def _q(self, sender: str) -> float:
        """``Q`` of ``sender`` over the mirrored streams running now (pending ones do not count)."""
        q = self._mirror_q.get(sender)
        if q is None:
            q = self._mirror_q[sender] = self._running_q(sender) or 1.0
        return q

    def _running_q(self, sender: str) -> float:
        servers, runs = self.attribution.servers, self.streams.runs
        return min(1.0, math.fsum(
            q for receiver, q in self.attribution.mirror_rates(sender, self.rate_of).items()
            if runs(sender, servers[receiver].agent, 1)))

    def _book(self, agent: str, count: float, t0: float, t1: float) -> None:
        """Spread ``count`` lost samples of ``agent`` over the buckets of ``[t0, t1]`` (the time
        the gap covers), in proportion to time; buckets already out of the window get none."""
        size = self.bucket_s
        first, last = int(t0 // size), int(t1 // size)
        oldest = self._buckets[0][0] if self.window_s is not None and self._buckets else first
        lost = self._lost
        for bucket in range(max(first, oldest), last + 1):
            share = 1.0 if last == first else \
                (min(t1, (bucket + 1) * size) - max(t0, bucket * size)) / (t1 - t0)
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
        key = (counters.agent, counters.if_index)
        previous = self._counters.get(key)
        if previous is None:
            if self._ports[counters.agent] >= MAX_PORTS_PER_AGENT:
                self.dropped["port_limit"] += 1
                return
            self._ports[counters.agent] += 1
        self._counters[key] = (now, counters.in_packets, counters.out_packets, server)
        if previous is None or now <= previous[0]:
            return
        elapsed = now - previous[0]
        self.interfaces.setdefault(server, {})[str(counters.if_index)] = {
            "in_pps": ((counters.in_packets - previous[1]) % _WRAP) / elapsed,
            "out_pps": ((counters.out_packets - previous[2]) % _WRAP) / elapsed}

    def _expire(self, bucket: int) -> None:
        if self.window_s is None:
            return
        oldest = bucket - round(self.window_s / self.bucket_s)
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()
        for old in [old for old in self._lost if old <= oldest]:
            del self._lost[old]
        horizon = bucket * self.bucket_s - self.window_s
        for key in [key for key, row in self._counters.items() if row[0] < horizon]:
            server = self._counters.pop(key)[3]
            self._ports[key[0]] -= 1
            rows = self.interfaces.get(server)
            if rows is not None:
                rows.pop(str(key[1]), None)
                if not rows:
                    del self.interfaces[server]

    # combination ----------------------------------------------------------------------------
    def _precisions(self, server: str, local_seen: bool = True,
                    mirrored_seen: bool = True) -> tuple[float, float, float, float]:
        """(l, Q, w_L, w_M) for ``server`` at the agents' current rates."""
        local, mirrored = self.attribution.rates(server, self.rate_of)
        if not local_seen:
            local = 0.0
        if not mirrored_seen:
            mirrored = 0.0
        return local, mirrored, _precision(local), _precision(mirrored)

    def weight(self, server: str, kind: int, stream_weight: float) -> float:
        """A sample's weight in the combined estimate (what the re-export sends as its rate)."""
        _, _, w_local, w_mirrored = self._precisions(server)
        return stream_weight * _share(w_local, w_mirrored, kind)

    # normal path ----------------------------------------------------------------------------
    def snapshot(self, now: float | None = None) -> Snapshot:
        """Estimates over the window ending at ``now`` (default: the newest datagram's time)."""
        now = now if now is not None else (self._now or 0.0)
        self._expire(int(now // self.bucket_s))
        start = self._first if self._first is not None else now
        if self.window_s is not None and self._buckets:  # the window the kept buckets cover
            start = max(start, self._buckets[0][0] * self.bucket_s)
        span = now - start
        window = max(span, 1.0)
        agents: dict[str, list[float]] = {}
        streams: dict[str, list[list[float]]] = {}  # server -> [local sums, mirrored sums]
        matrix: dict[tuple[str, str, int], float] = {}
        for _, sums, tallies in self._buckets:
            for agent, got in tallies.items():
                agents.setdefault(agent, [0, 0.0])[0] += got
        oldest = self._buckets[0][0] if self._buckets else None
        for bucket, row in self._lost.items():
            if oldest is not None and bucket >= oldest:
                for agent, lost in row.items():
                    if agent in agents:
                        agents[agent][1] += lost
        loss = {agent: (got + max(lost, 0.0)) / got if got else 1.0
                for agent, (got, lost) in agents.items()}
        for _, sums, _ in self._buckets:
            for (server, agent, kind, dst), (n, w, bw, b2w, v, b2v, _) in sums.items():
                f = loss.get(agent, 1.0)  # each received sample stands for f: weight f w
                stream = streams.setdefault(server, [[0] + [0.0] * 5, [0] + [0.0] * 5])[kind]
                stream[0] += n
                stream[1] += w * f
                stream[2] += bw * f
                stream[3] += b2w * f
                stream[4] += v * f * f + w * f * (f - 1)  # sum fw (fw - 1)
                stream[5] += b2v * f * f + b2w * f * (f - 1)
                if dst is not None:
                    matrix[(server, dst, kind)] = matrix.get((server, dst, kind), 0.0) + w * f
        self.streams.forget(start)
        servers, scales = {}, {}
        plan_servers = self.attribution.servers if self.attribution is not None else {}
        empty = [0] + [0.0] * 5
        for server in sorted(set(plan_servers) | set(streams)):
            local, mirrored = streams.get(server, (empty, empty))
            phi_l, phi_m = (self.streams.exposure(server, kind, start, now) / span if span > 0
                            else 1.0 for kind in (0, 1))
            if server in plan_servers:
                l, q, _, _ = self._precisions(server)
                coverage = min(1.0, l + q - l * q)
                q_now = self._running_q(server) if not self.partial else q
                if not self.partial:  # a stream the plan expects but that never arrives
                    if not local[0] and _expected(mirrored[1], phi_m, phi_l, l):
                        phi_l = 0.0
                    if not mirrored[0] and _expected(local[1], phi_l, phi_m, q_now):
                        phi_m = 0.0
            else:
                l = q = q_now = coverage = 0.0
            p_l = precision(phi_l, _inverse_precision(local, l, self.partial))
            p_m = precision(phi_m, _inverse_precision(mirrored, q_now, self.partial))
            a = _share(p_l, p_m, 0)
            g_l = a / phi_l if a and phi_l > 0 else 0.0  # what one counted packet weighs
            g_m = (1 - a) / phi_m if a < 1 and phi_m > 0 else 0.0
            scales[server] = (g_l, g_m)
            packets = g_l * local[1] + g_m * mirrored[1]
            octets = g_l * local[2] + g_m * mirrored[2]
            variance = octet_variance = 0.0
            for share, phi, sums in ((a, phi_l, local), (1 - a, phi_m, mirrored)):
                if share and phi > 0:
                    variance += share * share * extrapolate(sums[1], sums[4], phi)[1]
                    octet_variance += share * share * extrapolate(sums[3], sums[5], phi)[1]
            low, high = packets_interval(packets, variance, l + q)
            blow, bhigh = normal_interval(octets, octet_variance)
            last = self._last.get(server)
            servers[server] = ServerEstimate(
                packets_per_s=packets / window, packets_per_s_ci95=[low / window, high / window],
                bytes_per_s=octets / window, bytes_per_s_ci95=[blow / window, bhigh / window],
                samples=local[0] + mirrored[0], samples_per_s=(local[0] + mirrored[0]) / window,
                local_samples=local[0], mirrored_samples=mirrored[0], coverage=coverage,
                last_sample=_utc(last) if last is not None else None,
                interfaces=self.interfaces.get(server),
                packets_per_s_variance=variance / window ** 2,
                bytes_per_s_variance=octet_variance / window ** 2)
        traffic = None
        if self.attribution is not None and self.attribution.server_of_address:
            traffic = {}
            for (src, dst, kind), w in sorted(matrix.items()):
                row = traffic.setdefault(src, {})
                row[dst] = row.get(dst, 0.0) + scales.get(src, (1.0, 0.0))[kind] * w / window
        plan = None if self.attribution is None or self.attribution.plan_id is None else PlanRef(
            version=self.attribution.plan_version, plan_id=self.attribution.plan_id)
        return Snapshot.from_servers(servers, collector=self.name, time=_utc(now),
                                     window_s=window, plan=plan, traffic_pps=traffic,
                                     dropped=dict(sorted(self.dropped.items())),
                                     ignored=dict(sorted(self.ignored.items())),
                                     agents=sorted(agents),
                                     unknown_agents=self.unknown.listed(now),
                                     discards={server: dict(sorted(reasons.items()))
                                               for server, reasons in sorted(self.discards.items())},
                                     sequence=self.sequence_counts())

    def sequence_counts(self) -> dict[str, int]:
        """What the sequence numbers said since start (``loss``): resets, restarts, late."""
        loss = self.loss
        counts = {"reset": loss.resets, "restart": loss.restarts, "late": loss.late}
        return {key: value for key, value in counts.items() if value}


def _precision(probability: float) -> float:
    """``p / (1 - p)``: the precision (per packet) of a stream that samples with ``p``."""
    if probability <= 0.0:
        return 0.0
    return math.inf if probability >= 1.0 else probability / (1.0 - probability)


def _inverse_precision(sums: list, probability: float, planned: bool) -> float:
    """``(1-p)/p`` of a stream: from its samples (``sum w(w-1) / sum w``, right when rates
    changed within the window), from the plan's ``probability`` without samples or if
    ``planned`` (``--partial``: instances must weigh alike what only one of them sees)."""
    if sums[1] > 0 and not planned:
        return sums[4] / sums[1]
    return math.inf if probability <= 0.0 else (1.0 - probability) / probability


def _expected(other_total: float, other_phi: float, phi: float, probability: float) -> bool:
    """Would a stream sampling with ``probability`` over ``phi`` of the window have produced at
    least ``MISSING_STREAM_SAMPLES``, at the rate the other stream saw?"""
    if other_phi <= 0.0 or phi <= 0.0:
        return False
    return other_total / other_phi * phi * probability >= MISSING_STREAM_SAMPLES


def _share(w_local: float, w_mirrored: float, kind: int) -> float:
    """The combination weight of stream ``kind`` (0 local, 1 mirrored)."""
    if math.isinf(w_local):
        a = 1.0
    elif math.isinf(w_mirrored):
        a = 0.0
    elif w_local + w_mirrored == 0.0:
        a = 1.0
    else:
        a = w_local / (w_local + w_mirrored)
    return a if kind == 0 else 1.0 - a


def _utc(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, timezone.utc)


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
