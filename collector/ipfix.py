"""IPFIX (RFC 7011) messages -> data records, with the templates learned per exporter and domain.

Decoding is a layer of its own, as ``decode.py`` is for sFlow: bytes and the exporter's address
in, typed records out, nothing else. Templates are state, kept per *session*: (exporter
address, observation domain), as RFC 7011 section 8 scopes template ids. What it does:

- the message header (version 10, length, export time, sequence number, observation domain);
- template sets (2) and options template sets (3), template withdrawals (field count 0; the
  set's own id withdraws every template of the kind), enterprise-specific elements skipped by
  their length; options templates are kept and their records returned apart (``options``);
- data sets decoded by the template of (exporter, domain, set id), variable-length fields
  (section 7: one length byte, or 255 and two), reduced-size integers, trailing padding;
- templates expire ``lifetime_s`` after they were last (re)sent: OVS re-sends every 600 s
  (``IPFIX_TEMPLATE_INTERVAL`` in ofproto-dpif-ipfix.c), RFC 7011 8.4 asks for at least three
  times that.

What it does not do: a data set whose template is unknown (not yet sent, expired, withdrawn)
is **dropped**, counted in ``Message.unknown_sets`` (records cannot even be counted without
their template); the sequence numbers count those records, so the estimator books them as
lost like records lost on the way. A malformed message (truncated, wrong version or length, a
set or template that does not fit) raises ``IpfixError`` with a ``reason`` and changes no
template: templates a message carries take effect only when the whole message was read.
"""

from __future__ import annotations

import ipaddress
import struct
from collections import OrderedDict
from dataclasses import dataclass

from cosample.collector.errors import CollectorError

VERSION = 10
HEADER = struct.Struct("!HHIII")  # version, length, export time, sequence number, domain
_SET = struct.Struct("!HH")
_FIELD = struct.Struct("!HH")
TEMPLATE_SET, OPTIONS_TEMPLATE_SET, FIRST_DATA_SET = 2, 3, 256
VARIABLE_LENGTH = 65535
ENTERPRISE_BIT = 0x8000
#: Templates are forgotten this long after they were last sent (3 x OVS's 600 s re-send).
TEMPLATE_LIFETIME_S = 1800.0
#: Sessions (exporter, domain) whose templates are kept, and templates per session: the oldest
#: session is forgotten first; a template beyond the limit is refused (``template_limit``).
MAX_SESSIONS = 4096
MAX_TEMPLATES = 256

_UINT, _IPV4, _IPV6, _MAC, _TEXT = range(5)
#: IANA information elements the collector reads (name, how to decode); any other IANA
#: element is kept as bytes under its number, enterprise elements are skipped.
ELEMENTS: dict[int, tuple[str, int]] = {
    1: ("octetDeltaCount", _UINT),
    2: ("packetDeltaCount", _UINT),
    4: ("protocolIdentifier", _UINT),
    5: ("ipClassOfService", _UINT),
    6: ("tcpControlBits", _UINT),
    7: ("sourceTransportPort", _UINT),
    8: ("sourceIPv4Address", _IPV4),
    10: ("ingressInterface", _UINT),
    11: ("destinationTransportPort", _UINT),
    12: ("destinationIPv4Address", _IPV4),
    14: ("egressInterface", _UINT),
    27: ("sourceIPv6Address", _IPV6),
    28: ("destinationIPv6Address", _IPV6),
    34: ("samplingInterval", _UINT),
    56: ("sourceMacAddress", _MAC),
    58: ("vlanId", _UINT),
    80: ("destinationMacAddress", _MAC),
    82: ("interfaceName", _TEXT),
    83: ("interfaceDescription", _TEXT),
    85: ("octetTotalCount", _UINT),
    86: ("packetTotalCount", _UINT),
    136: ("flowEndReason", _UINT),
    138: ("observationPointId", _UINT),
    149: ("observationDomainId", _UINT),
    150: ("flowStartSeconds", _UINT),
    151: ("flowEndSeconds", _UINT),
    152: ("flowStartMilliseconds", _UINT),
    153: ("flowEndMilliseconds", _UINT),
    158: ("flowStartDeltaMicroseconds", _UINT),  # before the message's export time (OVS)
    159: ("flowEndDeltaMicroseconds", _UINT),
    256: ("ethernetType", _UINT),
    305: ("samplingPacketInterval", _UINT),
    352: ("layer2OctetDeltaCount", _UINT),
}


class IpfixError(CollectorError):
    """A message that is not well-formed IPFIX; ``reason`` is its drop counter's name."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Template:
    """A (data or options) template: ``fields`` as (name or None to skip, kind, length)."""

    fields: tuple[tuple[str | None, int, int], ...]
    min_length: int  # a record's smallest size: fixed lengths + 1 per variable-length field
    options: bool


@dataclass(frozen=True)
class Message:
    """One decoded message: its header and the flow records of its data sets."""

    exporter: str
    domain: int
    sequence: int  # data records the exporter sent in this domain before this message
    export_time: int
    records: tuple[dict, ...]  # per data record: element name (or number) -> value
    options: tuple[dict, ...] = ()  # records of options templates, decoded alike
    unknown_sets: int = 0  # data sets dropped: no template for them
    templates: int = 0  # template and withdrawal records read
    refused_templates: int = 0  # beyond MAX_TEMPLATES
    reserved_sets: int = 0  # set ids 4-255 (reserved by RFC 7011), skipped

    @property
    def data_records(self) -> int:
        """Data records decoded (what the next message's sequence number adds to this one's)."""
        return len(self.records) + len(self.options)


class Templates:
    """The template state of every session; ``decode`` reads one message with it."""

    def __init__(
        self,
        lifetime_s: float = TEMPLATE_LIFETIME_S,
        max_sessions: int = MAX_SESSIONS,
        max_templates: int = MAX_TEMPLATES,
    ) -> None:
        self.lifetime_s, self.max_sessions, self.max_templates = (
            lifetime_s,
            max_sessions,
            max_templates,
        )
        #: (exporter, domain) -> template id -> (template, time last sent)
        self._sessions: OrderedDict[tuple[str, int], dict[int, tuple[Template, float]]] = (
            OrderedDict()
        )
        #: counts the changes to the templates (``ipfixtemplates`` saves them when it moved)
        self.changes = 0

    def __len__(self) -> int:
        return sum(len(templates) for templates in self._sessions.values())

    def sessions(self) -> list[tuple[tuple[str, int], dict[int, tuple[Template, float]]]]:
        """Every session's templates, oldest session first (a copy)."""
        return [(key, dict(table)) for key, table in self._sessions.items()]

    def restore(self, sessions: dict[tuple[str, int], dict[int, tuple[Template, float]]]) -> None:
        """Take ``sessions`` (``ipfixtemplates.load``'s) as known before anything is received."""
        for key, table in sessions.items():
            self._commit(key, dict(table), max(sent for _, sent in table.values()))

    def forget(self, keep) -> None:
        """Drop the sessions whose (exporter, domain) ``keep`` rejects."""
        for key in [key for key in self._sessions if not keep(*key)]:
            del self._sessions[key]
            self.changes += 1

    def decode(self, data: bytes, exporter: str, now: float) -> Message:
        """The message in ``data`` from ``exporter`` received at ``now``; raises only
        ``IpfixError``, and then leaves every template as it was."""
        if len(data) < HEADER.size:
            raise IpfixError(
                "ipfix_truncated",
                f"message of {len(data)} bytes is shorter than the {HEADER.size}-byte IPFIX header",
            )
        version, length, export_time, sequence, domain = HEADER.unpack_from(data)
        if version != VERSION:
            raise IpfixError("ipfix_bad_version", f"version {version}, not IPFIX's {VERSION}")
        if length < HEADER.size:
            raise IpfixError("ipfix_bad_length", f"header length {length} < {HEADER.size}")
        if length > len(data):
            raise IpfixError(
                "ipfix_truncated", f"header length {length} > the {len(data)} bytes received"
            )
        key = (exporter, domain)
        current = self._sessions.get(key) or {}
        staged: dict[int, tuple[Template, float]] | None = None  # copied on the first change
        records: list[dict] = []
        options: list[dict] = []
        unknown = count = refused = reserved = 0
        offset = HEADER.size
        while offset < length:
            if length - offset < _SET.size:
                raise IpfixError(
                    "ipfix_truncated",
                    f"set header at offset {offset}: {length - offset} bytes left",
                )
            set_id, set_length = _SET.unpack_from(data, offset)
            if set_length < _SET.size or offset + set_length > length:
                raise IpfixError(
                    "ipfix_bad_set_length",
                    f"set {set_id} at offset {offset}: "
                    f"length {set_length}, {length - offset} bytes left",
                )
            body, end = offset + _SET.size, offset + set_length
            if set_id in (TEMPLATE_SET, OPTIONS_TEMPLATE_SET):
                if staged is None:
                    staged = dict(current)
                read, beyond = _templates(data, body, end, set_id, staged, now, self.max_templates)
                count, refused = count + read, refused + beyond
            elif set_id < FIRST_DATA_SET:
                reserved += 1
            else:
                table = staged if staged is not None else current
                entry = table.get(set_id)
                if entry is not None and now - entry[1] > self.lifetime_s:
                    entry = None
                if entry is None:
                    unknown += 1
                else:
                    got = _records(data, body, end, set_id, entry[0])
                    if entry[0].options:
                        options.extend(got)
                    else:
                        records.extend(got)
            offset = end
        if staged is not None:
            self._commit(key, staged, now)
        elif key in self._sessions:
            self._sessions.move_to_end(key)
        return Message(
            exporter,
            domain,
            sequence,
            export_time,
            tuple(records),
            tuple(options),
            unknown,
            count,
            refused,
            reserved,
        )

    def _commit(self, key: tuple[str, int], staged: dict, now: float) -> None:
        for template_id in [t for t, (_, sent) in staged.items() if now - sent > self.lifetime_s]:
            del staged[template_id]
        if key in self._sessions:
            self._sessions.move_to_end(key)
        elif len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        self._sessions[key] = staged
        self.changes += 1


def _templates(
    data: bytes, offset: int, end: int, set_id: int, table: dict, now: float, limit: int
) -> tuple[int, int]:
    """Read a (options) template set into ``table``: (records read, templates refused)."""
    options = set_id == OPTIONS_TEMPLATE_SET
    read = refused = 0
    while end - offset >= 4:  # fewer bytes left: padding
        template_id, field_count = _FIELD.unpack_from(data, offset)
        offset += 4
        read += 1
        if field_count == 0:  # a withdrawal; the set's own id withdraws every one of its kind
            if template_id == set_id:
                for known in [t for t, (tpl, _) in table.items() if tpl.options == options]:
                    del table[known]
            elif template_id >= FIRST_DATA_SET:
                table.pop(template_id, None)
            else:
                raise IpfixError("ipfix_bad_template", f"withdrawal of template id {template_id}")
            continue
        if template_id < FIRST_DATA_SET:
            raise IpfixError(
                "ipfix_bad_template",
                f"template id {template_id} < {FIRST_DATA_SET} in set {set_id}",
            )
        if options:
            if end - offset < 2:
                raise IpfixError(
                    "ipfix_truncated", f"options template {template_id}: no scope field count"
                )
            scope = int.from_bytes(data[offset : offset + 2], "big")
            offset += 2
            if scope == 0 or scope > field_count:
                raise IpfixError(
                    "ipfix_bad_template",
                    f"options template {template_id}: scope "
                    f"field count {scope} of {field_count} fields",
                )
        fields, minimum = [], 0
        for _ in range(field_count):
            if end - offset < 4:
                raise IpfixError(
                    "ipfix_truncated", f"template {template_id}: field list ends at offset {end}"
                )
            element, size = _FIELD.unpack_from(data, offset)
            offset += 4
            if element & ENTERPRISE_BIT:
                if end - offset < 4:
                    raise IpfixError(
                        "ipfix_truncated", f"template {template_id}: enterprise number cut off"
                    )
                offset += 4
                name, kind = None, _UINT
            else:
                name, kind = ELEMENTS.get(element, (str(element), -1))
            if size == 0:
                raise IpfixError(
                    "ipfix_bad_template",
                    f"template {template_id}: element {element & 0x7FFF} of length 0",
                )
            fields.append((name, kind, size))
            minimum += 1 if size == VARIABLE_LENGTH else size
        if template_id not in table and len(table) >= limit:
            refused += 1
            continue
        table[template_id] = (Template(tuple(fields), minimum, options), now)
    return read, refused


def _records(data: bytes, offset: int, end: int, set_id: int, template: Template) -> list[dict]:
    """The data records of one set; what is left shorter than a record is padding."""
    out = []
    while end - offset >= template.min_length:
        record = {}
        for name, kind, size in template.fields:
            if size == VARIABLE_LENGTH:
                if offset >= end:
                    raise _cut(set_id, offset)
                size = data[offset]
                offset += 1
                if size == 255:
                    if end - offset < 2:
                        raise _cut(set_id, offset)
                    size = int.from_bytes(data[offset : offset + 2], "big")
                    offset += 2
            if end - offset < size:
                raise _cut(set_id, offset)
            if name is not None:
                record[name] = _value(data[offset : offset + size], kind)
            offset += size
        out.append(record)
    return out


def _value(raw: bytes, kind: int):
    if kind == _UINT and len(raw) <= 8:  # reduced-size encoding (RFC 7011 6.2) included
        return int.from_bytes(raw, "big")
    if kind == _IPV4 and len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    if kind == _IPV6 and len(raw) == 16:
        return str(ipaddress.IPv6Address(raw))
    if kind == _MAC and len(raw) == 6:
        return raw.hex(":")
    if kind == _TEXT:
        return raw.decode("utf-8", "replace").rstrip("\0")
    return bytes(raw)


def _cut(set_id: int, offset: int) -> IpfixError:
    return IpfixError("ipfix_truncated", f"data set {set_id}: record cut off at offset {offset}")
