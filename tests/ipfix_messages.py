"""IPFIX messages shaped as OVS's ``sample`` action exports them with its flow cache (one data
record per message, ``packetDeltaCount`` = sampled packets x ``65535 // P``, the
``observationPointId`` the agents set to ``P``), for the collector's unit tests; the real OVS
is in ``tests/collector/test_ipfix_ovs.py``. Also the plans that give a host the mechanism."""

from __future__ import annotations

import json
import struct

from collector_plans import plan_document

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan.document import parse_plan

TEMPLATE_ID = 300
#: observationPointId, packetDeltaCount, layer2OctetDeltaCount, octetDeltaCount,
#: destinationIPv4Address, interfaceName (variable length)
_FIELDS = ((138, 4), (2, 8), (352, 8), (1, 8), (12, 4), (82, 65535))
_NO_POINT = TEMPLATE_ID + 1  # the same without observationPointId


def _header(length: int, sequence: int, domain: int, export_time: int = 0) -> bytes:
    return struct.pack("!HHIII", 10, 16 + length, export_time, sequence, domain)


def template_message(domain: int, sequence: int = 0) -> bytes:
    records = b""
    for template_id, fields in ((TEMPLATE_ID, _FIELDS), (_NO_POINT, _FIELDS[1:])):
        records += struct.pack("!HH", template_id, len(fields))
        records += b"".join(struct.pack("!HH", element, size) for element, size in fields)
    body = struct.pack("!HH", 2, 4 + len(records)) + records
    return _header(len(body), sequence, domain) + body


def record_message(
    domain: int,
    sequence: int,
    sampled: int,
    probability: int,
    *,
    frame_bytes: int = 100,
    point: bool = True,
    dst: str = "10.0.0.2",
    name: bytes = b"vm1",
    counted: int | None = None,
    octets: int | None = None,
) -> bytes:
    """One record of ``sampled`` packets of ``frame_bytes`` each, as OVS counts them (or, for
    a forgery, ``counted`` as its packetDeltaCount and ``octets`` as its layer-2 octets)."""
    factor = SAMPLE_PROBABILITY_SCALE // probability
    values = struct.pack(
        "!QQQ",
        sampled * factor if counted is None else counted,
        sampled * frame_bytes * factor if octets is None else octets,
        sampled * (frame_bytes - 14) * factor,
    )
    values += bytes(int(part) for part in dst.split(".")) + bytes([len(name)]) + name
    if point:
        values = struct.pack("!I", probability) + values
    body = struct.pack("!HH", TEMPLATE_ID if point else _NO_POINT, 4 + len(values)) + values
    return _header(len(body), sequence, domain) + body


def sample_plan(
    probability: int = 26214,
    domain: int = 7,
    *,
    others: dict | None = None,
    agents: str = "127.29.0",
):
    """A plan whose host ``s1`` samples with OVS's action (agent 127.29.0.1), beside
    ``others`` (sFlow hosts, ``plan_document``'s form)."""
    document = plan_document({"s1": (None, {}), **(others or {})}, agents=agents)
    document["hosts"]["s1"].update(
        local_mechanism="sample",
        sample_probability=probability,
        observation_domain=domain,
        local_rate=probability / SAMPLE_PROBABILITY_SCALE,
    )
    return parse_plan(json.dumps(document).encode())
