"""Read the plan location off the receive path: fetch, verify, parse only what changed.

One ``PlanReader.read`` is what a poll costs, and the daemon runs it on a thread of its own
(``collector/workers.py``), never on the thread that receives datagrams. It fetches the plan
and, with a public key, its detached ``.sig`` under one deadline, conditionally, as the agents
do (``cosample.plan.source``: an unchanged plan is a 304, or an unchanged file's tag, and is
not downloaded again), and compares a SHA-256 of both with the last read: unchanged bytes are
neither verified nor parsed again (a 10^5-server plan costs seconds of CPU to validate), and
give the last read's verdict. The collector reads the whole plan, never a slice: it attributes
every host's samples.
New bytes are verified with the agents' own function (``cosample.plan.signing.verify``:
collector and agents accept exactly the same plans), parsed with the agents' reader, and the
attribution of each plan is built here too, so the switch on the receive path is a lookup.

Secure by default, as the agents: without ``public_key`` every read is refused unless
``insecure_unsigned`` says so (labs; the daemon warns at start and in a metric).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace

from cosample.collector import attribution
from cosample.collector.inventory import Inventory
from cosample.collector.polling import PLAN_TIMEOUT_S
from cosample.errors import CosampleError
from cosample.plan.document import Plan, parse_document
from cosample.plan.signing import verify
from cosample.plan.source import MAX_BYTES, Fetched, fetch

#: Kinds of failed reads (``cosample_collector_plan_errors_total`` counts them all,
#: ``..._plan_refused_total{reason}`` by kind).
FETCH, SIGNATURE, INVALID = "fetch", "signature", "invalid"


@dataclass(frozen=True)
class Reading:
    """One read: the document's plans (sorted by version) or why there are none."""

    plans: tuple[Plan, ...] | None
    error: str | None = None
    kind: str | None = None  # FETCH, SIGNATURE or INVALID when ``error``
    changed: bool = True  # False: the same bytes as the previous read
    built: dict = field(default_factory=dict)  # (version, plan_id) -> Attribution
    seconds: float = 0.0  # how long the read took (fetch, verification, parse, tables)


class PlanReader:
    """``read()``: the plan at ``location`` as a ``Reading``; never raises on input."""

    def __init__(
        self,
        location: str,
        inventory: Inventory | None = None,
        timeout_s: float = PLAN_TIMEOUT_S,
        *,
        public_key: str | None = None,
        insecure_unsigned: bool = False,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.location, self.inventory, self.timeout_s = location, inventory, timeout_s
        self.public_key, self.insecure_unsigned = public_key, insecure_unsigned
        self.max_bytes = max_bytes
        self._digest: bytes | None = None
        self._last: Reading | None = None
        self._fetched: Fetched | None = None  # the last answer (its tag: a conditional fetch)
        self._data_digest: bytes | None = None  # SHA-256 of its body

    def read(self) -> Reading:
        began = time.monotonic()
        reading = self._read()
        return replace(reading, seconds=time.monotonic() - began)

    def _read(self) -> Reading:
        if self.public_key is None and not self.insecure_unsigned:
            return Reading(
                None,
                f"plan {self.location}: no public key configured: refusing "
                "unsigned plans (--public-key KEY, or --insecure-unsigned for "
                "a lab)",
                SIGNATURE,
            )
        try:
            fetched = fetch(
                self.location,
                timeout_s=self.timeout_s,
                with_signature=self.public_key is not None,
                max_bytes=self.max_bytes,
                previous=self._fetched,
                user_agent="cosample-collector",
            )
        except CosampleError as exc:
            return Reading(None, str(exc), FETCH)
        data, signature = fetched.data, fetched.signature
        if not fetched.unchanged or self._data_digest is None:
            self._data_digest = hashlib.sha256(data).digest()
        self._fetched = fetched
        digest = hashlib.sha256(self._data_digest)
        digest.update(b"\0signature:" + (signature or b""))
        if digest.digest() == self._digest and self._last is not None:
            last = self._last
            return Reading(last.plans, last.error, last.kind, False, last.built)
        reading = self._check(data, signature)
        self._digest, self._last = digest.digest(), reading
        return reading

    def _check(self, data: bytes, signature: bytes | None) -> Reading:
        if self.public_key is not None:
            try:
                verify(data, signature, self.public_key)
            except CosampleError as exc:
                return Reading(None, f"plan {self.location}: {exc}", SIGNATURE)
        try:
            plans = parse_document(data, source=f"plan {self.location}")
        except CosampleError as exc:
            return Reading(None, str(exc), INVALID)
        return Reading(
            plans,
            built={
                (plan.version, plan.plan_id): attribution.build(plan, self.inventory)
                for plan in plans
            },
        )
