"""Where an agent's plans come from: this host's slice beside the plan when the location
serves one (``slices``, ``cosample.plan.slices``), else the whole plan; verified on every poll
(the key file may change), fetched conditionally (an unchanged plan is not parsed again), and
kept only when they fit this host's configuration. Errors are words for the cycle's report,
each with its kind (``fetch``, ``signature``, ``plan``).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable

from cosample.agents.config import AgentConfig
from cosample.agents.desired import desired_state
from cosample.agents.report import INSECURE_TAG, Metrics
from cosample.plan.document import Plan, parse_document
from cosample.plan.errors import (
    PlanError,
    PlanFetchError,
    PlanMissingError,
    SignatureError,
    SigningKeyError,
)
from cosample.plan.signing import verify
from cosample.plan.slices import read_slice, slice_location
from cosample.plan.source import Fetched, fetch

log = logging.getLogger("cosample.agents")


def unsigned_warning(config: AgentConfig) -> str | None:
    """The loud warning for ``insecure_unsigned`` (worse over plain http), or None."""
    if config.public_key is not None or not config.insecure_unsigned:
        return None
    scheme = urllib.parse.urlsplit(config.plan or "").scheme
    over = (
        " over plain http: anyone on the path can"
        if scheme == "http"
        else ": anyone who can write the plan location can"
    )
    return (
        f"{INSECURE_TAG} plans are accepted unsigned (insecure_unsigned){over} reconfigure "
        f"sFlow and mirrors on this host; set public_key"
    )


class PlanReader:
    """One agent's plan source. ``fetcher`` has ``plan.source.fetch``'s signature."""

    def __init__(
        self, config: AgentConfig, fetcher: Callable = fetch, metrics: Metrics | None = None
    ) -> None:
        self.config, self.fetcher = config, fetcher
        self.metrics = metrics or Metrics()
        #: The last document fetched, by location (its tag makes the next poll conditional),
        #: and, once the whole plan parsed, its plans: an unchanged plan (HTTP 304) is not
        #: parsed again.
        self.fetched: dict[str, Fetched] = {}
        self.parsed: tuple[bytes, tuple[Plan, ...]] | None = None

    def candidates(self, errors: list[str], kinds: list[str]) -> tuple[Plan, ...]:
        if not self.config.plan:
            errors.append("no plan location configured (--plan or 'plan' in the config)")
            kinds.append("fetch")
            return ()
        if self.config.public_key is None and not self.config.insecure_unsigned:
            errors.append(
                "no public_key configured: refusing unsigned plans (set public_key, "
                "or insecure_unsigned for a lab)"
            )
            kinds.append("signature")
            return ()
        warning = unsigned_warning(self.config)
        if warning:
            log.warning("%s", warning)
        try:
            plans = self._read_slice() if self.config.slices != "never" else None
            if plans is None:
                plans = self._read_plan()
        except SignatureError as exc:
            errors.append(str(exc))
            kinds.append("signature")
            return ()
        except PlanError as exc:
            errors.append(str(exc))
            kinds.append("plan")
            return ()
        except (PlanFetchError, SigningKeyError) as exc:
            errors.append(str(exc))
            kinds.append("fetch")
            return ()
        usable = []
        for plan in plans:
            try:
                desired_state(plan, self.config)
            except PlanError as exc:
                errors.append(f"plan version {plan.version}: {exc}")
                kinds.append("plan")
            else:
                usable.append(plan)
        return tuple(usable)

    def _fetch(self, location: str, with_signature: bool) -> Fetched:
        """A conditional fetch (the tag of the last answer from ``location``), counted."""
        fetched = self.fetcher(
            location,
            timeout_s=self.config.timeout_s,
            with_signature=with_signature,
            max_bytes=self.config.max_plan_mib * 1024 * 1024,
            previous=self.fetched.get(location),
        )
        self.fetched = {location: fetched}
        self.metrics.plan_fetches.labels(
            result="unchanged" if fetched.unchanged else "downloaded"
        ).inc()
        return fetched

    def _read_slice(self) -> tuple[Plan, ...] | None:
        """This host's plans from its slice; None (``auto``) when the location serves none.
        Verified on every poll, like the whole plan's signature (the key file may change)."""
        location = slice_location(self.config.plan, self.config.host)  # type: ignore[arg-type]
        try:
            fetched = self._fetch(location, with_signature=False)
        except PlanMissingError:
            if self.config.slices == "always":
                raise
            return None
        return read_slice(fetched.data, self.config.host, self.config.public_key, source=location)

    def _read_plan(self) -> tuple[Plan, ...]:
        """The whole plan document's plans; an unchanged document is not parsed again."""
        fetched = self._fetch(
            self.config.plan,  # type: ignore[arg-type]
            with_signature=self.config.public_key is not None,
        )
        if self.config.public_key is not None:  # every poll: the signature may have changed
            verify(fetched.data, fetched.signature, self.config.public_key)
        if self.parsed is not None and self.parsed[0] is fetched.data:
            return self.parsed[1]
        plans = parse_document(fetched.data, source=self.config.plan)  # type: ignore[arg-type]
        self.parsed = (fetched.data, plans)
        return plans
