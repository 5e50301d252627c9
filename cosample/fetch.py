"""Fetch a document from a file path or an http(s) URL, within one total deadline and a size limit.

Agents fetch plans, the collector fetches plans and the controller fetches collector snapshots
with this one module. The deadline is *total*: name resolution, connecting, the TLS handshake,
the status line, every header and every byte of the body together. ``urllib``'s and
``http.client``'s ``timeout`` is per socket operation, so a server trickling one header byte a
second holds a caller forever; so is the read timeout of httpx and urllib3 (urllib3's
``Timeout(total=...)`` caps connect plus *each* read, docs/dependencies.md). Here the request
runs on a worker thread and the caller waits for it at most until the deadline; then it shuts
the connection down (the worker wakes with an error and exits) and raises. The size limit is
enforced while reading, so an endless body costs at most ``max_bytes``.

Conditional fetches: given the ``etag`` of an earlier answer, a server that still has it answers
304 and the result is ``unchanged`` with no body (a file's tag is its inode, size and change
time, so an unchanged file is not even read). Every failure is one ``FetchError`` whose message
starts with the ``label`` and the location (``snapshot http://c1:9477/snapshot: not fetched
within the 10 s deadline``); callers map it to their own error type.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from cosample.errors import CosampleError

_CHUNK = 1 << 20
OK, MISSING, UNCHANGED = "ok", "missing", "unchanged"


class FetchError(CosampleError):
    """A document that could not be fetched; the message names what and where."""


@dataclass(frozen=True)
class Response:
    """What a fetch got: ``status`` ``ok`` (``data`` holds the bytes), ``missing`` (404, no such
    file) or ``unchanged`` (304 to ``etag``); the document's tag and the response's headers
    (names in lower case; none for files)."""

    status: str
    data: bytes | None = None
    etag: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def fetch_bytes(
    location: str,
    *,
    label: str,
    timeout_s: float,
    max_bytes: int,
    deadline: float | None = None,
    missing_ok: bool = False,
    user_agent: str = "cosample",
) -> bytes | None:
    """The bytes at ``location`` (``http(s)://``, ``file://`` or a path).

    ``deadline`` (``time.monotonic()`` seconds) lets several fetches share one budget;
    by default it is ``timeout_s`` from now. A missing document (HTTP 404, no such file) is
    None with ``missing_ok``, an error otherwise.
    """
    response = fetch(
        location,
        label=label,
        timeout_s=timeout_s,
        max_bytes=max_bytes,
        deadline=deadline,
        user_agent=user_agent,
    )
    if response.status == MISSING and not missing_ok:
        raise FetchError(f"{label} {location}: not found")
    return response.data


def fetch(
    location: str,
    *,
    label: str,
    timeout_s: float,
    max_bytes: int,
    deadline: float | None = None,
    etag: str | None = None,
    user_agent: str = "cosample",
) -> Response:
    """The document at ``location``, or ``unchanged`` if it still has the tag ``etag``."""
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    where = f"{label} {location}"
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("http", "https"):
        return _Request(where, parts, deadline, timeout_s, max_bytes, user_agent, etag).run()
    if parts.scheme in ("", "file"):
        return _file(
            where, Path(parts.path if parts.scheme == "file" else location), max_bytes, etag
        )
    raise FetchError(f"{where}: unsupported scheme {parts.scheme!r} (use a path or http(s))")


def _file(where: str, path: Path, max_bytes: int, etag: str | None) -> Response:
    try:
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            tag = f'"{info.st_ino:x}-{info.st_size:x}-{info.st_mtime_ns:x}-{info.st_ctime_ns:x}"'
            if etag is not None and etag == tag:
                return Response(UNCHANGED, etag=tag)
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        return Response(MISSING)
    except OSError as exc:
        raise FetchError(f"{where}: cannot read ({exc.strerror})") from None
    return Response(OK, _limited(where, data, max_bytes), tag)


class _Request:
    """One HTTP GET on a worker thread; ``run`` returns its result or gives up at the deadline."""

    def __init__(
        self,
        where: str,
        parts: urllib.parse.SplitResult,
        deadline: float,
        timeout_s: float,
        max_bytes: int,
        user_agent: str,
        etag: str | None,
    ) -> None:
        self.where, self.parts, self.deadline = where, parts, deadline
        self.timeout_s, self.max_bytes = timeout_s, max_bytes
        self.headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if etag is not None:
            self.headers["If-None-Match"] = etag
        self.done = threading.Event()
        self.lock = threading.Lock()  # guards ``fd``: the worker closes, the caller shuts down
        self.fd: int | None = None
        self.result: Response | None = None
        self.error: BaseException | None = None

    def run(self) -> Response:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._late()
        worker = threading.Thread(target=self._work, name="cosample-fetch", daemon=True)
        worker.start()
        if not self.done.wait(left):
            self._cancel()
            raise self._late()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def _late(self) -> FetchError:
        return FetchError(f"{self.where}: not fetched within the {self.timeout_s:g} s deadline")

    def _cancel(self) -> None:
        """Wake the worker from whatever it waits on: shut the connection down (a duplicate
        descriptor, so the worker still owns and closes the original)."""
        with self.lock:
            if self.fd is None:
                return
            try:
                duplicate = socket.socket(fileno=os.dup(self.fd))
            except OSError:
                return
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            duplicate.close()

    def _remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def _work(self) -> None:
        try:
            self.result = self._get()
        except FetchError as exc:  # without its traceback: the frames hold what was read
            self.error = exc.with_traceback(None)
        except (TimeoutError, ssl.SSLError, OSError, http.client.HTTPException, ValueError) as exc:
            if (
                isinstance(exc, TimeoutError)
                or "timed out" in str(exc)
                or self.deadline <= time.monotonic()
            ):
                self.error = self._late()
            elif isinstance(exc, ValueError):
                self.error = FetchError(f"{self.where}: bad URL ({exc})")
            else:
                self.error = FetchError(f"{self.where}: cannot fetch ({exc})")
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            self.error = exc
        finally:
            self.done.set()

    def _get(self) -> Response:
        parts = self.parts
        connection = _connection(parts, self._remaining(), self._attach)
        try:
            target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            connection.request("GET", target, headers=self.headers)
            sock = connection.sock  # the response keeps reading it after the connection lets go
            sock.settimeout(self._remaining())
            response = connection.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            etag = headers.get("etag")
            if response.status == 404:
                return Response(MISSING, headers=headers)
            if response.status == 304:
                return Response(UNCHANGED, etag=etag, headers=headers)
            if response.status != 200:
                raise FetchError(f"{self.where}: HTTP {response.status} {response.reason}")
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.max_bytes:
                raise FetchError(f"{self.where}: larger than {self.max_bytes} bytes ({length})")
            return Response(OK, self._body(response, sock), etag, headers)
        finally:
            with self.lock:
                self.fd = None
            connection.close()

    def _body(self, response: http.client.HTTPResponse, sock: socket.socket) -> bytes:
        """The body, read into blocks of ``_CHUNK`` bytes each filled to the brim: the memory it
        takes is what arrived (a block per read, shrunk to what the read returned, would leave
        the allocator's heap holey: an endless body took 4.3 GB against a 512 MiB limit), and
        at most ``max_bytes`` plus one block however long the body is."""
        blocks, size = [], 0
        while size <= self.max_bytes:
            block = bytearray(_CHUNK)
            view, filled = memoryview(block), 0
            while filled < _CHUNK and not response.isclosed():  # closed: the body is whole
                sock.settimeout(self._remaining())
                got = response.readinto(view[filled:])
                if not got:
                    break
                filled += got
            view.release()
            if filled < _CHUNK:
                del block[filled:]
            blocks.append(block)
            size += filled
            if filled < _CHUNK:
                break
        if size > self.max_bytes:
            blocks.clear()
            raise FetchError(f"{self.where}: larger than {self.max_bytes} bytes")
        data = b"".join(blocks)
        blocks.clear()
        return data

    def _attach(self, sock: socket.socket) -> None:
        with self.lock:
            self.fd = sock.fileno()
        if self.done.is_set() or self.deadline <= time.monotonic():  # the caller already left
            raise TimeoutError


def _connection(
    parts: urllib.parse.SplitResult, timeout: float, attach
) -> http.client.HTTPConnection:
    """An HTTP(S) connection that reports its socket to ``attach`` as soon as it is connected,
    before the TLS handshake (which a server can trickle too)."""
    host, port = parts.hostname or "", parts.port  # ValueError on a bad port

    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            attach(self.sock)

    class Secure(http.client.HTTPSConnection):
        def connect(self) -> None:
            http.client.HTTPConnection.connect(self)
            attach(self.sock)
            # _context: HTTPSConnection's own (the stubs leave it out), as its connect uses it
            self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
                self.sock, server_hostname=self.host
            )

    if parts.scheme == "https":
        return Secure(host, port, timeout=timeout, context=ssl.create_default_context())
    return Plain(host, port, timeout=timeout)


def _limited(where: str, data: bytes, max_bytes: int) -> bytes:
    if len(data) > max_bytes:
        raise FetchError(f"{where}: larger than {max_bytes} bytes")
    return data
