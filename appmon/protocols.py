"""Which application protocol a connection speaks, from a plan's declaration or its first bytes.

``http`` is HTTP/1.x in clear text, ``h2c`` HTTP/2 in clear text, ``tls`` HTTP/1.1 over TLS and
``h2`` HTTP/2 over TLS (both read at the TLS record layer, without keys). A service port may be
declared (``--protocol PORT=NAME``, a plan's service ``protocol``); on any other port a
connection opened by a SYN is told by its client's first bytes: the HTTP/2 preface, a TLS
handshake record, else HTTP/1.x. Pure.
"""

from __future__ import annotations

from cosample.appmon.h2 import PREFACE, plausible_frame

PROTOCOLS = ("http", "h2c", "tls", "h2")
#: Protocols read at the TLS record layer.
OVER_TLS = frozenset(("tls", "h2"))
TLS_HANDSHAKE, TLS_APPLICATION_DATA = 0x16, 0x17


def detect(payload: bytes) -> str:
    """The protocol a client's first payload bytes announce."""
    if len(payload) >= 3:
        if payload[0] == TLS_HANDSHAKE and payload[1] == 3 and payload[2] <= 4:
            return "tls"
        if PREFACE.startswith(payload[:24]):
            return "h2c"
    return "http"


def record_header(data: bytes) -> bool:
    """Whether ``data`` begins with a plausible TLS record header (type 20-23, version 3.x)."""
    return len(data) >= 5 and 20 <= data[0] <= 23 and data[1] == 3 and data[2] <= 4


def resumes(protocol: str, payload: bytes) -> bool:
    """Whether a connection of a declared ``protocol`` picked up mid-stream can start here."""
    if protocol == "h2c":
        return plausible_frame(payload)
    if protocol in OVER_TLS:
        return record_header(payload)
    return False


def parse_declarations(items: list[str]) -> dict[int, str]:
    """``PORT=PROTOCOL`` items (``443=tls``) as a mapping; ValueError naming a bad one."""
    declared = {}
    for item in items:
        port, sep, name = item.partition("=")
        if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"{item!r}: expected PORT=PROTOCOL, PORT 1-65535")
        if name not in PROTOCOLS:
            raise ValueError(f"{item!r}: protocol {name!r} is not one of {', '.join(PROTOCOLS)}")
        declared[int(port)] = name
    return declared
