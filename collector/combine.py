"""The estimator's normal path: windowed sums -> per-server estimates, as snapshot columns.

``Estimates`` is the half of ``estimate.Estimator`` that runs once per export (the fast path
only adds to buckets). Per server, the local stream estimates ``L = sum 1/l`` and the mirrored
stream ``M = sum 1/Q``, each over its exposure ``phi`` (``exposure``), combined by their
precisions ``P = phi / (1/w + 1 - phi)``: ``X = a L/phi_L + (1-a) M/phi_M``, ``a = P_L / (P_L +
P_M)``, variance ``a^2 Var_L + (1-a)^2 Var_M``; sums are scaled by each agent's
``(received + lost) / received`` (``loss``). docs/collector.md, "Renormalisation".

``snapshot_data`` gives the snapshot as the plain columns the format declares (what
``Snapshot.model_validate`` takes, and ``snapshotwire.snapshot_json`` writes without pydantic);
``snapshot`` validates them into the model.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from cosample.collector.estimatorstate import EstimatorState
from cosample.collector.exposure import extrapolate, precision
from cosample.collector.snapshotwire import SERVER_COLUMNS, traffic_columns
from cosample.intervals import normal_interval, packets_interval

if TYPE_CHECKING:  # pydantic's models: only where a snapshot model is asked for
    from cosample.collector.snapshot import Snapshot

#: Expected mirrored (or local) samples in a window above which none arriving means the data
#: plane does not do what the plan says (agent in its safe state, mirror not yet set up).
MISSING_STREAM_SAMPLES = 20.0
#: A server's local and mirrored sample counts saturate here, so that they and their sum fit the
#: binary form's 64-bit integers: exports never fail on input (issue 41: IPFIX counts summing
#: past 2^63 made every binary export fail for a whole window).
MAX_COUNT = 2**62 - 1


class Estimates(EstimatorState):
    """The normal path of ``Estimator`` (its state is the estimator's: see estimate.py)."""

    def _precisions(
        self, server: str, local_seen: bool = True, mirrored_seen: bool = True
    ) -> tuple[float, float, float, float]:
        """(l, Q, w_L, w_M) for ``server`` at the agents' current rates."""
        assert self.attribution is not None  # weights are asked of planned servers only
        local, mirrored = self.attribution.rates(server, self.rate_of, self.guards.scale(server))
        if not local_seen:
            local = 0.0
        if not mirrored_seen:
            mirrored = 0.0
        return local, mirrored, _precision(local), _precision(mirrored)

    def weight(self, server: str, kind: int, stream_weight: float) -> float:
        """A sample's weight in the combined estimate (what the re-export sends as its rate)."""
        _, _, w_local, w_mirrored = self._precisions(server)
        return stream_weight * _share(w_local, w_mirrored, kind)

    def snapshot(self, now: float | None = None) -> Snapshot:
        """Estimates over the window ending at ``now`` (default: the newest datagram's time)."""
        from cosample.collector.snapshot import Snapshot  # pydantic's model: only when asked for

        return Snapshot.model_validate(self.snapshot_data(now))

    def snapshot_data(self, now: float | None = None) -> dict[str, Any]:
        """``snapshot``'s fields as plain columns, not validated (``Snapshot.model_validate``
        or ``snapshotwire.snapshot_json`` take them)."""
        now = now if now is not None else (self._now or 0.0)
        self._expire(int(now // self.bucket_s))
        start = self._first if self._first is not None else now
        if self.window_s is not None and self._buckets:  # the window the kept buckets cover
            start = max(start, self._buckets[0][0] * self.bucket_s)
        span = now - start
        window = max(span, 1.0)
        loss, agents = self._loss_factors()
        streams, matrix = self._stream_sums(loss)
        self.streams.forget(start)
        moment = _utc(now)
        columns: dict[str, list] = {key: [] for key in SERVER_COLUMNS}
        ports, scales = [], {}
        plan_servers = self.attribution.servers if self.attribution is not None else {}
        empty = [0] + [0.0] * 5
        for k, server in enumerate(sorted(set(plan_servers) | set(streams))):
            local, mirrored = streams.get(server, (empty, empty))
            row, scales[server] = self._estimate(
                server, local, mirrored, start, now, span, server in plan_servers
            )
            packets, variance, octets, octet_variance, low, high, blow, bhigh, coverage = row
            local_samples, mirrored_samples = min(local[0], MAX_COUNT), min(mirrored[0], MAX_COUNT)
            samples = local_samples + mirrored_samples
            last = self._last.get(server)
            for key, value in zip(
                SERVER_COLUMNS,
                (
                    server,
                    packets / window,
                    low / window,
                    high / window,
                    octets / window,
                    blow / window,
                    bhigh / window,
                    samples,
                    samples / window,
                    local_samples,
                    mirrored_samples,
                    float(coverage),
                    max(0.0, (moment - _utc(last)).total_seconds()) if last is not None else None,
                    variance / window**2,
                    octet_variance / window**2,
                ),
            ):
                columns[key].append(value)
            for port, rates in sorted((self.ports.rates.get(server) or {}).items()):
                ports.append((k, port, rates))
        traffic: dict[str, dict[str, float]] | None = None
        if self.attribution is not None and self.attribution.server_of_address:
            traffic = {}
            for (src, dst, kind), w in sorted(matrix.items()):
                to = traffic.setdefault(src, {})
                to[dst] = to.get(dst, 0.0) + scales.get(src, (1.0, 0.0))[kind] * w / window
        attribution = self.attribution
        plan = (
            None
            if attribution is None or attribution.plan_id is None
            else {"version": attribution.plan_version, "plan_id": attribution.plan_id}
        )
        return {
            "collector": self.name,
            "time": moment,
            "window_s": float(window),
            "plan": plan,
            "servers": columns,
            "interfaces": None
            if not ports
            else {
                "server": [k for k, _, _ in ports],
                "port": [p for _, p, _ in ports],
                "in_pps": [r["in_pps"] for _, _, r in ports],
                "out_pps": [r["out_pps"] for _, _, r in ports],
            },
            "traffic_pps": traffic_columns(traffic) if traffic is not None else None,
            "dropped": dict(sorted(self.dropped.items())),
            "ignored": dict(sorted(self.ignored.items())),
            "agents": _heard(self.attribution, agents),
            "unknown_agents": self.unknown.listed(now),
            "sequence": self.sequence_counts(),
            "discards": {
                server: dict(sorted(reasons.items()))
                for server, reasons in sorted(self.discards.items())
            },
            "guard": {
                server: {**rung, "since": _utc(rung["since"])}
                for server, rung in self.guards.snapshot().items()
            },
        }

    def _loss_factors(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        """agent -> ``(received + lost) / received`` over the window; agent -> [got, lost]."""
        agents: dict[str, list[float]] = {}
        for _, _, tallies in self._buckets:
            for agent, got in tallies.items():
                agents.setdefault(agent, [0, 0.0])[0] += got
        oldest = self._buckets[0][0] if self._buckets else None
        for bucket, row in self._lost.items():
            if oldest is not None and bucket >= oldest:
                for agent, lost in row.items():
                    if agent in agents:
                        agents[agent][1] += lost
        loss = {
            agent: (got + max(lost, 0.0)) / got if got else 1.0
            for agent, (got, lost) in agents.items()
        }
        return loss, agents

    def _stream_sums(self, loss: dict[str, float]) -> tuple[dict, dict]:
        """server -> [local sums, mirrored sums], loss-scaled; (src, dst, kind) -> packets."""
        streams: dict[str, list[list[float]]] = {}
        matrix: dict[tuple[str, str, int], float] = {}
        records: dict[tuple[str, int], list[float]] = {}  # IPFIX: f, sum y, y^2, by, by^2, count
        for _, sums, _ in self._buckets:
            for (server, agent, kind, dst), acc in sums.items():
                n, w, bw, b2w, v, b2v = acc[:6]
                f = loss.get(agent, 1.0)  # each received sample stands for f: weight f w
                pair = streams.get(server)
                if pair is None:
                    pair = streams[server] = [[0] + [0.0] * 5, [0] + [0.0] * 5]
                stream = pair[kind]
                stream[0] += n
                stream[1] += w * f
                stream[2] += bw * f
                stream[3] += b2w * f
                if len(acc) > 7:  # IPFIX records (``ipfixingest``): lost whole, record by record
                    stream[4] += v * f
                    stream[5] += b2v * f
                    tally = records.setdefault((server, kind), [f, 0.0, 0.0, 0.0, 0.0, 0])
                    for k, value in enumerate((w, acc[7], bw, acc[8], acc[9]), 1):
                        tally[k] += value
                else:  # sum fw (fw - 1): per sample, the same two-stage variance
                    stream[4] += v * f * f + w * f * (f - 1)
                    stream[5] += b2v * f * f + b2w * f * (f - 1)
                if dst is not None:
                    matrix[(server, dst, kind)] = matrix.get((server, dst, kind), 0.0) + w * f
        for (server, kind), (f, y, y2, by, by2, count) in records.items():
            stream = streams[server][kind]
            stream[4] += f * (f - 1) * _spread(y, y2, count)
            stream[5] += f * (f - 1) * _spread(by, by2, count)
        return streams, matrix

    def _estimate(
        self,
        server: str,
        local: list,
        mirrored: list,
        start: float,
        now: float,
        span: float,
        planned: bool,
    ) -> tuple[tuple, tuple[float, float]]:
        """One server's packets, variance, octets, their variance, both intervals and its
        coverage (over the window, not yet per second); and what one counted packet of each
        stream weighs."""
        phi_l, phi_m = (
            self.streams.exposure(server, kind, start, now) / span if span > 0 else 1.0
            for kind in (0, 1)
        )
        if planned:
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
        packets = g_l * local[1] + g_m * mirrored[1]
        octets = g_l * local[2] + g_m * mirrored[2]
        variance = octet_variance = 0.0
        for share, phi, sums in ((a, phi_l, local), (1 - a, phi_m, mirrored)):
            if share and phi > 0:
                variance += share * share * extrapolate(sums[1], sums[4], phi)[1]
                octet_variance += share * share * extrapolate(sums[3], sums[5], phi)[1]
        low, high = packets_interval(packets, variance, l + q)
        blow, bhigh = normal_interval(octets, octet_variance)
        return (packets, variance, octets, octet_variance, low, high, blow, bhigh, coverage), (
            g_l,
            g_m,
        )

    def sequence_counts(self) -> dict[str, int]:
        """What the sequence numbers said since start (``loss``): resets, restarts, late."""
        loss = self.loss
        counts = {"reset": loss.resets, "restart": loss.restarts, "late": loss.late}
        return {key: value for key, value in counts.items() if value}


def _spread(total: float, squares: float, count: float) -> float:
    """The lost records' share of the variance, over ``f (f-1)``: the lost records are
    estimated by the mean of the ``count`` received (a ratio estimate), so what counts is how
    the records' values ``y`` vary, ``r/(r-1) sum (y - mean)^2``; one record alone says nothing
    of that, and counts as its ``y^2`` (the Horvitz-Thompson bound)."""
    if count < 2:
        return squares
    return max(0.0, squares - total * total / count) * count / (count - 1)


def _heard(attribution, agents) -> list[str]:
    """The agent addresses heard: an IPFIX stream's key (``ipfix/<domain>``) as its exporter's."""
    exporters = (
        {}
        if attribution is None
        else {plan.ipfix_key: plan.agent for plan in attribution.servers.values() if plan.ipfix_key}
    )
    return sorted({exporters.get(agent) or agent for agent in agents})


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
