"""Fetch a document from a file path or an http(s) URL, within one total deadline and a size limit.

Agents fetch plans and the controller fetches collector snapshots with this one function. The
deadline covers everything, connecting, headers and every byte of the body together, not each
read (``urllib``'s ``timeout`` is per socket operation: a server trickling one byte at a time
would hold the caller forever); the size limit is enforced while reading, so an endless body
costs at most ``max_bytes``. Every failure is one ``FetchError`` whose message starts with the
``label`` and the location (``snapshot http://c1:9477/snapshot: not fetched within the 10 s
deadline``); callers map it to their own error type.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.parse
from pathlib import Path

from cosample.errors import CosampleError

_CHUNK = 256 * 1024


class FetchError(CosampleError):
    """A document that could not be fetched; the message names what and where."""


def fetch_bytes(location: str, *, label: str, timeout_s: float, max_bytes: int,
                deadline: float | None = None, missing_ok: bool = False,
                user_agent: str = "cosample") -> bytes | None:
    """The bytes at ``location`` (``http(s)://``, ``file://`` or a path).

    ``deadline`` (``time.monotonic()`` seconds) lets several fetches share one budget;
    by default it is ``timeout_s`` from now. A missing document (HTTP 404, no such file) is
    None with ``missing_ok``, an error otherwise.
    """
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    where = f"{label} {location}"
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("http", "https"):
        data = _http(where, parts, deadline, timeout_s, max_bytes, user_agent)
    elif parts.scheme in ("", "file"):
        data = _file(where, Path(parts.path if parts.scheme == "file" else location), max_bytes)
    else:
        raise FetchError(f"{where}: unsupported scheme {parts.scheme!r} (use a path or http(s))")
    if data is None and not missing_ok:
        raise FetchError(f"{where}: not found")
    return data


def _file(where: str, path: Path, max_bytes: int) -> bytes | None:
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FetchError(f"{where}: cannot read ({exc.strerror})") from None
    return _limited(where, data, max_bytes)


def _http(where: str, parts: urllib.parse.SplitResult, deadline: float, timeout_s: float,
          max_bytes: int, user_agent: str) -> bytes | None:
    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    connection_type = (http.client.HTTPSConnection if parts.scheme == "https"
                       else http.client.HTTPConnection)
    kwargs = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
    try:
        connection = connection_type(parts.hostname or "", parts.port, timeout=remaining(),
                                     **kwargs)
    except ValueError as exc:
        raise FetchError(f"{where}: bad URL ({exc})") from None
    except TimeoutError:
        raise FetchError(f"{where}: not fetched within the {timeout_s:g} s deadline") from None
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        connection.request("GET", target, headers={"User-Agent": user_agent,
                                                   "Accept": "application/json"})
        sock = connection.sock  # the response keeps reading it after the connection lets go
        sock.settimeout(remaining())
        response = connection.getresponse()
        if response.status == 404:
            return None
        if response.status != 200:
            raise FetchError(f"{where}: HTTP {response.status} {response.reason}")
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise FetchError(f"{where}: larger than {max_bytes} bytes ({length})")
        chunks, size = [], 0
        while True:
            sock.settimeout(remaining())
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                break
            remaining()
        return _limited(where, b"".join(chunks), max_bytes)
    except (TimeoutError, ssl.SSLError, OSError, http.client.HTTPException) as exc:
        if isinstance(exc, TimeoutError) or "timed out" in str(exc):
            raise FetchError(f"{where}: not fetched within the {timeout_s:g} s deadline") \
                from None
        raise FetchError(f"{where}: cannot fetch ({exc})") from None
    finally:
        connection.close()


def _limited(where: str, data: bytes, max_bytes: int) -> bytes:
    if len(data) > max_bytes:
        raise FetchError(f"{where}: larger than {max_bytes} bytes")
    return data
