"""Two-phase transitions: phase 1 never loads any host more than either plan."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from cosample.plan.document import parse_document, plan_from_dict
from cosample.plan.errors import PlanError
from cosample.plan.transition import transition


def _old_new(make_plan):
    old = make_plan(version=10, sender_mirrors=(("s2", 0.4),), sampling=5, local_rate=0.2)
    new = make_plan(
        version=20, sender_mirrors=(("s2", 0.1), ("s3", 0.5)), sampling=4, local_rate=0.25
    )
    return plan_from_dict(old), plan_from_dict(new)


def test_phase_one_is_the_minimum_of_both_plans(make_plan, now):
    old, new = _old_new(make_plan)
    document = transition(old, new, now, settle_s=120)
    phase1, phase2 = parse_document(json.dumps(document).encode())  # both valid plans
    s1 = phase1.hosts["s1"]
    assert s1.sflow_sampling == 5 and s1.local_rate == 0.2  # sparser of 1-in-5 and 1-in-4
    assert [(m.peer, m.rate) for m in s1.mirrors] == [("s2", 0.1)]  # s3 only in new: dropped
    assert phase1.hosts["s3"].receives == ()
    assert phase1.version == 20 and phase1.not_before is None
    assert phase2.version == 21 and phase2.not_before == now.replace(microsecond=0) + timedelta(
        seconds=120
    )
    assert phase2.hosts == new.hosts


def test_phase_one_costs_no_more_than_either_plan_on_any_host(make_plan, now):
    old, new = _old_new(make_plan)
    phase1 = parse_document(json.dumps(transition(old, new, now, 60)).encode())[0]
    for name, host in phase1.hosts.items():
        for plan in (old, new):
            other = plan.hosts[name]
            assert host.local_rate <= other.local_rate
            planned = {m.peer: m.rate for m in other.mirrors}
            assert all(m.rate <= planned.get(m.peer, 0) for m in host.mirrors)
            received = {r.peer: r.rate for r in other.receives}
            assert all(r.rate <= received.get(r.peer, 0) for r in host.receives)


def test_transition_needs_a_newer_plan_and_room_before_expiry(make_plan, now):
    old, new = _old_new(make_plan)
    with pytest.raises(PlanError, match="newer"):
        transition(new, old, now, 60)
    with pytest.raises(PlanError, match="settle"):
        transition(old, new, now, 7 * 3600)


def _sampling(doc, probability, domain=5):
    doc["hosts"]["s1"].update(
        local_mechanism="sample",
        sflow_sampling=None,
        sample_probability=probability,
        observation_domain=domain,
        local_rate=probability / 65535,
    )
    doc["ipfix"] = {"collector": "127.0.0.1:4739"}
    return doc


@pytest.mark.parametrize(
    "old_p, new_p, expected",
    [
        (30000, 20000, ("sample", 20000, None)),
        (20000, 30000, ("sample", 20000, None)),
        (30000, None, ("sflow", None, None)),
        (None, 30000, ("sflow", None, None)),
    ],
)
def test_phase_one_of_the_sample_mechanism(make_plan, now, old_p, new_p, expected):
    """Same mechanism: the smaller probability; different mechanisms: no local share."""
    docs = [make_plan(version=v, sampling=4, local_rate=0.25) for v in (10, 20)]
    old, new = (plan_from_dict(_sampling(d, p) if p else d) for d, p in zip(docs, (old_p, new_p)))
    phase1, _ = parse_document(json.dumps(transition(old, new, now, 60)).encode())
    s1 = phase1.hosts["s1"]
    assert (s1.local_mechanism, s1.sample_probability, s1.sflow_sampling) == expected
    assert s1.local_rate == (expected[1] or 0) / 65535
    assert s1.local_rate <= min(old.hosts["s1"].local_rate, new.hosts["s1"].local_rate)
