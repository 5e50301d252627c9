"""Follow the plan the agents run: read it (``planread``), pick the active one.

The collector reads plans with the agents' own reader and selection rules
(``cosample.plan.document``, ``cosample.plan.selection``), so both agree on which plan is in force:
the newest active plan of the document, never a rollback. A fetch or validation failure keeps
the last good plan (counted in ``errors``). When the running plan expires the agents fall back to
local sampling only, and so does the attribution (no mirrors). Until a plan is in force (none
published yet, or all expired before the collector started) the agents run their safe state,
and the collector attributes by its inventory's agent addresses (``attribution.planless``:
``planless`` is True, the snapshot's ``plan`` is null).

**Plans ahead of time.** The controller publishes every plan with ``not_before`` at least
``polling.plan_lead_s`` after its publication (docs/collector.md, "Plan changes"), so this
watcher knows a plan before any agent may apply it. It keeps the document's plans between polls and ``due``
switches the attribution at the plan's ``not_before`` itself (and at the running plan's
``expires``), not at the next poll: the agents apply the plan at their first poll after that
moment, so they are never earlier than the collector. A plan first read after its
``not_before`` (a lead shorter than this collector's polling) switches when it is read.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from cosample.collector import attribution
from cosample.collector.errors import CollectorError
from cosample.collector.inventory import Inventory
from cosample.collector.planread import PlanReader, Reading
from cosample.collector.polling import PLAN_TIMEOUT_S
from cosample.errors import CosampleError
from cosample.plan.document import Plan, parse_document
from cosample.plan.selection import select_plan
from cosample.plan.source import MAX_BYTES, fetch


@dataclass(frozen=True)
class Update:
    """A new attribution and the moment it takes effect (None: now, when it was read)."""

    attribution: attribution.Attribution
    at: datetime | None = None


class PlanWatcher:
    """``poll`` reads ``location`` (``accept`` takes a read made elsewhere: the daemon reads on
    a thread of its own); ``poll``, ``accept`` and ``due`` return an ``Update`` when the plan in
    force changed. ``public_key``/``insecure_unsigned``: as the agents (``PlanReader``)."""

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
        self.reader = PlanReader(
            location,
            inventory,
            timeout_s,
            public_key=public_key,
            insecure_unsigned=insecure_unsigned,
            max_bytes=max_bytes,
        )
        self.running: Plan | None = None
        self.safe = False
        self.planless = False  # no plan in force yet: attributing by the inventory's agents
        self.errors = 0
        self.refused: Counter[str] = Counter()  # failed reads by kind (planread: fetch, ...)
        self.last_error: str | None = None
        self.plans: tuple[Plan, ...] = ()  # the last good document's plans
        self._built: dict = {}  # their attributions, built by the reader
        self._wake: datetime | None = None  # when the selection among them changes next
        self._ahead: tuple[int, str] | None = None  # (version, plan_id) known before it ran
        self._checked: datetime | None = None  # the last time the selection was looked at

    def poll(self, now: datetime) -> Update | None:
        """Read the document; the plan in force at ``now`` among its plans (or the last good)."""
        return self.accept(self.reader.read(), now)

    def accept(self, reading: Reading, now: datetime) -> Update | None:
        """A read's outcome: a refused one keeps the last good plans (counted); unchanged
        bytes cost one comparison."""
        if reading.plans is None:
            self.errors += 1
            self.refused[reading.kind or "invalid"] += 1
            self.last_error = reading.error
            return self._planless() if self.running is None else self.due(now)
        if not reading.changed and reading.plans is self.plans:
            return self.due(now)
        self.plans, self._built = reading.plans, reading.built
        return self._select(now)

    @property
    def wake_ts(self) -> float:
        """When ``due`` may next return something, in Unix seconds (inf: not before a read)."""
        return self._wake.timestamp() if self._wake is not None else math.inf

    def due(self, now: datetime) -> Update | None:
        """Between polls: the switch to a known plan whose ``not_before`` came, or the fall back
        to local sampling when the running plan expired (cheap until then: one comparison)."""
        if self._wake is None or now < self._wake:
            self._checked = now
            return None
        return self._select(now)

    def _select(self, now: datetime) -> Update | None:
        selection = select_plan(self.plans, self.running, now)
        chosen, pending = selection.plan, selection.pending
        checked, self._checked = self._checked, now
        ahead, self._ahead = self._ahead, _key(pending) if pending is not None else None
        moments: list[datetime] = []
        if pending is not None and pending.not_before is not None:  # (a pending plan has one)
            moments.append(pending.not_before)
        if chosen is not None:
            moments.append(chosen.expires)
        elif self.running is not None and not self.safe:
            moments.append(self.running.expires)
        self._wake = min(moments, default=None)
        if chosen is None:
            if self.running is None:
                if pending is not None:  # the first plan, known ahead of its not_before
                    return self._planless()
                self.errors += 1
                self.last_error = f"plan {self.location}: no usable plan ({selection.reason})"
                return self._planless()
            if self.safe:
                return None
            self.safe = True  # expired: the agents sample locally only
            return Update(
                attribution.build(self.running, self.inventory, safe=True),
                _since(self.running.expires, checked),
            )  # once, when it expires
        if chosen == self.running and not self.safe:
            return None
        start = chosen.not_before if ahead == _key(chosen) else None  # known ahead: its start
        self.running, self.safe, self.planless = chosen, False, False
        built = self._built.get(_key(chosen)) or attribution.build(chosen, self.inventory)
        return Update(built, _since(start, checked) if start is not None else None)

    def _planless(self) -> Update | None:
        """The plan-less attribution, once, while no plan has been in force."""
        if self.running is not None or self.planless:
            return None
        update = attribution.planless(self.inventory)
        self.planless = update is not None
        return Update(update) if update is not None else None


def _key(plan: Plan) -> tuple[int, str]:
    return plan.version, plan.plan_id


def _since(moment: datetime, checked: datetime | None) -> datetime | None:
    """``moment`` if the selection was last looked at before it (nothing received since then
    was attributed by the old plan); otherwise None: the switch happens now."""
    return moment if checked is not None and checked < moment else None


def load_for_replay(
    location: str, inventory: Inventory | None, when: datetime
) -> attribution.Attribution:
    """The plan in force at ``when`` (the capture's start); else the newest one in the document."""
    try:
        plans = parse_document(fetch(location).data)
    except CosampleError as exc:
        raise CollectorError(str(exc)) from None
    chosen = select_plan(plans, None, when).plan or max(plans, key=lambda plan: plan.version)
    return attribution.build(chosen, inventory)
