"""A host's application-monitoring entries in a plan (``hosts.<h>.appmon``): which services
it copies to an analyser, by which mechanism (docs/appmon-mechanisms.md). Strict (unknown keys
refused), unlike the rest of the plan; read by ``document.HostPlan``."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from cosample.plan.errors import fail_at as _fail
from cosample.validation import HostName, InterfaceName, Strict

#: Bytes of a frame an application mirror keeps: OVS's bounds for ``Mirror.snaplen`` and
#: ``output(max_len=...)`` (at least an Ethernet header).
TRUNCATE_BYTES = (14, 65535)
#: A selective mirror with ``share`` < 1 copies the connections whose client port's low
#: ``SHARE_BITS`` bits are below ``selected_share(share)`` of ``2**SHARE_BITS``.
SHARE_BITS = 8
#: ``kernel_mirror``: the service's segments copied by the kernel on the VM's port (cls_bpf +
#: ``mirred``, docs/appmon-mechanisms.md): the server's timing, no truncation.
AppmonMechanism = Literal["port_mirror", "selective_mirror", "kernel_mirror", "sniffer"]
#: Which TCP segments of a service's connections are copied: those with PSH (service time),
#: those plus FIN/RST (connection ends too), or all of them.
AppmonSegments = Literal["psh", "psh+ends", "all"]
#: What a service speaks (``appmon.protocols``): HTTP/1.x, HTTP/2 in clear text, HTTP/1.1 over
#: TLS, HTTP/2 over TLS (both read at the TLS record layer).
AppmonProtocol = Literal["http", "h2c", "tls", "h2"]
#: The segments a mirror copies when the entry does not say (docs/appmon-mechanisms.md): an
#: HTTP/1.x message starts a segment and ends with PSH; an HTTP/2 frame or a TLS record starts
#: anywhere in a segment, and an answer's first segment carries no PSH when it spans several.
DEFAULT_SEGMENTS = {"http": "psh", "h2c": "all", "tls": "all", "h2": "all"}
#: Protocols only whole segments serve: h2c's framing needs every frame header, and its HPACK
#: table every header block (TLS needs only each segment's first record header: cut copies do).
UNCUT = frozenset({"h2c"})


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("expected an IP address") from None


class AppmonService(Strict):
    """A monitored service: a VM's address and TCP port, and its protocol."""

    address: Annotated[str, AfterValidator(_ip)]
    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: AppmonProtocol = "http"


class AppmonEntry(Strict):
    """One service monitored on this host, and how its packets reach the analyser.

    ``to`` is the analysis host (``null``: on this host). Mirrors need ``to``; a port mirror and
    the sniffer need ``interface`` (the VM's port, or where the sniffer listens); ``segments``
    defaults to ``psh`` for HTTP/1.x and ``all`` for the other protocols (``DEFAULT_SEGMENTS``)
    for the selective mirror, the kernel mirror and the sniffer, and must be ``all`` (the
    default) for a port mirror, which copies every packet of the port. A kernel mirror needs
    ``interface`` (the VM's port, where its tc filters sit) and cannot truncate. An h2c service
    needs every segment, whole.
    """

    service: AppmonService
    mechanism: AppmonMechanism
    truncate_bytes: Annotated[int, Field(ge=TRUNCATE_BYTES[0], le=TRUNCATE_BYTES[1])] | None = None
    to: HostName | None = None
    interface: InterfaceName | None = None
    segments: AppmonSegments | None = None
    #: share of the service's connections the plan budgets for (the planner's, under overload);
    #: the agents copy every connection, the analyser's counts are renormalised by it
    share: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "AppmonEntry":
        if self.mechanism != "sniffer" and self.to is None:
            _fail(("to",), f"a {self.mechanism} needs an analysis host", None)
        if self.mechanism != "selective_mirror" and self.interface is None:
            _fail(
                ("interface",),
                f"a {self.mechanism} needs the interface it "
                f"{'listens on' if self.mechanism == 'sniffer' else 'mirrors'}",
                None,
            )
        if self.mechanism == "selective_mirror" and self.interface is not None:
            _fail(
                ("interface",),
                "a selective mirror matches the service's connections on every port; no interface",
                self.interface,
            )
        if self.mechanism == "kernel_mirror" and self.truncate_bytes is not None:
            _fail(
                ("truncate_bytes",),
                "a kernel mirror (tc mirred) copies whole frames; it "
                "cannot truncate (use a selective_mirror with truncate_bytes)",
                self.truncate_bytes,
            )
        protocol = self.service.protocol
        if protocol in UNCUT and self.truncate_bytes is not None:
            _fail(
                ("truncate_bytes",),
                f"a {protocol} service needs whole segments (an HTTP/2 frame header or header "
                f"block may sit past any cut); no truncate_bytes",
                self.truncate_bytes,
            )
        if protocol in UNCUT and self.segments not in (None, "all"):
            _fail(
                ("segments",),
                f"a {protocol} service needs every segment (frames start anywhere, a response's "
                f"HEADERS in a segment without PSH); only 'all'",
                self.segments,
            )
        if self.mechanism == "port_mirror" and self.segments not in (None, "all"):
            _fail(
                ("segments",),
                "an OVS Mirror copies every packet of the port; only 'all'",
                self.segments,
            )
        return self

    @property
    def copied_segments(self) -> str:
        if self.segments is not None:
            return self.segments
        if self.mechanism == "port_mirror":
            return "all"
        return DEFAULT_SEGMENTS[self.service.protocol]


def selected_share(share: float | None) -> int:
    """How many of the ``2**SHARE_BITS`` client-port residues a selective mirror copies for a
    planned ``share`` (None: all): rounded down, so the CPU stays within what was planned, and
    at least one. The analyser renormalises by ``selected_share(share) / 2**SHARE_BITS``."""
    whole = 1 << SHARE_BITS
    if share is None:
        return whole
    return max(1, min(whole, int(share * whole + 1e-9)))


def check_appmon(entries: tuple[AppmonEntry, ...]) -> None:
    """One entry per service, mechanism and analysis host; one Mirror (one snaplen) per host."""
    seen: dict[tuple, int] = {}
    snaplens: dict[str | None, tuple[int, int | None]] = {}
    for k, entry in enumerate(entries):
        key = (entry.service.address, entry.service.port, entry.mechanism, entry.to)
        if key in seen:
            _fail(
                ("appmon", k),
                f"same service, mechanism and analysis host as appmon[{seen[key]}]",
                f"{entry.service.address}:{entry.service.port}",
            )
        seen[key] = k
        if entry.mechanism == "port_mirror":
            first = snaplens.setdefault(entry.to, (k, entry.truncate_bytes))
            if first[1] != entry.truncate_bytes:
                _fail(
                    ("appmon", k, "truncate_bytes"),
                    f"port mirrors to {entry.to} share one OVS "
                    f"Mirror; appmon[{first[0]}] truncates to {first[1]}",
                    entry.truncate_bytes,
                )
