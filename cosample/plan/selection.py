"""Which plan to run (pure): never older than the running one, never invalid, expired or early.

Inputs are the plans of a freshly fetched, validated document (or none, when fetching or
validation failed), the plan currently running (the last one applied *and verified*), the plans
that already failed on this host, and the time. Rules, in order:

1. a candidate created more than ``CLOCK_SKEW_S`` in the future is refused (with the bound on
   ``version`` in ``plan``, this keeps any one plan from raising the rollback floor far ahead);
2. a candidate that already failed on this host (same content) is refused: the host stays on
   its last good plan instead of failing again every cycle;
3. a candidate older than the running plan is a rollback and is refused; one with the running
   plan's version but other content is refused (a version is never reused; the same plan read
   from the host's slice and read whole is the same content, ``document.same_content``); except
4. a *reset* plan (``reset: true``, signed like any plan, created after the running plan),
   accepted whatever its version: the documented way out of a too-high version;
5. among the rest, the newest one that is active (``not_before`` reached, not expired) runs;
   newer ones still waiting for their ``not_before`` are reported as pending;
6. without such a candidate the running plan stays, as long as it has not expired;
7. otherwise the host falls back to the safe state (``desired.safe_state``).

Only the newest plan of a document is reported when refused: older phases of a plan set that
the host has moved past are superseded, not errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cosample.plan.document import Plan, same_content
from cosample.times import format_time

#: How far a plan's ``created`` may be ahead of the agent's clock (hosts run NTP).
CLOCK_SKEW_S = 300


@dataclass(frozen=True)
class Selection:
    """The outcome: ``plan`` to run (None: safe state), and what was refused or is pending."""

    plan: Plan | None
    reason: str
    pending: Plan | None = None
    refused: tuple[str, ...] = field(default_factory=tuple)

    @property
    def safe(self) -> bool:
        return self.plan is None


def select_plan(
    candidates: Sequence[Plan],
    running: Plan | None,
    now: datetime,
    failed: Mapping[str, str] | None = None,
) -> Selection:
    """Apply the rules above; ``candidates`` are validated; ``failed`` maps digests to why."""
    failed = failed or {}
    usable, refusals = [], {}
    for plan in candidates:
        why = _refusal(plan, running, now, failed)
        if why is None:
            usable.append(plan)
        else:
            refusals[plan.version] = why
    newest = max((plan.version for plan in candidates), default=None)
    refused = (refusals[newest],) if newest in refusals else ()
    active = [plan for plan in usable if plan.active(now)]
    chosen = max(active, key=lambda plan: plan.version) if active else None
    waiting = [
        plan
        for plan in usable
        if not plan.active(now) and (chosen is None or plan.version > chosen.version)
    ]
    pending = min(waiting, key=lambda plan: plan.version) if waiting else None
    if chosen is not None:
        return Selection(chosen, f"plan version {chosen.version}", pending, refused)
    if running is not None and not running.expired(now):
        return Selection(running, f"keeping plan version {running.version}", pending, refused)
    reason = (
        "no plan yet"
        if running is None
        else f"plan version {running.version} expired at {format_time(running.expires)}"
    )
    return Selection(None, f"safe state: {reason}", pending, refused)


def _refusal(
    plan: Plan, running: Plan | None, now: datetime, failed: Mapping[str, str]
) -> str | None:
    if plan.created > now + timedelta(seconds=CLOCK_SKEW_S):
        return (
            f"version {plan.version} created {format_time(plan.created)}, more than "
            f"{CLOCK_SKEW_S} s ahead of this host's clock ({format_time(now)}); refused"
        )
    # ``failed`` first: the digest hashes the whole document (about 1 s at 10^5 hosts)
    if failed and plan.digest in failed:
        return f"version {plan.version} failed on this host before: {failed[plan.digest]}"
    older = running is not None and plan.version < running.version
    reused = (
        running is not None and plan.version == running.version and not same_content(plan, running)
    )
    if (older or reused) and plan.reset:
        assert running is not None  # older and reused compare with the running plan
        if plan.created <= running.created:
            return (
                f"version {plan.version} is a reset created {format_time(plan.created)}, "
                f"not after the running plan ({format_time(running.created)}); refused"
            )
    elif older:
        assert running is not None
        return (
            f"version {plan.version} is older than the running version {running.version} "
            f"(rollback refused; a signed plan with 'reset: true' resets the floor)"
        )
    elif reused:
        return (
            f"version {plan.version} reused with different content (plan_id "
            f"{plan.plan_id[:12]}); a new content needs a new version"
        )
    if plan.expired(now):
        return f"version {plan.version} expired at {format_time(plan.expires)}"
    return None
