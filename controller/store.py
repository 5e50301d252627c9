"""What must survive a controller restart: the last version published and the plan in force.

The state directory is created 0700 and its files are written 0600 (atomically; temporary files
a killed write left are removed at start): it holds
``state.json`` (last version, plan_id, time), ``current-plan.json`` (the bytes last
published: a plan, or a plan set whose last plan is the one the agents converge to; read back
after a restart to judge it, to build the next two-phase transition, and to serve it again
with ``--serve`` until the next publication) and
``current-report.json`` (that plan's per-host report in columns: predicted loads, inputs as
planned, the continuous optimum; for operators, read by nothing here). When the plan was
just written to a file on the same file system (``--publish DIR``), ``current-plan.json`` is a
hard link to that file instead of a second copy: at 10^5 servers that saves writing and
fsyncing the plan (20 MB) per publication (docs/controller.md); a copy is written around the
page cache (``O_DIRECT``: it is read back only after a restart), which saves CPU on large plan
sets (docs/results/controller.md, "Controller cycle"). The publisher only ever replaces its file
by renaming a new one over it, so the linked bytes never change; the link keeps the published
file's mode (0644: what every agent may fetch anyway) inside the 0700 state directory. Versions
are ``max(previous + 1, now in Unix seconds)``: strictly increasing across restarts, and never
far ahead of the plan's ``created`` time, which agents bound.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from cosample.controller.errors import ControllerError
from cosample.files import write_bytes_atomic
from cosample.plan.formats import PLANSET_FORMAT

STATE_FILE, PLAN_FILE, REPORT_FILE = "state.json", "current-plan.json", "current-report.json"
DIR_MODE, FILE_MODE = 0o700, 0o600


def next_version(previous: int | None, now: datetime) -> int:
    """Strictly above ``previous`` and at least the current Unix second."""
    floor = int(now.timestamp())
    return floor if previous is None else max(previous + 1, floor)


@dataclass
class Store:
    """The controller's state directory."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        try:
            self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            os.chmod(self.directory, DIR_MODE)
        except OSError as exc:
            raise ControllerError(
                f"{self.directory}: cannot use as state directory ({exc.strerror})"
            ) from None
        for leftover in (*self.directory.glob(".*.tmp"), self.directory / f".{PLAN_FILE}.link"):
            try:  # what a killed write left; one controller owns the directory
                leftover.unlink()
            except OSError:
                pass

    def published_bytes(self) -> bytes | None:
        """The bytes last published (a plan or plan set), as agents fetched them; None if none."""
        try:
            return (self.directory / PLAN_FILE).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ControllerError(
                f"{self.directory / PLAN_FILE}: unreadable controller state "
                f"({exc.strerror}); fix or remove it"
            ) from None

    def last_version(self) -> int | None:
        state = self._read(STATE_FILE)
        if state is None:
            return None
        version = state.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ControllerError(
                f"{self.directory / STATE_FILE}: version: expected a "
                f"non-negative integer, got {version!r}; fix or remove the "
                "file (the next version is then the current Unix time)"
            )
        return version

    def current_plan(self) -> dict[str, Any] | None:
        """The plan the fleet converges to (a plan set's last plan)."""
        published = self.published_plans()
        return published[1][-1] if published is not None else None

    def published_plans(self) -> tuple[bytes, tuple[dict[str, Any], ...]] | None:
        """The bytes last published and their plans (one, or a plan set's phases), read once;
        None if none."""
        data = self.published_bytes()
        if data is None:
            return None
        document = self._parse(data, self.directory / PLAN_FILE)
        if document.get("format") != PLANSET_FORMAT:
            return data, (document,)
        plans = document.get("plans")
        if not isinstance(plans, list) or not plans or not all(isinstance(p, dict) for p in plans):
            raise ControllerError(
                f"{self.directory / PLAN_FILE}: plans: expected a non-empty "
                "list of plans; fix or remove the file"
            )
        return data, tuple(plans)

    def record(
        self,
        version: int,
        plan_id: str,
        data: bytes,
        published: datetime,
        written: Path | None = None,
    ) -> None:
        """Remember a publication: the bytes first, then the version that vouches for them.
        ``written``: a file just written (fsynced) with exactly ``data``, linked if possible."""
        if written is None or not self._link(Path(written), len(data)):
            write_bytes_atomic(self.directory / PLAN_FILE, data, mode=FILE_MODE, cached=False)
        self._write(
            STATE_FILE, {"version": version, "plan_id": plan_id, "published": published.isoformat()}
        )

    def record_report(self, data: bytes) -> None:
        """Keep the per-host report of the plan just recorded (it names the plan's ``plan_id``
        and version: a report left from an earlier plan after a failed write is recognisable)."""
        write_bytes_atomic(self.directory / REPORT_FILE, data, mode=FILE_MODE, cached=False)

    def _link(self, source: Path, size: int) -> bool:
        """Hard-link ``source`` as the plan file, atomically; False if it cannot be (another
        file system, no permission, not the bytes just published)."""
        temporary = self.directory / f".{PLAN_FILE}.link"
        try:
            temporary.unlink(missing_ok=True)
            os.link(source, temporary)
            if temporary.stat().st_size != size:
                temporary.unlink()
                return False
            os.replace(temporary, self.directory / PLAN_FILE)
        except OSError:
            temporary.unlink(missing_ok=True)
            return False
        return True

    def _read(self, name: str) -> dict[str, Any] | None:
        path = self.directory / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ControllerError(
                f"{path}: unreadable controller state ({exc}); fix or remove it"
            ) from None
        return self._parse(data, path)

    @staticmethod
    def _parse(data: bytes, path: Path) -> dict[str, Any]:
        try:
            document = orjson.loads(data)  # a 10^6-host plan: 3x the standard library's speed
        except ValueError as exc:
            raise ControllerError(
                f"{path}: unreadable controller state ({exc}); fix or remove it"
            ) from None
        if not isinstance(document, dict):
            raise ControllerError(f"{path}: expected a JSON object")
        return document

    def _write(self, name: str, document: dict[str, Any]) -> None:
        data = (json.dumps(document, sort_keys=True, indent=2) + "\n").encode()
        write_bytes_atomic(self.directory / name, data, mode=FILE_MODE)
