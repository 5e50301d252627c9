"""Read the collectors' snapshots: fetch each (HTTP or file), validate, merge what is fresh.

Several collector instances each own a disjoint set of agents; the controller merges their
snapshots (``cosample.collector.merge.merge_snapshots``). A collector that cannot be read,
sends an invalid snapshot or one older than ``max_age_s`` is reported and left out; its servers
are then missing from the merge and the controller holds their last smoothed traffic. Every
fetch has one total deadline and a size limit (``cosample.fetch``).

With the collectors' public keys (``--collector-key``), a snapshot counts only if its signature
verifies (``cosample.authenticity``: the ``X-Cosample-Signature`` header of the same
response, or ``FILE.sig``); an unsigned or badly signed one is a problem like a collector that
is down. The signature covers the snapshot's collector name, time, ``started`` and ``serial``,
and each is checked (docs/controller.md, "Trust"): a location given as ``NAME=URL`` takes only
snapshots of the collector named NAME (with both collectors' keys trusted, A's URL serving B's
snapshot was taken as A); a snapshot dated more than ``MAX_SKEW_S`` ahead of the controller's
clock is refused (one dated an hour ahead was planned from and kept); and each snapshot is used
once: one whose (``started``, ``serial``) is not after the last used from its location is
refused (a frozen collector's snapshot, served again, was planned from until it went stale).
Signed snapshots without a serial (collectors before these fields) are refused. Fetches are
conditional: a collector that answers 304 to the tag of the last snapshot it sent has that
snapshot (already verified and parsed) reused, and then refused as already used.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cosample.authenticity import HEADER, SIGNATURE_SUFFIX, AuthenticityError, Verifier
from cosample.collector import snapshotbin
from cosample.collector.errors import CollectorError
from cosample.collector.merge import merge_snapshots
from cosample.collector.snapshot import Snapshot, parse_snapshot_json
from cosample.controller.errors import SnapshotError
from cosample.fetch import MISSING, UNCHANGED, FetchError, Response, fetch_bytes
from cosample.fetch import fetch as fetch_document
from cosample.times import format_time_ms

MAX_BYTES = 512 * 1024 * 1024
#: How far a snapshot's time may be ahead of the controller's clock, in seconds: the daemons'
#: clocks are synchronised (the plans' ``not_before`` relies on it too).
MAX_SKEW_S = 5.0
_NAMED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)=(.+)", re.S)


@dataclass(frozen=True)
class Reading:
    """The merged fresh snapshot (None if no collector gave one) and what went wrong."""

    snapshot: Snapshot | None
    problems: tuple[str, ...]
    collectors_up: int
    collectors: int


class SnapshotReader:
    """``read_collectors`` with the collectors' public keys, the tags of the last answers and
    the sequence of the last snapshot used from each location."""

    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        try:
            self.verifier = Verifier(keys) if keys else None
        except AuthenticityError as exc:
            raise SnapshotError(str(exc)) from None
        self.known: dict[str, tuple[str, Snapshot]] = {}  # location -> (tag, snapshot)
        self.used: dict[str, tuple[datetime, int]] = {}  # location -> (started, serial)

    def __call__(
        self, locations: tuple[str, ...], now: datetime, max_age_s: float, timeout_s: float = 10.0
    ) -> Reading:
        return read_collectors(
            locations, now, max_age_s, timeout_s, read=self.read, admit=self.admit
        )

    def read(self, location: str, timeout_s: float) -> Snapshot:
        """One collector's snapshot, verified, validated and of the collector its location
        names; a ``SnapshotError`` otherwise."""
        name, url = named(location)
        known = self.known.get(location)
        try:
            response = fetch_document(
                url,
                label="snapshot",
                timeout_s=timeout_s,
                max_bytes=MAX_BYTES,
                etag=known[0] if known else None,
                user_agent="cosample-controller",
            )
            if response.status == UNCHANGED and known is not None:
                return known[1]
            if response.status != "ok" or response.data is None:
                raise SnapshotError(
                    f"snapshot {url}: not found"
                    if response.status == MISSING
                    else f"snapshot {url}: HTTP 304 to an unconditional request"
                )
            if self.verifier is not None:
                verify_signed(self.verifier, url, response, "snapshot", timeout_s)
        except FetchError as exc:
            raise SnapshotError(str(exc)) from None
        except AuthenticityError as exc:
            raise SnapshotError(str(exc)) from None
        snapshot = bound(parse(response.data, url), name, url)
        if response.etag:
            self.known[location] = (response.etag, snapshot)
        return snapshot

    def admit(self, location: str, snapshot: Snapshot) -> None:
        """Use each snapshot once: its (``started``, ``serial``) after the last used from
        ``location``; a signed one must carry them. ``SnapshotError`` otherwise."""
        url = named(location)[1]
        if snapshot.serial is None or snapshot.started is None:
            if self.verifier is not None:
                raise SnapshotError(
                    f"snapshot {url}: no serial (a collector older than this controller); "
                    "refused: upgrade the collector"
                )
            return
        sequence = (snapshot.started, snapshot.serial)
        last = self.used.get(location)
        if last is not None and sequence <= last:
            raise SnapshotError(
                f"snapshot {url}: serial {snapshot.serial} of collector "
                f"{snapshot.collector!r} (started {format_time_ms(snapshot.started)}) is not "
                f"after serial {last[1]} (started {format_time_ms(last[0])}), already used: "
                "a replay, or the collector is not exporting; refused"
            )
        self.used[location] = sequence


def read_collectors(
    locations: tuple[str, ...],
    now: datetime,
    max_age_s: float,
    timeout_s: float = 10.0,
    read: Callable[[str, float], Snapshot] | None = None,
    admit: Callable[[str, Snapshot], None] | None = None,
) -> Reading:
    """Fetch, validate and merge; a stale, future or unreadable collector is a problem, not an
    error. ``read(location, timeout_s)``: one snapshot (default: unsigned, unconditional);
    ``admit(location, snapshot)``: raises ``SnapshotError`` for one that must not be used."""
    fresh: list[Snapshot] = []
    problems: list[str] = []
    for location in locations:
        try:
            snapshot = (read or _read_unsigned)(location, timeout_s)
            age = (now - snapshot.time).total_seconds()
            if age > max_age_s:
                problems.append(
                    f"{location}: snapshot is {age:.0f} s old (limit {max_age_s:.0f} s); "
                    "collector stale"
                )
                continue
            if -age > MAX_SKEW_S:
                raise SnapshotError(
                    f"snapshot {named(location)[1]}: dated {-age:.0f} s ahead of this "
                    f"controller's clock (limit {MAX_SKEW_S:g} s); refused"
                )
            if admit is not None:
                admit(location, snapshot)
        except SnapshotError as exc:
            problems.append(str(exc))
            continue
        fresh.append(snapshot)
    if not fresh:
        return Reading(None, tuple(problems), 0, len(locations))
    try:
        merged = fresh[0] if len(fresh) == 1 else merge_snapshots(fresh)
    except CollectorError as exc:
        raise SnapshotError(f"collectors: {exc}") from None
    return Reading(merged, tuple(problems), len(fresh), len(locations))


def named(location: str) -> tuple[str | None, str]:
    """``NAME=URL`` -> (NAME, URL); a location without a name (nothing before a ``=`` but
    letters, digits, ``.``, ``_`` and ``-``) -> (None, location)."""
    match = _NAMED.fullmatch(location)
    return (match[1], match[2]) if match else (None, location)


def bound(snapshot: Any, name: str | None, url: str, kind: str = "collector") -> Any:
    """``snapshot`` if it comes from the ``kind`` (``collector`` or ``analyser``) ``name``
    (None: any), else a ``SnapshotError``: the signature covers the name, not the URL."""
    said = getattr(snapshot, kind)
    if name is not None and said != name:
        label = "snapshot" if kind == "collector" else "analyser snapshot"
        raise SnapshotError(
            f"{label} {url}: from {kind} {said!r}, not {name!r} as its location says "
            f"({name}={url}); refused"
        )
    return snapshot


def _read_unsigned(location: str, timeout_s: float) -> Snapshot:
    name, url = named(location)
    return bound(parse(fetch(url, timeout_s), url), name, url)


def parse(data: bytes, location: str) -> Snapshot:
    """Validated from either form, told apart by its first bytes: the binary columnar form
    (``snapshotbin``: arrays checked as a whole, what a large fleet's controller reads) or the
    JSON form (``parse_snapshot_json``: pydantic in Rust, then array checks); errors name the
    collector and the field."""
    try:
        if snapshotbin.is_binary(data):
            return snapshotbin.decode(data, where=location)
        return parse_snapshot_json(data, where=location)
    except CollectorError as exc:
        raise SnapshotError(str(exc)) from None


def fetch(location: str, timeout_s: float) -> bytes:
    """The bytes at ``location`` (``http(s)://``, ``file://`` or a path), within ``timeout_s``
    in total (``cosample.fetch``: a collector trickling its answer cannot hold the controller)."""
    try:
        data = fetch_bytes(
            location,
            label="snapshot",
            timeout_s=timeout_s,
            max_bytes=MAX_BYTES,
            user_agent="cosample-controller",
        )
    except FetchError as exc:
        raise SnapshotError(str(exc)) from None
    assert data is not None
    return data


def snapshot_url(location: str) -> str:
    """``http://host:port`` -> ``http://host:port/snapshot.bin`` (the binary columnar form,
    ``snapshotbin``); anything else unchanged (``/snapshot``, the JSON form, still reads). A
    ``NAME=`` before it stays."""
    name, url = named(location)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        url = urllib.parse.urlunsplit(parts._replace(path=snapshotbin.BINARY_PATH))
    return url if name is None else f"{name}={url}"


def verify_signed(
    verifier: Verifier, location: str, response: Response, label: str, timeout_s: float
) -> None:
    """Check ``response``'s bytes against their signature: the HTTP header over http(s), the
    file ``location + .sig`` otherwise; ``AuthenticityError``/``FetchError`` when it fails."""
    over_http = urllib.parse.urlsplit(location).scheme in ("http", "https")
    signature = (
        response.headers.get(HEADER.lower())
        if over_http
        else fetch_bytes(
            location + SIGNATURE_SUFFIX,
            label=label,
            timeout_s=timeout_s,
            max_bytes=4096,
            missing_ok=True,
        )
    )
    assert response.data is not None  # (an ``ok`` response holds its bytes)
    verifier.verify(response.data, signature, f"{label} {location}")
