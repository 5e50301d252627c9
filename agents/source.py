"""Fetch a plan document (and its detached signature) from a file path or an http(s) URL.

Any static file server or shared file system distributes plans. Every fetch has one *total*
deadline (connecting, headers and every byte of the body together, not per read: a server
trickling a byte at a time cannot hold an agent) and a size limit enforced while reading; a
failure is one ``AgentError`` naming the location.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from cosample.agents.errors import AgentError
from cosample.agents.signing import SIGNATURE_SUFFIX

MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Fetched:
    location: str
    data: bytes
    signature: bytes | None


def fetch(location: str, *, timeout_s: float = 10.0, with_signature: bool = False,
          max_bytes: int = MAX_BYTES) -> Fetched:
    """The document at ``location``; with ``with_signature`` also ``location + '.sig'`` (or None).

    ``timeout_s`` bounds the whole fetch, signature included.
    """
    deadline = time.monotonic() + timeout_s
    data = _read(location, deadline, timeout_s, max_bytes)
    if data is None:
        raise AgentError(f"plan {location}: not found")
    signature = None
    if with_signature:
        signature = _read(location + SIGNATURE_SUFFIX, deadline, timeout_s, max_bytes)
    return Fetched(location, data, signature)


def _read(location: str, deadline: float, timeout_s: float, max_bytes: int) -> bytes | None:
    """Bytes at ``location``, None when it does not exist, AgentError on any other failure."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("http", "https"):
        return _http(location, parts, deadline, timeout_s, max_bytes)
    if parts.scheme in ("", "file"):
        path = Path(parts.path if parts.scheme == "file" else location)
        try:
            with path.open("rb") as handle:
                data = handle.read(max_bytes + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise AgentError(f"plan {location}: cannot read ({exc.strerror})") from None
        return _limited(location, data, max_bytes)
    raise AgentError(f"plan {location}: unsupported scheme {parts.scheme!r} "
                     f"(use a path or http(s))")


def _http(location: str, parts: urllib.parse.SplitResult, deadline: float, timeout_s: float,
          max_bytes: int) -> bytes | None:
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
        raise AgentError(f"plan {location}: bad URL ({exc})") from None
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        connection.request("GET", target, headers={"User-Agent": "cosample-agent"})
        sock = connection.sock  # the response keeps reading it after the connection lets go
        sock.settimeout(remaining())
        response = connection.getresponse()
        if response.status == 404:
            return None
        if response.status != 200:
            raise AgentError(f"plan {location}: HTTP {response.status} {response.reason}")
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise AgentError(f"plan {location}: larger than {max_bytes} bytes ({length})")
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
        return _limited(location, b"".join(chunks), max_bytes)
    except (TimeoutError, ssl.SSLError, OSError, http.client.HTTPException) as exc:
        if isinstance(exc, TimeoutError) or "timed out" in str(exc):
            raise AgentError(f"plan {location}: not fetched within the {timeout_s:g} s "
                             f"deadline") from None
        raise AgentError(f"plan {location}: cannot fetch ({exc})") from None
    finally:
        connection.close()


def _limited(location: str, data: bytes, max_bytes: int) -> bytes:
    if len(data) > max_bytes:
        raise AgentError(f"plan {location}: larger than {max_bytes} bytes")
    return data
