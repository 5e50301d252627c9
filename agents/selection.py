"""Which plan to run (pure): never older than the running one, never invalid, expired or early.

Inputs are the plans of a freshly fetched, validated document (or none, when fetching or
validation failed), the plan currently running, and the time. Rules, in order:

1. a candidate older than the running plan is a rollback and is refused;
2. a candidate with the running plan's version but a different ``plan_id`` is refused
   (versions are never reused);
3. among the rest, the newest one that is active (``not_before`` reached, not expired) runs;
   newer ones still waiting for their ``not_before`` are reported as pending;
4. without such a candidate the running plan stays, as long as it has not expired;
5. otherwise the host falls back to the safe state (``desired.safe_state``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from cosample.agents.plan import Plan, format_time


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


def select_plan(candidates: Sequence[Plan], running: Plan | None, now: datetime) -> Selection:
    """Apply the rules above; ``candidates`` are already validated (and signature-checked)."""
    refused, usable = [], []
    for plan in candidates:
        if running is not None and plan.version < running.version:
            refused.append(f"version {plan.version} is older than the running version "
                           f"{running.version} (rollback refused)")
        elif running is not None and plan.version == running.version \
                and plan.plan_id != running.plan_id:
            refused.append(f"version {plan.version} reused with a different plan_id")
        elif plan.expired(now):
            refused.append(f"version {plan.version} expired at {format_time(plan.expires)}")
        else:
            usable.append(plan)
    active = [plan for plan in usable if plan.active(now)]
    chosen = max(active, key=lambda plan: plan.version) if active else None
    waiting = [plan for plan in usable if not plan.active(now)
               and (chosen is None or plan.version > chosen.version)]
    pending = min(waiting, key=lambda plan: plan.version) if waiting else None
    if chosen is not None:
        return Selection(chosen, f"plan version {chosen.version}", pending, tuple(refused))
    if running is not None and not running.expired(now):
        return Selection(running, f"keeping plan version {running.version}", pending,
                         tuple(refused))
    reason = ("no plan yet" if running is None
              else f"plan version {running.version} expired at {format_time(running.expires)}")
    return Selection(None, f"safe state: {reason}", pending, tuple(refused))
