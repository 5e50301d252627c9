"""Fetch a plan document (and its detached signature) from a file path or an http(s) URL.

Any static file server or shared file system distributes plans. The fetching itself is
``cosample.fetch`` (one *total* deadline, not per read, and a size limit enforced while
reading); here the plan and its signature share that deadline and a failure is one
``PlanFetchError`` naming the location.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cosample.plan.errors import PlanFetchError
from cosample.plan.signing import SIGNATURE_SUFFIX
from cosample.fetch import FetchError, fetch_bytes

#: The agents' default limit on a fetched plan document (``max_plan_mib``): above a 10^5-server
#: two-phase plan set (about 100 MB) with room; the controller warns when it publishes more.
DEFAULT_MAX_PLAN_MIB = 256
MAX_BYTES = DEFAULT_MAX_PLAN_MIB * 1024 * 1024


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
    try:
        data = fetch_bytes(location, label="plan", timeout_s=timeout_s, max_bytes=max_bytes,
                           deadline=deadline, user_agent="cosample-agent")
        signature = None
        if with_signature:
            signature = fetch_bytes(location + SIGNATURE_SUFFIX, label="plan",
                                    timeout_s=timeout_s, max_bytes=max_bytes,
                                    deadline=deadline, missing_ok=True,
                                    user_agent="cosample-agent")
    except FetchError as exc:
        raise PlanFetchError(str(exc)) from None
    assert data is not None
    return Fetched(location, data, signature)
