"""Publishing a plan: render (compact canonical JSON), sign, and hand the bytes to a target.

Two targets: ``DirectoryTarget`` writes ``plan.json`` and ``plan.json.sig`` atomically into a
folder that any web server, shared file system or object-store sync serves; ``HttpTarget``
serves them itself with ``ETag``/``If-None-Match`` (a 304 costs no body), next to ``/status``
and ``/metrics``. When a plan change makes some server's load rise while another component
falls, the document is the agents' two-phase plan set (``cosample.plan.transition``).

Both also serve each host's slice at ``hosts/<name>`` beside the plan (``cosample.plan.slices``:
the host's part of every plan of the publication, one signed head, a Merkle path), which is
what agents fetch by default; ``slices=False`` serves the whole plan alone.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import urllib.parse
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cached_property
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable

import orjson
from prometheus_client import CollectorRegistry, generate_latest

from cosample.files import FileWriteError, write_bytes_atomic
from cosample.httplimits import Limits
from cosample.httpserver import BoundedHTTPServer, ServerMetrics
from cosample.plan import formats, source
from cosample.plan.document import plan_head
from cosample.plan.signing import SIGNATURE_SUFFIX, content_digest, sign_digest
from cosample.plan.slicebuild import SliceSet, build_slices
from cosample.plan.slices import SLICES_DIR
from cosample.plan.transition import plan_set
from cosample.planner.planbytes import HostTable, compact_json
from cosample.times import format_time

PLAN_NAME = "plan.json"
#: Every agent polls the plan: more connections than the other daemons' servers.
SERVE_LIMITS = Limits(max_connections=256)
#: ``DirectoryTarget``'s layout: one folder per publication, and the pointer to the current one.
VERSIONS_DIR, CURRENT_LINK = "versions", "current"


@dataclass(frozen=True)
class Rendered:
    """The bytes agents fetch, their signature (or None) and the versions they carry."""

    data: bytes
    signature: bytes | None
    versions: tuple[int, ...]
    final: dict[str, Any]  # the plan the fleet ends up running
    #: The published plans as documents (the phases of a plan set), for the slices; empty:
    #: read back from ``data`` (a publication restored after a restart).
    plans: tuple[dict[str, Any], ...] = ()
    key: str | None = None  # the private key that signs the slices' head
    digest: bytes | None = None  # ``content_digest(data)``, when the signer hashed it

    @cached_property
    def etag(self) -> str:
        """Hashed once per publication, not per request (a large plan set takes a while to hash:
        docs/formats.md), and not at all when the signature's digest is at hand."""
        digest = self.digest if self.digest is not None else content_digest(self.data)
        return '"' + digest.hex()[:32] + '"'

    @property
    def sliceable(self) -> bool:
        """Slices are never less authenticated than the plan: a signed plan without the key
        that signs its slices' head is served whole alone (agents fall back to it)."""
        return self.signature is None or self.key is not None

    @cached_property
    def slices(self) -> SliceSet:
        """Every host's slice, built once, when a target first asks. The documents are let go
        then (a plan set's first phase: 138 MB of bytes at 10^6 hosts, or gigabytes of dicts
        where the compiled transition declined, which a serving target would otherwise keep as
        long as it serves this publication)."""
        plans = self.plans
        if not plans:
            document = orjson.loads(self.data)
            plans = tuple(document["plans"]) if "plans" in document else (document,)
        built = build_slices(plans, self.key)
        object.__setattr__(self, "plans", ())  # frozen for its users; this is its own cache
        return built


def render(
    plan: dict[str, Any],
    version: int,
    key: str | None,
    previous: dict[str, Any] | None = None,
    now: datetime | None = None,
    settle_s: float = 120.0,
    lead_s: float = 0.0,
) -> Rendered:
    """``plan`` as version ``version``; with ``previous``, as a two-phase plan set from it;
    ``lead_s`` > 0: agents may apply it (its first phase) only from ``release(now, lead_s)``.

    A plan from ``Candidate.document`` keeps its hosts serialised (``HostTable``): they are
    spliced into the bytes as they are; a two-phase plan set's first phase is written from
    both plans' bytes (parsed only where the compiled transition declines)."""
    plan = dict(plan, version=version)
    start = None
    if lead_s > 0:
        assert now is not None  # (a release is a time after ``now``)
        start = release(now, lead_s)
    versions: tuple[int, ...]
    if previous is None:
        if start is not None:
            plan["not_before"] = format_time(start)
        data = compact_json(plan)
        versions, final, plans = (version,), plan, (plan,)
    else:
        # Both plans come from the planner (the previous one from the controller's own store):
        # only the fields the transition needs are validated, not 2 x 10^5 host entries.
        # Phase 2's hosts are NEW's (a HostTable's bytes spliced, not re-written); with both
        # tables as HostTables, phase 1's is written from their bytes (transition.plan_set).
        old, new = plan_head(previous, "previous plan"), plan_head(plan, "new plan")
        assert now is not None  # (a plan set's phases start at ``now``)
        document = plan_set(
            previous,
            plan,
            old.version,
            new.version,
            new.expires,
            now,
            settle_s,
            start,
            table=_one_chunk,
        )
        data = compact_json(document)
        versions = tuple(int(p["version"]) for p in document["plans"])
        final = document["plans"][-1]
        plans = tuple(document["plans"])
    return signed(data, key, versions, final, plans)


def signed(
    data: bytes,
    key: str | None,
    versions: tuple[int, ...],
    final: dict[str, Any],
    plans: tuple[dict[str, Any], ...] = (),
) -> Rendered:
    """``data`` signed with the private key at ``key`` (None: unsigned), hashed once for both
    the signature and the ETag."""
    digest = content_digest(data)
    signature = sign_digest(digest, key) if key else None
    return Rendered(data, signature, versions, final, plans, key, digest)


def serialised_hosts(plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` with its host table kept as its compact sorted bytes (a ``HostTable``), as a
    plan the controller published itself has it: the plan in force read back after a restart
    would otherwise stay parsed (gigabytes at 10^6 hosts), and its next two-phase publication
    would lower it host by host in Python instead of from the bytes (``transition``)."""
    hosts = plan.get("hosts") if plan else None
    if not isinstance(hosts, dict):
        return plan
    return {**plan, "hosts": HostTable([orjson.dumps(hosts, option=orjson.OPT_SORT_KEYS)])}


def release(now: datetime, lead_s: float) -> datetime:
    """A plan's ``not_before``: ``lead_s`` after its publication at ``now``, rounded up to the
    whole second plans write. The lead covers the collector's polling (``collector.polling``):
    the collector knows every plan before any agent may apply it (agents never apply a plan
    before its ``not_before``), and switches its attribution at that moment."""
    moment = now + timedelta(seconds=lead_s)
    return (
        moment if moment.microsecond == 0 else moment.replace(microsecond=0) + timedelta(seconds=1)
    )


def _one_chunk(data: bytes) -> HostTable:
    """A two-phase plan set's first phase table, written by the compiled transition."""
    return HostTable([data])


def oversized(rendered: Rendered) -> str | None:
    """A problem if a default reader of the whole plan refuses the published bytes: agents that
    fetch it whole (``--no-slices``, or their fallback) above ``max_plan_mib``'s default; the
    collector, which always reads it whole, above its own (``--max-plan-mib``)."""
    size = len(rendered.data)
    if size <= source.MAX_BYTES:
        return None
    head = f"published plan version(s) {list(rendered.versions)}: {size:,} bytes"
    if size > formats.COLLECTOR_MAX_PLAN_MIB * 1024 * 1024:
        return (
            f"{head}, above the collector's default limit of "
            f"{formats.COLLECTOR_MAX_PLAN_MIB} MiB: it keeps attributing by the plan before "
            f"unless run with a larger --max-plan-mib (docs/collector.md); agents fetching "
            f"the whole plan refuse it too (max_plan_mib {formats.DEFAULT_MAX_PLAN_MIB})"
        )
    return (
        f"{head}, above the agents' default limit of {source.MAX_BYTES:,} bytes "
        f"(max_plan_mib {formats.DEFAULT_MAX_PLAN_MIB}): agents that fetch the whole plan "
        f"refuse it unless max_plan_mib is raised (docs/agents.md); their slices and the "
        f"collector (up to {formats.COLLECTOR_MAX_PLAN_MIB} MiB) are not affected"
    )


#: Above this many hosts a directory target's one slice file per host dominates a publication
#: (docs/results/controller.md, "Publishing cycle with slices on, by target", has the CPU it
#: takes per size); the HTTP target serves the same slices from memory.
DIRECTORY_SLICES_HOSTS = 10_000


def directory_slices_warning(hosts: int, slices: bool) -> str | None:
    """What to tell an operator who publishes per-host slices to a directory for a large fleet."""
    if not slices or hosts <= DIRECTORY_SLICES_HOSTS:
        return None
    return (
        f"warning: --publish writes one slice file per host, {hosts:,} per publication "
        f"(about 11 s of CPU per publication at 10^5 hosts and 70 s at 10^6 on the test "
        f"machine); --serve serves the same slices from memory, --no-slices writes none"
    )


class DirectoryTarget:
    """A folder any web server or shared file system serves: each publication is a folder of its
    own, ``versions/V/`` holding ``plan.json`` and ``plan.json.sig``, written and synced first;
    then the pointer ``current`` (a symbolic link to ``versions/V``) is replaced by one rename.
    The hosts' slices are files in ``versions/V/hosts/``, written before the pointer moves, and
    ``DIR/hosts`` links through ``current`` too.
    ``DIR/plan.json`` and ``DIR/plan.json.sig`` are fixed links through ``current``, so every
    resolution of them sees one publication's pair: a kill at any moment leaves the old pair or
    the new one, never a plan beside another plan's signature. (An agent's two reads can still
    straddle a publication; it then refuses the pair and reads again next cycle.) The folder of
    the publication before the current one is kept for readers still on it; older ones, and
    what a killed run left (temporary files, a folder the pointer never reached), are removed."""

    def __init__(self, directory: str | Path, name: str = PLAN_NAME, slices: bool = True) -> None:
        self.directory = Path(directory)
        self.name = name
        self.slices = slices
        self.path = self.directory / name
        self.versions = self.directory / VERSIONS_DIR
        if self.directory.is_dir():
            self._clean(keep=2)

    def publish(self, rendered: Rendered) -> Path:
        """Write the pair, swing the pointer; returns the plan's file (the state links it)."""
        folder = self.versions / str(rendered.versions[-1])
        if folder.exists():  # left by a run killed before its pointer moved
            _remove_tree(folder)
        plan = write_bytes_atomic(folder / self.name, rendered.data, mode=0o644, parents=True)
        if rendered.signature is not None:
            write_bytes_atomic(
                folder / (self.name + SIGNATURE_SUFFIX), rendered.signature, mode=0o644
            )
        links = [self.name, self.name + SIGNATURE_SUFFIX]
        try:
            if self.slices and rendered.sliceable:
                _write_slices(folder / SLICES_DIR, rendered.slices)
                links.append(SLICES_DIR)
            _fsync_dir(folder)
            _symlink_atomic(self.directory / CURRENT_LINK, Path(VERSIONS_DIR) / folder.name)
            for link in links:
                _ensure_link(self.directory / link, Path(CURRENT_LINK) / link)
            _fsync_dir(self.directory)
        except OSError as exc:
            raise FileWriteError(
                f"{self.directory}: cannot publish version {folder.name}: {exc.strerror or exc}"
            ) from None
        self._clean(keep=2)
        return plan

    def describe(self) -> str:
        return str(self.path)

    def _clean(self, keep: int) -> None:
        """Temporary files of killed writes; version folders but the current one and the
        ``keep - 1`` before it (a folder newer than the pointer never got published)."""
        for leftover in self.directory.glob(".*.tmp"):
            _unlink_quietly(leftover)
        try:
            current = os.readlink(self.directory / CURRENT_LINK)
        except OSError:
            current = None
        current_version = _version_of(Path(current).name) if current else None
        folders = (
            sorted(
                (f for f in self.versions.glob("*") if _version_of(f.name) is not None),
                key=lambda f: int(f.name),  # (numbered: ``_version_of``)
            )
            if self.versions.is_dir()
            else []
        )
        kept = 0
        for folder in reversed(folders):
            version = int(folder.name)
            if current_version is not None and version > current_version:
                _remove_tree(folder)
            elif kept < keep and current_version is not None:
                kept += 1
                for leftover in folder.glob(".*.tmp"):
                    _unlink_quietly(leftover)
            else:
                _remove_tree(folder)


class HttpTarget:
    """A small threaded HTTP server: the plan, its signature, status and metrics."""

    def __init__(
        self,
        host: str,
        port: int,
        status: Callable[[], dict[str, Any]],
        metrics: Callable[[], bytes],
        name: str = PLAN_NAME,
        slices: bool = True,
        limits: Limits = SERVE_LIMITS,
    ) -> None:
        """``limits``: the HTTP server's (``cosample.httplimits``); ``slices``: serve each
        host's slice at ``/hosts/<name>`` too."""
        self.name = name
        self.slices = slices
        self._current: Rendered | None = None
        self._status, self._metrics = status, metrics
        target = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "cosample-controller"

            def do_GET(self) -> None:
                target._serve(self)

            def do_HEAD(self) -> None:
                target._serve(self, body=False)

            def log_message(self, *args: Any) -> None:
                return

        self.server = BoundedHTTPServer((host, port), Handler, limits)
        self._http_metrics = CollectorRegistry(auto_describe=False)
        self._http_metrics.register(ServerMetrics("cosample_controller", lambda: self.server))
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="controller-http", daemon=True
        )
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.server.server_address[:2]

    def publish(self, rendered: Rendered) -> None:
        if self.slices and rendered.sliceable:
            _ = rendered.slices  # built before it is served: no request waits for it
        else:
            rendered = replace(rendered, plans=())  # served as bytes: no documents kept
        self._current = rendered  # one reference swap: readers see the old pair or the new
        return None  # no file: the state directory keeps its own copy

    def restore(self, rendered: Rendered) -> None:
        """After a restart: serve the last publication (from the state directory) at once."""
        if self._current is None:
            self.publish(rendered)

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
        payload: bytes | None
        if path == "/" + self.name and current is not None:
            payload, kind, etag = current.data, "application/json", current.etag
        elif (
            path == "/" + self.name + SIGNATURE_SUFFIX
            and current is not None
            and current.signature is not None
        ):
            payload, kind, etag = current.signature, "text/plain", current.etag[:-1] + '-sig"'
        elif (
            path.startswith(f"/{SLICES_DIR}/")
            and current is not None
            and self.slices
            and current.sliceable
        ):
            file_name = urllib.parse.unquote(path[len(SLICES_DIR) + 2 :])
            payload, kind = current.slices.document(file_name), "application/json"
            if payload is None:
                request.send_error(404, "no slice for this host in the current publication")
                return
            etag = current.slices.etag(file_name)
        elif path == "/status":
            payload, kind = (
                (json.dumps(self._status(), indent=2, sort_keys=True) + "\n").encode(),
                "application/json",
            )
        elif path == "/metrics":
            payload = self._metrics() + generate_latest(self._http_metrics)
            kind = "text/plain; version=0.0.4; charset=utf-8"
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


def _write_slices(folder: Path, slices: SliceSet) -> None:
    """One file per host in ``folder`` (a new version's, not yet reachable: no rename per file),
    then one ``sync`` for them all (an fsync each would cost 10^5 disk flushes)."""
    folder.mkdir(mode=0o755)
    for file_name, document in slices.items():
        with open(folder / file_name, "xb") as stream:
            stream.write(document)
    os.sync()
    _fsync_dir(folder)


def _version_of(name: str) -> int | None:
    return int(name) if name.isdigit() else None


def _symlink_atomic(link: Path, target: Path) -> None:
    """Point ``link`` at ``target`` by renaming a new link over it (readers see one or the other)."""
    temporary = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    _unlink_quietly(temporary)
    os.symlink(target, temporary)
    os.replace(temporary, link)


def _ensure_link(link: Path, target: Path) -> None:
    """``link`` a symbolic link to ``target`` (replacing a plain file of the old layout atomically)."""
    try:
        if os.readlink(link) == str(target):
            return
    except OSError:
        pass
    _symlink_atomic(link, target)


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
