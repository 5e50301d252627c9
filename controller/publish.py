"""Publishing a plan: render (compact canonical JSON), sign, and hand the bytes to a target.

Two targets: ``DirectoryTarget`` writes ``plan.json`` and ``plan.json.sig`` atomically into a
folder that any web server, shared file system or object-store sync serves; ``HttpTarget``
serves them itself with ``ETag``/``If-None-Match`` (a 304 costs no body), next to ``/status``
and ``/metrics``. When a plan change makes some server's load rise while another component
falls, the document is the agents' two-phase plan set (``cosample.plan.transition``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from cosample.plan.document import format_time
from cosample.plan.signing import SIGNATURE_SUFFIX, sign_bytes
from cosample.files import write_bytes_atomic
from cosample.planner.planfile import HostTable, compact_json


PLAN_NAME = "plan.json"


@dataclass(frozen=True)
class Rendered:
    """The bytes agents fetch, their signature (or None) and the versions they carry."""

    data: bytes
    signature: bytes | None
    versions: tuple[int, ...]
    final: dict[str, Any]  # the plan the fleet ends up running

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.data).hexdigest()[:32] + '"'


def render(plan: dict[str, Any], version: int, key: str | None,
           previous: dict[str, Any] | None = None, now: datetime | None = None,
           settle_s: float = 120.0, lead_s: float = 0.0) -> Rendered:
    """``plan`` as version ``version``; with ``previous``, as a two-phase plan set from it;
    ``lead_s`` > 0: agents may apply it (its first phase) only from ``release(now, lead_s)``.

    A plan from ``Candidate.document`` keeps its hosts serialised (``HostTable``): they are
    spliced into the bytes as they are, and parsed only to build a two-phase plan set."""
    plan = dict(plan, version=version)
    start = release(now, lead_s) if lead_s > 0 else None
    if previous is None:
        if start is not None:
            plan["not_before"] = format_time(start)
        data = compact_json(plan)
        versions, final = (version,), plan
    else:
        from cosample.plan.document import plan_head
        from cosample.plan.transition import plan_set

        # Both plans come from the planner (the previous one from the controller's own store):
        # only the fields the transition needs are validated, not 2 x 10^5 host entries.
        old, new = plan_head(previous, "previous plan"), plan_head(plan, "new plan")
        document = plan_set(_entries(previous), _entries(plan), old.version, new.version,
                            new.expires, now, settle_s, start)
        phase2 = document["plans"][-1]
        if isinstance(plan.get("hosts"), HostTable):  # NEW's own bytes: spliced, not re-written
            document["plans"][-1] = {**phase2, "hosts": plan["hosts"]}
        data = compact_json(document)
        versions = tuple(int(p["version"]) for p in document["plans"])
        final = document["plans"][-1]
    signature = sign_bytes(data, key) if key else None
    return Rendered(data, signature, versions, final)


def release(now: datetime, lead_s: float) -> datetime:
    """A plan's ``not_before``: ``lead_s`` after its publication at ``now``, rounded up to the
    whole second plans write. The lead covers the collector's polling (``collector.polling``):
    the collector knows every plan before any agent may apply it (agents never apply a plan
    before its ``not_before``), and switches its attribution at that moment."""
    moment = now + timedelta(seconds=lead_s)
    return moment if moment.microsecond == 0 else \
        moment.replace(microsecond=0) + timedelta(seconds=1)


def _entries(plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` with its host table as plain dicts (the transition looks up 10^5 entries: a
    ``HostTable``'s Mapping methods would cost a Python call or three for each)."""
    hosts = plan.get("hosts")
    return {**plan, "hosts": hosts.parsed()} if isinstance(hosts, HostTable) else plan


def oversized(rendered: Rendered) -> str | None:
    """A problem if agents with the default ``max_plan_mib`` would refuse the published bytes."""
    from cosample.plan import source

    if len(rendered.data) <= source.MAX_BYTES:
        return None
    return (f"published plan version(s) {list(rendered.versions)}: {len(rendered.data):,} bytes, "
            f"above the agents' default limit of {source.MAX_BYTES:,} bytes "
            f"(max_plan_mib {source.DEFAULT_MAX_PLAN_MIB}): agents refuse it unless "
            f"max_plan_mib is raised (docs/agents.md)")


class DirectoryTarget:
    """``DIR/plan.json`` and ``DIR/plan.json.sig``, each replaced atomically (0644)."""

    def __init__(self, directory: str | Path, name: str = PLAN_NAME) -> None:
        self.path = Path(directory) / name

    def publish(self, rendered: Rendered) -> Path:
        """Write the plan and its signature; returns the plan's file (the state links it)."""
        write_bytes_atomic(self.path, rendered.data, mode=0o644, parents=True)
        signature = self.path.with_name(self.path.name + SIGNATURE_SUFFIX)
        if rendered.signature is not None:
            write_bytes_atomic(signature, rendered.signature, mode=0o644)
        else:
            signature.unlink(missing_ok=True)
        return self.path

    def describe(self) -> str:
        return str(self.path)


class HttpTarget:
    """A small threaded HTTP server: the plan, its signature, status and metrics."""

    def __init__(self, host: str, port: int, status: Callable[[], dict[str, Any]],
                 metrics: Callable[[], bytes], name: str = PLAN_NAME) -> None:
        self.name = name
        self._current: Rendered | None = None
        self._status, self._metrics = status, metrics
        target = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "cosample-controller"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                target._serve(self)

            def do_HEAD(self) -> None:  # noqa: N802
                target._serve(self, body=False)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="controller-http",
                                       daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.server.server_address[:2]

    def publish(self, rendered: Rendered) -> None:
        self._current = rendered  # one reference swap: readers see the old pair or the new
        return None  # no file: the state directory keeps its own copy

    def describe(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/{self.name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, request: BaseHTTPRequestHandler, body: bool = True) -> None:
        path = request.path.split("?", 1)[0]
        current = self._current
        etag = None
        if path == "/" + self.name and current is not None:
            payload, kind, etag = current.data, "application/json", current.etag
        elif path == "/" + self.name + SIGNATURE_SUFFIX and current is not None \
                and current.signature is not None:
            payload, kind, etag = current.signature, "text/plain", current.etag[:-1] + '-sig"'
        elif path == "/status":
            payload, kind = (json.dumps(self._status(), indent=2, sort_keys=True) + "\n").encode(), \
                "application/json"
        elif path == "/metrics":
            payload, kind = self._metrics(), "text/plain; version=0.0.4"
        else:
            request.send_error(404, "no such document (plan not published yet?)")
            return
        if etag is not None and (_tags(request.headers.get("If-None-Match")) & {etag, "*"}):
            request.send_response(304)
            request.send_header("ETag", etag)
            request.end_headers()
            return
        request.send_response(200)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(payload)))
        request.send_header("Cache-Control", "no-cache")
        if etag is not None:
            request.send_header("ETag", etag)
        request.end_headers()
        if body:
            request.wfile.write(payload)


def _tags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}
