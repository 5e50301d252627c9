"""Read the collectors' snapshots: fetch each (HTTP or file), validate, merge what is fresh.

Several collector instances each own a disjoint set of agents; the controller merges their
snapshots (``cosample.collector.merge.merge_snapshots``). A collector that cannot be read,
sends an invalid snapshot or one older than ``max_age_s`` is reported and left out; its servers
are then missing from the merge and the controller holds their last smoothed traffic. Every
fetch has one total deadline and a size limit (``cosample.fetch``).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from datetime import datetime

from cosample.collector.errors import CollectorError
from cosample.collector.merge import merge_snapshots
from cosample.collector.snapshot import Snapshot, parse_snapshot_json
from cosample.controller.errors import SnapshotError
from cosample.fetch import FetchError, fetch_bytes

MAX_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Reading:
    """The merged fresh snapshot (None if no collector gave one) and what went wrong."""

    snapshot: Snapshot | None
    problems: tuple[str, ...]
    collectors_up: int
    collectors: int


def read_collectors(locations: tuple[str, ...], now: datetime, max_age_s: float,
                    timeout_s: float = 10.0) -> Reading:
    """Fetch, validate and merge; a stale or unreadable collector is a problem, not an error."""
    fresh: list[Snapshot] = []
    problems: list[str] = []
    for location in locations:
        try:
            snapshot = parse(fetch(location, timeout_s), location)
        except SnapshotError as exc:
            problems.append(str(exc))
            continue
        age = (now - snapshot.time).total_seconds()
        if age > max_age_s:
            problems.append(f"{location}: snapshot is {age:.0f} s old (limit {max_age_s:.0f} s); "
                            "collector stale")
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
    """Validated straight from the JSON bytes (``parse_snapshot_json``: pydantic in Rust on the
    columnar snapshot, then array checks); errors name the collector and the field."""
    try:
        return parse_snapshot_json(data, where=location)
    except CollectorError as exc:
        raise SnapshotError(str(exc)) from None


def fetch(location: str, timeout_s: float) -> bytes:
    """The bytes at ``location`` (``http(s)://``, ``file://`` or a path), within ``timeout_s``
    in total (``cosample.fetch``: a collector trickling its answer cannot hold the controller)."""
    try:
        data = fetch_bytes(location, label="snapshot", timeout_s=timeout_s, max_bytes=MAX_BYTES,
                           user_agent="cosample-controller")
    except FetchError as exc:
        raise SnapshotError(str(exc)) from None
    assert data is not None
    return data


def snapshot_url(location: str) -> str:
    """``http://host:port`` -> ``http://host:port/snapshot``; anything else unchanged."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path="/snapshot"))
    return location

