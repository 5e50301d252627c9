"""Which plan runs: rollback refused, expiry, not_before, reused versions, the safe state."""

from __future__ import annotations

from datetime import timedelta

from cosample.plan.document import plan_from_dict
from cosample.plan.selection import select_plan


def test_newest_active_plan_wins(make_plan, now):
    plans = [plan_from_dict(make_plan(version=v)) for v in (3, 5, 4)]
    assert select_plan(plans, None, now).plan.version == 5


def test_rollback_is_refused_and_running_plan_kept(make_plan, now):
    running = plan_from_dict(make_plan(version=5))
    selection = select_plan([plan_from_dict(make_plan(version=4))], running, now)
    assert selection.plan is running
    assert "rollback" in selection.refused[0]


def test_reused_version_with_other_content_refused(make_plan, now):
    running = plan_from_dict(make_plan(version=5))
    other = make_plan(version=5)
    other["plan_id"] = "cd" * 32
    selection = select_plan([plan_from_dict(other)], running, now)
    assert selection.plan is running and "reused" in selection.refused[0]


def test_expired_candidate_refused_and_expired_running_plan_gives_safe_state(make_plan, now):
    old = plan_from_dict(make_plan(version=5, hours=1))
    later = now + timedelta(hours=2)
    selection = select_plan([old], None, later)
    assert selection.safe and "expired" in selection.refused[0]
    selection = select_plan([], old, later)
    assert selection.safe and "expired" in selection.reason


def test_not_before_defers_a_plan_and_reports_it_pending(make_plan, now):
    first = plan_from_dict(make_plan(version=5))
    doc = make_plan(version=6)
    doc["not_before"] = (now + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    second = plan_from_dict(doc)
    selection = select_plan([first, second], None, now)
    assert selection.plan is first and selection.pending is second
    assert select_plan([first, second], first, now + timedelta(minutes=6)).plan is second


def test_no_plan_at_all_is_safe_state(now):
    selection = select_plan([], None, now)
    assert selection.safe and selection.reason.startswith("safe state")
