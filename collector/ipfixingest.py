"""The fast path for IPFIX from OVS's ``sample`` action: records -> the estimator's windowed sums.

A host whose plan says ``local_mechanism: "sample"`` takes its local share with OVS's per-flow
``sample(probability=P, obs_domain_id=D, obs_point_id=P)`` action; OVS's IPFIX exporter, with
its flow cache, sends one record per flow and export interval (docs/collector.md, "IPFIX
input"). What OVS puts in a record, checked on OVS 3.1 (``tests/collector/test_ipfix_ovs.py``)
and in its source (``ofproto/ofproto-dpif-ipfix.c``):

- ``packetDeltaCount`` is **not** the sampled packets: each sample adds ``65535 // P``
  (integer division: "the sampling probability as an approximation of the number of matched
  packets"), and the octet counts likewise ``65535 // P`` times the packet's length. So the
  sampled packets are ``packetDeltaCount / (65535 // P)`` exactly, and the estimate is those
  times ``65535 / P``, the Horvitz-Thompson weight; OVS's own integer factor would be biased
  (2 for 0.4: -20 %). A count that is not a multiple of the factor is dropped
  (``ipfix_bad_packet_count``: not the record the plan describes);
- ``observationPointId`` is exported: the agents set it to ``P``, so a record states the
  probability it was sampled with, as an sFlow sample states its rate; without it (or outside
  1..65535), the plan's ``sample_probability`` is used;
- each data record goes in a message of its own, and the sequence number counts the
  **exporter's** data messages over all its domains, including its statistics (domain 0), not
  per domain as RFC 7011 says. So the sequence is followed per exporter, domain-0 messages
  included; a host is one exporter.

A record is the sampling unit for loss: a gap in the sequence numbers is records lost, each an
unknown number of sampled packets. The window's sums are scaled by ``f = (records received +
lost) / records received``: the lost records are estimated by the mean of the received ones (a
ratio estimate), as for sFlow. The variance is two-stage: each record's sampling variance
times ``f``, plus ``f (f-1) r/(r-1) sum (y_i - mean y)^2`` over the ``r`` records received
(``y_i`` a record's estimated packets; combine.py, ``_spread``): records that vary much (an
elephant flow among mice) make lost records costly, records alike make them cheap. One record
alone cannot tell, and counts ``f (f-1) y^2``.

Bytes use the layer-2 octets (``layer2OctetDeltaCount``, the frame as sFlow's frame length),
else ``octetDeltaCount``. The sum of squared sizes within a record is unknown: it is taken as
``octets^2 / packets`` (all packets of the record alike in size, true of most flows), which is
the smallest it can be, so the bytes' variance is a lower bound for flows of mixed sizes.
"""

from __future__ import annotations

from cosample.collector.attribution import exporter_address
from cosample.collector.declared import MAX_FRAME_BYTES, record_packets_bound
from cosample.collector.estimatorstate import EstimatorState
from cosample.collector.exposure import PENDING
from cosample.collector.ipfix import IpfixError, Message, Templates
from cosample.collector.loss import WRAP
from cosample.dataplane.ipfix import CACHE_ACTIVE_TIMEOUT_S, SAMPLE_PROBABILITY_SCALE

#: Drop reasons of records that declare what the plan or an interface does not give (``declared``).
UNPLANNED_PROBABILITY, IMPLAUSIBLE_COUNT = "ipfix_unplanned_probability", "ipfix_implausible_count"
OVERSIZED_FRAME = "ipfix_oversized_frame"
#: A record's span: its (start, end) elements and their unit in seconds; OVS exports deltas
#: before the message's export time (so the start is the larger).
_SPANS = (
    ("flowEndDeltaMicroseconds", "flowStartDeltaMicroseconds", 1e-6),
    ("flowStartMilliseconds", "flowEndMilliseconds", 1e-3),
    ("flowStartSeconds", "flowEndSeconds", 1.0),
)


def _span_s(record: dict, timeout_s: float) -> float:
    """The seconds a record covers: from its own start and end, at most the flow cache's
    active timeout (OVS exports a flow's record when it times out)."""
    for first, last, unit in _SPANS:
        start, end = record.get(first), record.get(last)
        if isinstance(start, int) and isinstance(end, int):
            return min((end - start) * unit, timeout_s)
    return timeout_s


class IpfixIngest(EstimatorState):
    """``Estimator``'s IPFIX half: ``ingest_ipfix`` (state is the estimator's)."""

    templates: Templates
    ipfix_messages: int
    ipfix_records: int

    def ingest_ipfix(self, data: bytes, source: str, now: float) -> None:
        """Account for one IPFIX message from UDP ``source`` received at ``now``; never raises
        on input. Every message or record not counted increments a named reason."""
        attribution = self.attribution
        exporter = exporter_address(source)
        server = attribution.server_of_exporter.get(exporter) if attribution is not None else None
        if attribution is None or server is None:  # no template state for exporters nobody planned
            self.dropped[
                "ipfix_no_plan" if attribution is None else "ipfix_unplanned_exporter"
            ] += 1
            return
        try:
            message = self.templates.decode(data, exporter, now)
        except IpfixError as exc:
            self.dropped[exc.reason] += 1
            return
        self.ipfix_messages += 1
        self._tick(now)
        plan = attribution.servers[server]
        key, planned = plan.ipfix_key, plan.sample_probability
        assert key is not None and planned is not None  # the plan names IPFIX exporters only
        if message.unknown_sets:
            self.dropped["ipfix_unknown_template"] += message.unknown_sets
        if message.refused_templates:
            self.dropped["ipfix_template_limit"] += message.refused_templates
        if message.reserved_sets:
            self.dropped["ipfix_reserved_set"] += message.reserved_sets
        if message.options:
            self.ignored["ipfix_options_record"] += len(message.options)
        count = message.data_records
        if not count:
            return
        numbers = tuple(((message.sequence + k) % WRAP, 0, 0, 0) for k in range(count))
        kept = self.loss.datagram(key, 0, message.sequence, 0, numbers, now)
        records = message.records
        if len(kept) != count:  # a duplicated message
            self.dropped["ipfix_duplicate"] += count
            return
        if message.domain == 0:  # the exporter's own statistics: only its sequence counts
            return
        if message.domain != plan.observation_domain:
            self.dropped["ipfix_domain_mismatch"] += len(records)
            return
        self._ipfix_records(server, key, planned, message, now)

    def _ipfix_records(
        self, server: str, key: str, planned: int, message: Message, now: float
    ) -> None:
        attribution = self.attribution
        assert attribution is not None  # (``ingest_ipfix`` takes nothing without a plan)
        timeout = attribution.ipfix_timeout_s or CACHE_ACTIVE_TIMEOUT_S
        gate = self.streams.gate
        if gate:
            state = gate.get((server, key, 0))
            if state == PENDING:  # the agents started the mechanism: it runs from now on,
                self.streams.start(server, key, 0, now)  # what this message holds was
                self.ignored["stream_start"] += len(message.records)  # sampled before
                return
            if state is not None:
                self.dropped["stale_local"] += len(message.records)
                return
        _, sums, agents = self._buckets[-1]
        server_of_address = attribution.server_of_address
        received = 0
        declared, rate_of, dropped = self.declared, self.rate_of, self.dropped
        for record in message.records:
            probability = record.get("observationPointId")
            if probability is None:  # not exported: the plan's (or what was carried)
                probability = rate_of.get(key) or planned
            elif probability != rate_of.get(key) and not (
                isinstance(probability, int) and declared.allows(key, probability)
            ):
                dropped[UNPLANNED_PROBABILITY] += 1  # not the P the plan gave this host
                continue
            factor = SAMPLE_PROBABILITY_SCALE // probability
            counted = record.get("packetDeltaCount")
            if not isinstance(counted, int) or counted <= 0 or counted % factor:
                dropped["ipfix_bad_packet_count"] += 1
                continue
            n = counted // factor
            if n > record_packets_bound(probability, _span_s(record, timeout)):
                dropped[IMPLAUSIBLE_COUNT] += 1  # more than an interface carries in its span
                continue
            octets = record.get("layer2OctetDeltaCount", record.get("octetDeltaCount", 0))
            if not isinstance(octets, int):
                octets = 0
            if octets > counted * MAX_FRAME_BYTES:
                dropped[OVERSIZED_FRAME] += 1  # frames longer than an interface carries
                continue
            size = octets / factor
            weight = SAMPLE_PROBABILITY_SCALE / probability
            squares = size * size / n
            variance = weight * (weight - 1.0)
            if rate_of.get(key) != probability:
                rate_of[key] = probability
            dst = None
            if server_of_address:
                dst = server_of_address.get(
                    record.get("destinationIPv4Address")
                    or record.get("destinationIPv6Address")
                    or ""
                ) or server_of_address.get(record.get("destinationMacAddress") or "")
            acc = sums.get((server, key, 0, dst))
            if acc is None:
                acc = sums[(server, key, 0, dst)] = [0, 0.0, 0.0, 0.0, 0.0, 0.0, now, 0.0, 0.0, 0]
            acc[0] += n
            acc[1] += n * weight
            acc[2] += size * weight
            acc[3] += squares * weight
            acc[4] += n * variance
            acc[5] += squares * variance
            acc[6] = now
            acc[7] += (n * weight) ** 2  # the record's estimate squared: its loss variance
            acc[8] += (size * weight) ** 2
            acc[9] += 1  # records
            received += 1
            self.samples += n
            self.ipfix_records += 1
        if received:
            agents[key] = agents.get(key, 0) + received
            if self._last.get(server, 0.0) < now:
                self._last[server] = now
