"""Fetch a plan document (and its detached signature) from a file path or an http(s) URL.

Any static file server or shared file system distributes plans. The fetching itself is
``cosample.fetch`` (one *total* deadline, from connecting to the last byte, and a size limit
enforced while reading); here the plan and its signature share that deadline and a failure is
one ``PlanFetchError`` naming the location.

Polls are conditional: given the previous ``Fetched``, the plan is asked for with its ``ETag``
(``If-None-Match``), and a server that still has it answers 304 with no body. The result then
carries the previous bytes and ``unchanged``; the signature (about 90 bytes) is fetched every
time, so what the agent verifies is always what the plan location serves now.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cosample.fetch import MISSING, UNCHANGED, FetchError, fetch_bytes
from cosample.fetch import fetch as fetch_document
from cosample.plan.errors import PlanFetchError, PlanMissingError
from cosample.plan.formats import DEFAULT_MAX_PLAN_MIB
from cosample.plan.signing import SIGNATURE_SUFFIX

MAX_BYTES = DEFAULT_MAX_PLAN_MIB * 1024 * 1024
#: A detached signature is a line of base64 (a few during a key rotation): far below this.
SIGNATURE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Fetched:
    location: str
    data: bytes
    signature: bytes | None
    etag: str | None = None
    #: The server answered 304 to ``etag``: ``data`` is the previous fetch's, not downloaded.
    unchanged: bool = False


def fetch(
    location: str,
    *,
    timeout_s: float = 10.0,
    with_signature: bool = False,
    max_bytes: int = MAX_BYTES,
    previous: Fetched | None = None,
    user_agent: str = "cosample-agent",
) -> Fetched:
    """The document at ``location``; with ``with_signature`` also ``location + '.sig'`` (or None).

    ``timeout_s`` bounds the whole fetch, signature included. ``previous``: the last answer
    for this location, whose tag makes the fetch conditional.
    """
    deadline = time.monotonic() + timeout_s
    known = (
        previous
        if previous is not None and previous.location == location and previous.etag is not None
        else None
    )
    try:
        response = fetch_document(
            location,
            label="plan",
            timeout_s=timeout_s,
            max_bytes=max_bytes,
            deadline=deadline,
            etag=known.etag if known else None,
            user_agent=user_agent,
        )
        signature = None
        if with_signature:
            signature = fetch_bytes(
                location + SIGNATURE_SUFFIX,
                label="plan",
                timeout_s=timeout_s,
                max_bytes=SIGNATURE_MAX_BYTES,
                deadline=deadline,
                missing_ok=True,
                user_agent=user_agent,
            )
    except FetchError as exc:
        raise PlanFetchError(str(exc)) from None
    if response.status == MISSING:
        raise PlanMissingError(f"plan {location}: not found")
    if response.status == UNCHANGED:
        if known is None:  # a 304 to a request that named no tag: a broken server
            raise PlanFetchError(f"plan {location}: HTTP 304 to an unconditional request")
        return Fetched(location, known.data, signature, known.etag, unchanged=True)
    assert response.data is not None
    return Fetched(location, response.data, signature, response.etag)
