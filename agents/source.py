"""Fetch a plan document (and its detached signature) from a file path or an http(s) URL.

Any static file server or shared file system distributes plans. Every fetch has a timeout and a
size limit; a failure is one ``AgentError`` naming the location.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cosample.agents.errors import AgentError
from cosample.agents.signing import SIGNATURE_SUFFIX

MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Fetched:
    location: str
    data: bytes
    signature: bytes | None


def fetch(location: str, *, timeout_s: float = 10.0, with_signature: bool = False) -> Fetched:
    """The document at ``location``; with ``with_signature`` also ``location + '.sig'`` (or None)."""
    data = _read(location, timeout_s)
    if data is None:
        raise AgentError(f"plan {location}: not found")
    signature = _read(location + SIGNATURE_SUFFIX, timeout_s) if with_signature else None
    return Fetched(location, data, signature)


def _read(location: str, timeout_s: float) -> bytes | None:
    """Bytes at ``location``, None when it does not exist, AgentError on any other failure."""
    scheme = urllib.parse.urlsplit(location).scheme
    if scheme in ("http", "https"):
        request = urllib.request.Request(location, headers={"User-Agent": "cosample-agent"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                data = response.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise AgentError(f"plan {location}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AgentError(f"plan {location}: cannot fetch ({reason})") from None
    elif scheme in ("", "file"):
        path = Path(urllib.parse.urlsplit(location).path if scheme == "file" else location)
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise AgentError(f"plan {location}: cannot read ({exc.strerror})") from None
    else:
        raise AgentError(f"plan {location}: unsupported scheme {scheme!r} (use a path or http(s))")
    if len(data) > MAX_BYTES:
        raise AgentError(f"plan {location}: larger than {MAX_BYTES} bytes")
    return data
