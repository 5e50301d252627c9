"""Follow the plan the agents run: fetch it (path or URL), validate it, pick the active one.

The collector reads plans with the agents' own reader and selection rules
(``cosample.agents.plan``, ``cosample.agents.selection``), so both agree on which plan is in force:
the newest active plan of the document, never a rollback. A fetch or validation failure keeps
the last good plan (counted in ``errors``). When the running plan expires the agents fall back to
local sampling only, and so does the attribution (no mirrors). Until a plan is in force (none
published yet, or all expired before the collector started) the agents run their safe state,
and the collector attributes by its inventory's agent addresses (``attribution.planless``:
``planless`` is True, the snapshot's ``plan`` is null).
"""

from __future__ import annotations

from datetime import datetime

from cosample.agents.plan import Plan, parse_document
from cosample.agents.selection import select_plan
from cosample.agents.source import fetch
from cosample.collector import attribution
from cosample.collector.errors import CollectorError
from cosample.collector.inventory import Inventory
from cosample.errors import CosampleError


class PlanWatcher:
    """Polls ``location``; ``poll`` returns a new ``Attribution`` when the plan in force changed."""

    def __init__(self, location: str, inventory: Inventory | None = None,
                 timeout_s: float = 10.0) -> None:
        self.location, self.inventory, self.timeout_s = location, inventory, timeout_s
        self.running: Plan | None = None
        self.safe = False
        self.planless = False  # no plan in force yet: attributing by the inventory's agents
        self.errors = 0
        self.last_error: str | None = None

    def poll(self, now: datetime) -> attribution.Attribution | None:
        try:
            plans = parse_document(fetch(self.location, timeout_s=self.timeout_s).data)
        except CosampleError as exc:
            self.errors += 1
            self.last_error = str(exc)
            return self._planless()
        selection = select_plan(plans, self.running, now)
        if selection.plan is None:
            if self.running is None:
                self.errors += 1
                self.last_error = f"plan {self.location}: no usable plan ({selection.reason})"
                return self._planless()
            if self.safe:
                return None
            self.safe = True  # expired: the agents sample locally only
            return attribution.build(self.running, self.inventory, safe=True)
        if selection.plan == self.running and not self.safe:
            return None
        self.running, self.safe, self.planless = selection.plan, False, False
        return attribution.build(selection.plan, self.inventory)

    def _planless(self) -> attribution.Attribution | None:
        """The plan-less attribution, once, while no plan has been in force."""
        if self.running is not None or self.planless:
            return None
        update = attribution.planless(self.inventory)
        self.planless = update is not None
        return update


def load_for_replay(location: str, inventory: Inventory | None, when: datetime) -> attribution.Attribution:
    """The plan in force at ``when`` (the capture's start); else the newest one in the document."""
    try:
        plans = parse_document(fetch(location).data)
    except CosampleError as exc:
        raise CollectorError(str(exc)) from None
    chosen = select_plan(plans, None, when).plan or max(plans, key=lambda plan: plan.version)
    return attribution.build(chosen, inventory)
