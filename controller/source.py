"""Read the collectors' snapshots: fetch each (HTTP or file), validate, merge what is fresh.

Several collector instances each own a disjoint set of agents; the controller merges their
snapshots (``cosample.collector.snapshot.merge_snapshots``). A collector that cannot be read,
sends an invalid snapshot or one older than ``max_age_s`` is reported and left out; its servers
are then missing from the merge and the controller holds their last smoothed traffic. Every
fetch has a total timeout and a size limit.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from cosample.collector.errors import CollectorError
from cosample.collector.snapshot import Snapshot, merge_snapshots, parse_snapshot
from cosample.controller.errors import SnapshotError

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
    """Validated straight from the JSON bytes (pydantic parses them in Rust: at 10^5 servers
    several times faster than ``json.loads`` then validation); errors as ``parse_snapshot``'s."""
    try:
        return Snapshot.model_validate_json(data)
    except ValidationError:
        try:
            parse_snapshot(data, where=location)  # the project's one-line message
        except CollectorError as exc:
            raise SnapshotError(str(exc)) from None
        raise SnapshotError(f"{location}: not a valid snapshot") from None


def fetch(location: str, timeout_s: float) -> bytes:
    """The bytes at ``location`` (``http(s)://``, ``file://`` or a path)."""
    scheme = urllib.parse.urlsplit(location).scheme
    if scheme in ("http", "https"):
        request = urllib.request.Request(location, headers={"User-Agent": "cosample-controller",
                                                            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                data = response.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise SnapshotError(f"{location}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise SnapshotError(f"{location}: collector unreachable "
                                f"({getattr(exc, 'reason', exc)})") from None
    elif scheme in ("", "file"):
        path = Path(urllib.parse.urlsplit(location).path if scheme == "file" else location)
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
        except OSError as exc:
            raise SnapshotError(f"{location}: cannot read snapshot ({exc.strerror})") from None
    else:
        raise SnapshotError(f"{location}: unsupported scheme {scheme!r} (use http(s) or a path)")
    if len(data) > MAX_BYTES:
        raise SnapshotError(f"{location}: snapshot larger than {MAX_BYTES} bytes")
    return data


def snapshot_url(location: str) -> str:
    """``http://host:port`` -> ``http://host:port/snapshot``; anything else unchanged."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path="/snapshot"))
    return location

