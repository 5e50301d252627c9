"""Read the analysers' snapshots: fetch each (HTTP or file), verify, validate, keep what is fresh.

The application part of the loop (docs/controller.md, "Application monitoring"): every analyser
(``cosample appmon run``, on a monitored host behind its sniffer or on an analysis host behind
mirrors) serves its last closed window at ``/snapshot`` or writes it to ``--state-dir``. The
controller reads them the way it reads the collectors (``source.py``): one total deadline and a
size limit per fetch, an unreadable, invalid or stale analyser is a problem listed in the status,
never an error, and with the analysers' public keys (``--analyser-key``) a snapshot counts only
if its signature verifies (the ``X-Cosample-Signature`` header of the same response, or
``FILE.sig``; ``appmon run --snapshot-key`` signs). A window is stale when it *ended* more than
``max_age_s`` ago. As for the collectors (``source.py``), what the signature covers is checked:
a location given as ``NAME=URL`` takes only the analyser named NAME's windows, a window ending
more than ``MAX_SKEW_S`` after the controller's clock is refused, and each window is used once:
windows close once each, in order, so a window whose start is not after the last used from its
location is a replay (or no window closed since). What the snapshots say is turned into rates
by ``appmeasure.py`` (pure).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timedelta

from cosample.appmon.errors import AppmonError
from cosample.appmon.snapshot import AppSnapshot, parse_snapshot
from cosample.authenticity import AuthenticityError, Verifier
from cosample.controller.errors import SnapshotError
from cosample.controller.source import MAX_SKEW_S, bound, named, verify_signed
from cosample.fetch import MISSING, FetchError
from cosample.fetch import fetch as fetch_document
from cosample.times import format_time_ms

#: An analyser's snapshot lists one entry per service it saw: far below this.
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class AppReading:
    """The fresh snapshots by location, and what went wrong."""

    snapshots: tuple[tuple[str, AppSnapshot], ...]
    problems: tuple[str, ...]
    analysers_up: int
    analysers: int


class AnalyserReader:
    """Reads the analysers, verifying with ``keys`` (the analysers' public keys; none: unsigned
    snapshots are taken, a limit stated in docs/controller.md)."""

    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        try:
            self.verifier = Verifier(keys) if keys else None
        except AuthenticityError as exc:
            raise SnapshotError(str(exc)) from None
        self.used: dict[str, datetime] = {}  # location -> start of the last window used

    def __call__(
        self, locations: tuple[str, ...], now: datetime, max_age_s: float, timeout_s: float = 10.0
    ) -> AppReading:
        fresh: list[tuple[str, AppSnapshot]] = []
        problems: list[str] = []
        for location in locations:
            try:
                snap = self.read(location, timeout_s)
            except SnapshotError as exc:
                problems.append(str(exc))
                continue
            url = named(location)[1]
            end = snap.window_start + timedelta(seconds=snap.window_s)
            age = (now - end).total_seconds()
            last = self.used.get(location)
            if age > max_age_s:
                problems.append(
                    f"analyser {url}: its last window ended {age:.0f} s ago "
                    f"(limit {max_age_s:.0f} s); analyser stale"
                )
            elif -age > MAX_SKEW_S:
                problems.append(
                    f"analyser {url}: its last window ends {-age:.0f} s after this "
                    f"controller's clock (limit {MAX_SKEW_S:g} s); refused"
                )
            elif last is not None and snap.window_start <= last:
                problems.append(
                    f"analyser {url}: window starting {format_time_ms(snap.window_start)} is not "
                    f"after the last used ({format_time_ms(last)}): a replay, or no window "
                    "closed since; left out"
                )
            else:
                self.used[location] = snap.window_start
                fresh.append((location, snap))
        return AppReading(tuple(fresh), tuple(problems), len(fresh), len(locations))

    def read(self, location: str, timeout_s: float) -> AppSnapshot:
        """One analyser's snapshot, verified, validated and of the analyser its location
        names; a ``SnapshotError`` otherwise."""
        name, url = named(location)
        try:
            response = fetch_document(
                url,
                label="analyser snapshot",
                timeout_s=timeout_s,
                max_bytes=MAX_BYTES,
                user_agent="cosample-controller",
            )
            if response.status != "ok" or response.data is None:
                raise SnapshotError(
                    f"analyser snapshot {url}: "
                    + (
                        "not found (no window closed yet?)"
                        if response.status == MISSING
                        else response.status
                    )
                )
            if self.verifier is not None:
                verify_signed(self.verifier, url, response, "analyser snapshot", timeout_s)
        except (FetchError, AuthenticityError) as exc:
            raise SnapshotError(str(exc)) from None
        try:
            snap = parse_snapshot(response.data, where=f"analyser snapshot {url}")
        except AppmonError as exc:
            raise SnapshotError(str(exc)) from None
        return bound(snap, name, url, kind="analyser")


def analyser_url(location: str) -> str:
    """``http://host:port`` -> ``http://host:port/snapshot``; anything else unchanged (a file
    is the analyser's ``--state-dir``/snapshot.json itself). A ``NAME=`` before it stays."""
    name, url = named(location)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        url = urllib.parse.urlunsplit(parts._replace(path="/snapshot"))
    return url if name is None else f"{name}={url}"
