"""How soon the collector learns a published plan: the fact the controller's lead rests on.

The controller publishes every plan with ``not_before`` at least ``plan_lead_s`` after its
publication (``controller run --lead``), so a collector polling with these settings always knows
a plan before any agent may apply it (docs/collector.md, "Plan changes"). A light module: the
command lines read its defaults without importing the plan reader.
"""

from __future__ import annotations

#: How often ``collector run`` re-reads the plan (``--plan-interval``) and how long one read may
#: take (``--plan-timeout``), by default: an ``ETag``-answered poll costs little, and a read bounds
#: the controller's ``--lead`` (11 s with these); a 10^5-server plan (~20 MB) reads in well under a
#: second on a LAN, a slow link wants a longer timeout and lead.
PLAN_INTERVAL_S = 5.0
PLAN_TIMEOUT_S = 5.0
#: The daemon's own time between two looks at its timers (a receive batch, a snapshot).
LOOP_SLACK_S = 1.0


def plan_lead_s(interval_s: float = PLAN_INTERVAL_S, timeout_s: float = PLAN_TIMEOUT_S) -> float:
    """The longest a published plan stays unknown to a collector that polls it every
    ``interval_s`` with reads bounded by ``timeout_s``: a read that began just before the
    publication returns the old document, the next one starts ``max(interval, timeout)`` after
    it began (the daemon schedules polls from their start) and returns within ``timeout_s``,
    plus the daemon's loop slack."""
    return max(interval_s, timeout_s) + timeout_s + LOOP_SLACK_S
