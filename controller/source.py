"""Read the collectors' snapshots: fetch each (HTTP or file), validate, merge what is fresh.

Several collector instances each own a disjoint set of agents; the controller merges their
snapshots (``cosample.collector.merge.merge_snapshots``). A collector that cannot be read,
sends an invalid snapshot or one older than ``max_age_s`` is reported and left out; its servers
are then missing from the merge and the controller holds their last smoothed traffic. Every
fetch has one total deadline and a size limit (``cosample.fetch``).

With the collectors' public keys (``--collector-key``), a snapshot counts only if its signature
verifies (``cosample.authenticity``: the ``X-Cosample-Signature`` header of the same
response, or ``FILE.sig``); an unsigned or badly signed one is a problem like a collector that
is down. Fetches are conditional: a collector that answers 304 to the tag of the last snapshot
it sent has that snapshot (already verified and parsed) reused.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from datetime import datetime

from cosample.authenticity import HEADER, SIGNATURE_SUFFIX, AuthenticityError, Verifier
from cosample.collector import snapshotbin
from cosample.collector.errors import CollectorError
from cosample.collector.merge import merge_snapshots
from cosample.collector.snapshot import Snapshot, parse_snapshot_json
from cosample.controller.errors import SnapshotError
from cosample.fetch import MISSING, UNCHANGED, FetchError, Response, fetch_bytes
from cosample.fetch import fetch as fetch_document

MAX_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Reading:
    """The merged fresh snapshot (None if no collector gave one) and what went wrong."""

    snapshot: Snapshot | None
    problems: tuple[str, ...]
    collectors_up: int
    collectors: int


class SnapshotReader:
    """``read_collectors`` with the collectors' public keys and the tags of the last answers."""

    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        try:
            self.verifier = Verifier(keys) if keys else None
        except AuthenticityError as exc:
            raise SnapshotError(str(exc)) from None
        self.known: dict[str, tuple[str, Snapshot]] = {}  # location -> (tag, snapshot)

    def __call__(
        self, locations: tuple[str, ...], now: datetime, max_age_s: float, timeout_s: float = 10.0
    ) -> Reading:
        return read_collectors(locations, now, max_age_s, timeout_s, read=self.read)

    def read(self, location: str, timeout_s: float) -> Snapshot:
        """One collector's snapshot, verified and validated; a ``SnapshotError`` otherwise."""
        known = self.known.get(location)
        try:
            response = fetch_document(
                location,
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
                    f"snapshot {location}: not found"
                    if response.status == MISSING
                    else f"snapshot {location}: HTTP 304 to an unconditional request"
                )
            if self.verifier is not None:
                verify_signed(self.verifier, location, response, "snapshot", timeout_s)
        except FetchError as exc:
            raise SnapshotError(str(exc)) from None
        except AuthenticityError as exc:
            raise SnapshotError(str(exc)) from None
        snapshot = parse(response.data, location)
        if response.etag:
            self.known[location] = (response.etag, snapshot)
        return snapshot


def read_collectors(
    locations: tuple[str, ...], now: datetime, max_age_s: float, timeout_s: float = 10.0, read=None
) -> Reading:
    """Fetch, validate and merge; a stale or unreadable collector is a problem, not an error.
    ``read(location, timeout_s)``: one snapshot (default: unsigned, unconditional)."""
    fresh: list[Snapshot] = []
    problems: list[str] = []
    for location in locations:
        try:
            snapshot = (
                read(location, timeout_s)
                if read is not None
                else parse(fetch(location, timeout_s), location)
            )
        except SnapshotError as exc:
            problems.append(str(exc))
            continue
        age = (now - snapshot.time).total_seconds()
        if age > max_age_s:
            problems.append(
                f"{location}: snapshot is {age:.0f} s old (limit {max_age_s:.0f} s); "
                "collector stale"
            )
            continue
        fresh.append(snapshot)
    if not fresh:
        return Reading(None, tuple(problems), 0, len(locations))
    try:
        merged = fresh[0] if len(fresh) == 1 else merge_snapshots(fresh)
    except CollectorError as exc:
        raise SnapshotError(f"collectors: {exc}") from None
    return Reading(merged, tuple(problems), len(fresh), len(locations))


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
    ``snapshotbin``); anything else unchanged (``/snapshot``, the JSON form, still reads)."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path=snapshotbin.BINARY_PATH))
    return location


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
    verifier.verify(response.data, signature, f"{label} {location}")
