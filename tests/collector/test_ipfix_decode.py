"""The IPFIX decoder (collector/ipfix.py) on captures nobody here wrote (tests/data/ipfix, README
there), field by field against tshark's decoder of the same bytes; and fuzzed: random bytes and
mutated real messages raise nothing but ``IpfixError``, and a rejected message changes no
template."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector.ipfix import IpfixError, Templates
from cosample.collector.pcap import udp_payloads

CORPUS = Path(__file__).resolve().parents[1] / "data" / "ipfix"
#: Each group is one exporter's session: its template capture, then its data capture.
GROUPS = {
    "ipfixprobe": ("ipfixprobe-templates.pcap", "ipfixprobe-data.pcap"),
    "juniper-cpid": ("juniper-cpid-template.pcap", "juniper-cpid-data.pcap"),
    "datalink": ("datalink-template.pcap", "datalink-data.pcap"),
    "ethernet-over-mpls": (
        "ethernet-over-mpls-with-control-word-template.pcap",
        "ethernet-over-mpls-with-control-word-data.pcap",
    ),
    "srv6": ("ipfix-srv6-template.pcap", "ipfix-srv6-data.pcap"),
    "mpls": ("mpls.pcap",),
    "physicalinterfaces": ("physicalinterfaces.pcap",),
    "ovs-sample-cache": ("ovs-sample-cache.pcap",),  # ours: real OVS 3.1 (README)
}
#: Our element names -> tshark's fields (Wireshark's cflow dissector).
TSHARK_FIELDS = {
    "packetDeltaCount": "cflow.packets",
    "octetDeltaCount": "cflow.octets",
    "sourceIPv4Address": "cflow.srcaddr",
    "destinationIPv4Address": "cflow.dstaddr",
    "sourceIPv6Address": "cflow.srcaddrv6",
    "destinationIPv6Address": "cflow.dstaddrv6",
    "ingressInterface": "cflow.inputint",
    "egressInterface": "cflow.outputint",
    "interfaceName": "cflow.if_name",
    "sourceTransportPort": "cflow.srcport",
    "destinationTransportPort": "cflow.dstport",
    "protocolIdentifier": "cflow.protocol",
    "sourceMacAddress": "cflow.srcmac",
    "destinationMacAddress": "cflow.dstmac",
    "observationPointId": "cflow.observation_point_id",
}
needs_tshark = pytest.mark.skipif(
    shutil.which("tshark") is None or shutil.which("mergecap") is None,
    reason="needs tshark and mergecap (bin/bootstrap.sh)",
)


def decode_files(paths, exporter: str = "192.0.2.1"):
    """Every message of ``paths``, read in order by one template state."""
    templates, messages = Templates(), []
    for path in paths:
        for when, data in udp_payloads(path):
            messages.append(templates.decode(data, exporter, when))
    return messages


def tshark_values(capture: Path, port: int) -> dict[str, list[str]]:
    """field -> every value tshark decodes, in order (one run); RFC 5103's reverse elements
    (enterprise 29305, which tshark shows under the same field and we skip as enterprise
    elements) left out."""
    argv = ["tshark", "-r", str(capture), "-d", f"udp.port=={port},cflow", "-T", "pdml"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    values: dict[str, list[str]] = {}
    for node in ElementTree.fromstring(out).iter("field"):
        if "(Reverse" not in (node.get("showname") or ""):
            values.setdefault(node.get("name"), []).append(node.get("show"))
    return values


def udp_port(path: Path) -> int:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-c", "1", "-T", "fields", "-e", "udp.dstport"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return int(out.split()[0])


def test_every_capture_decodes_with_records():
    for name, files in GROUPS.items():
        messages = decode_files([CORPUS / f for f in files])
        assert all(m.unknown_sets == 0 for m in messages), name
        assert sum(len(m.records) for m in messages) > 0, name
    assert sorted(p.name for p in CORPUS.glob("*.pcap")) == sorted(
        f for files in GROUPS.values() for f in files
    )


@needs_tshark
@pytest.mark.parametrize("name", sorted(GROUPS))
def test_fields_agree_with_tshark(name, tmp_path):
    paths = [CORPUS / f for f in GROUPS[name]]
    capture = paths[0]
    if len(paths) > 1:  # one capture, as one session: tshark needs the templates first too
        capture = tmp_path / "session.pcap"
        subprocess.run(
            ["mergecap", "-a", "-F", "pcap", "-w", str(capture), *map(str, paths)],
            check=True,
            timeout=60,
        )
    port = udp_port(capture)
    messages = decode_files(paths)
    records = [r for m in messages for r in (*m.records, *m.options)]
    compared = 0
    decoded = tshark_values(capture, port)
    for ours_name, field in TSHARK_FIELDS.items():
        ours = [str(r[ours_name]) for r in records if ours_name in r]
        theirs = decoded.get(field, [])
        assert Counter(ours) == Counter(theirs), (name, ours_name, ours, theirs)
        compared += len(ours)
    assert compared > 0
    domains = [str(m.domain) for m in messages] + [  # tshark's od_id: header and element 149
        str(r["observationDomainId"]) for r in records if "observationDomainId" in r
    ]
    assert Counter(domains) == Counter(decoded["cflow.od_id"])
    assert [str(m.sequence) for m in messages] == decoded["cflow.sequence"]


def real_messages() -> list[bytes]:
    return [
        data for files in GROUPS.values() for f in files for _, data in udp_payloads(CORPUS / f)
    ]


MESSAGES = real_messages()


def _learned() -> Templates:
    templates = Templates()
    for files in GROUPS.values():
        for f in files:
            for when, data in udp_payloads(CORPUS / f):
                templates.decode(data, "192.0.2.1", 0.0)
    return templates


LEARNED = _learned()


def learned() -> Templates:
    """The corpus's templates, a fresh copy per example (templates are immutable values)."""
    templates = Templates()
    templates._sessions.update((key, dict(value)) for key, value in LEARNED._sessions.items())
    return templates


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_random_bytes_raise_only_the_decoders_error(data):
    templates = learned()
    try:
        templates.decode(data, "192.0.2.1", 1.0)
        templates.decode(struct.pack("!HH", 10, len(data) + 4) + data, "192.0.2.1", 1.0)
    except IpfixError as exc:
        assert exc.reason.startswith("ipfix_")


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(range(len(MESSAGES))), st.data())
def test_mutated_real_messages_raise_only_the_decoders_error(index, data):
    message = bytearray(MESSAGES[index])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(message) - 1))
        message[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(message)))
    templates = learned()
    before = {key: dict(value) for key, value in templates._sessions.items()}
    try:
        templates.decode(bytes(message[:cut]), "192.0.2.1", 1.0)
    except IpfixError as exc:
        assert exc.reason.startswith("ipfix_")
        assert {key: dict(value) for key, value in templates._sessions.items()} == before


def template_message(domain: int, sequence: int, *records: bytes, set_id: int = 2) -> bytes:
    body = b"".join(records)
    sets = struct.pack("!HH", set_id, 4 + len(body)) + body
    return struct.pack("!HHIII", 10, 16 + len(sets), 0, sequence, domain) + sets


def data_message(domain: int, sequence: int, template_id: int, body: bytes) -> bytes:
    sets = struct.pack("!HH", template_id, 4 + len(body)) + body
    return struct.pack("!HHIII", 10, 16 + len(sets), 0, sequence, domain) + sets


#: template 300: packetDeltaCount (8), interfaceName (variable), an enterprise element (2 bytes)
TEMPLATE_300 = (
    struct.pack("!HH", 300, 3)
    + struct.pack("!HH", 2, 8)
    + struct.pack("!HH", 82, 65535)
    + struct.pack("!HHI", 0x8000 | 7, 2, 29305)
)


def test_variable_length_fields_enterprise_elements_and_padding():
    templates = Templates()
    templates.decode(template_message(5, 0, TEMPLATE_300), "192.0.2.1", 0.0)
    long_name = b"x" * 300
    body = (
        struct.pack("!Q", 7)
        + b"\x04eth0"
        + b"\xab\xcd"
        + struct.pack("!Q", 9)
        + b"\xff"
        + struct.pack("!H", 300)
        + long_name
        + b"\0\0"
        + b"\0\0"
    )  # padding shorter than a record
    message = templates.decode(data_message(5, 0, 300, body), "192.0.2.1", 1.0)
    assert [(r["packetDeltaCount"], r["interfaceName"]) for r in message.records] == [
        (7, "eth0"),
        (9, "x" * 300),
    ]
    assert all(set(r) == {"packetDeltaCount", "interfaceName"} for r in message.records)


def test_templates_are_per_exporter_and_domain_and_withdrawn():
    templates = Templates()
    templates.decode(template_message(5, 0, TEMPLATE_300), "192.0.2.1", 0.0)
    record = struct.pack("!Q", 3) + b"\x01a" + b"\0\0"
    assert len(templates.decode(data_message(5, 0, 300, record), "192.0.2.1", 1.0).records) == 1
    for exporter, domain in (("192.0.2.2", 5), ("192.0.2.1", 6)):
        message = templates.decode(data_message(domain, 0, 300, record), exporter, 1.0)
        assert (message.records, message.unknown_sets) == ((), 1)
    templates.decode(template_message(5, 1, struct.pack("!HH", 300, 0)), "192.0.2.1", 2.0)
    assert templates.decode(data_message(5, 1, 300, record), "192.0.2.1", 3.0).unknown_sets == 1
    templates.decode(template_message(5, 1, TEMPLATE_300), "192.0.2.1", 4.0)
    templates.decode(template_message(5, 1, struct.pack("!HH", 2, 0)), "192.0.2.1", 5.0)
    assert templates.decode(data_message(5, 1, 300, record), "192.0.2.1", 6.0).unknown_sets == 1


def test_templates_expire_unless_sent_again():
    templates = Templates(lifetime_s=100.0)
    templates.decode(template_message(5, 0, TEMPLATE_300), "192.0.2.1", 0.0)
    record = struct.pack("!Q", 3) + b"\x01a" + b"\0\0"
    assert templates.decode(data_message(5, 0, 300, record), "192.0.2.1", 99.0).records
    assert templates.decode(data_message(5, 1, 300, record), "192.0.2.1", 101.0).unknown_sets == 1
    templates.decode(template_message(5, 1, TEMPLATE_300), "192.0.2.1", 150.0)
    assert templates.decode(data_message(5, 1, 300, record), "192.0.2.1", 240.0).records


def test_a_malformed_message_changes_no_template():
    templates = Templates()
    templates.decode(template_message(5, 0, TEMPLATE_300), "192.0.2.1", 0.0)
    other = struct.pack("!HH", 300, 1) + struct.pack("!HH", 1, 4)  # 300 redefined: octets only
    bad = template_message(5, 1, other) + b"\0\2\0\x09"  # a set that claims more than is there
    bad = struct.pack("!HH", 10, len(bad)) + bad[4:]
    with pytest.raises(IpfixError) as caught:
        templates.decode(bad, "192.0.2.1", 1.0)
    assert caught.value.reason == "ipfix_bad_set_length"
    record = struct.pack("!Q", 3) + b"\x01a" + b"\0\0"
    assert templates.decode(data_message(5, 1, 300, record), "192.0.2.1", 2.0).records == (
        {"packetDeltaCount": 3, "interfaceName": "a"},
    )


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\0\x0a\0", "ipfix_truncated"),
        (struct.pack("!HHIII", 9, 16, 0, 0, 1), "ipfix_bad_version"),
        (struct.pack("!HHIII", 10, 12, 0, 0, 1), "ipfix_bad_length"),
        (struct.pack("!HHIII", 10, 40, 0, 0, 1), "ipfix_truncated"),
        (
            template_message(1, 0, struct.pack("!HH", 12, 1) + struct.pack("!HH", 2, 8)),
            "ipfix_bad_template",
        ),
        (
            template_message(1, 0, struct.pack("!HH", 300, 1) + struct.pack("!HH", 2, 0)),
            "ipfix_bad_template",
        ),
        (
            template_message(
                1, 0, struct.pack("!HHH", 300, 1, 0) + struct.pack("!HH", 2, 8), set_id=3
            ),
            "ipfix_bad_template",
        ),
        (
            template_message(1, 0, struct.pack("!HH", 300, 2) + struct.pack("!HH", 2, 8)),
            "ipfix_truncated",
        ),
    ],
)
def test_each_malformation_has_its_reason(data, reason):
    with pytest.raises(IpfixError) as caught:
        Templates().decode(data, "192.0.2.1", 0.0)
    assert caught.value.reason == reason


def test_a_record_cut_inside_a_variable_length_field_is_truncated():
    templates = Templates()
    templates.decode(template_message(5, 0, TEMPLATE_300), "192.0.2.1", 0.0)
    with pytest.raises(IpfixError) as caught:
        templates.decode(
            data_message(5, 0, 300, struct.pack("!Q", 3) + b"\x09ab"), "192.0.2.1", 1.0
        )
    assert caught.value.reason == "ipfix_truncated"


def test_sessions_and_templates_are_bounded():
    templates = Templates(max_sessions=3, max_templates=2)
    for domain in range(10):
        templates.decode(template_message(domain, 0, TEMPLATE_300), "192.0.2.1", 0.0)
    assert len(templates._sessions) == 3
    many = b"".join(struct.pack("!HH", 300 + k, 1) + struct.pack("!HH", 2, 8) for k in range(5))
    message = templates.decode(template_message(99, 0, many), "192.0.2.1", 0.0)
    assert (message.templates, message.refused_templates) == (5, 3)
