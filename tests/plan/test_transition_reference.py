"""The two-phase plan set without deep copies is the per-host transition it replaced.

``plan.transition.plan_set`` shallow-copies host entries and prunes unmatched mirror pairs by
one set intersection (10^5 hosts: 28 s -> about 1 s, docs/controller.md). The reference below
is the code it replaced (deep copies, one host at a time); on random data centres planned twice
(traffic moved), both give the same plan set except ``plan_id`` (now hashed from orjson's
bytes), and the controller's ``render`` publishes bytes the agents' reader accepts.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import datacentres, moved  # tests/ is on sys.path (pytest pythonpath)

from cosample.controller.publish import render
from cosample.plan.document import FORMAT_VERSION, PLANSET_FORMAT, parse_document, plan_from_dict
from cosample.plan.transition import plan_id, transition
from cosample.planner import solve
from cosample.planner.planfile import build_plan
from cosample.times import format_time


def reference(old, new, now, settle_s):
    """cosample/plan/transition.py ``transition`` as it was (before the shallow copies)."""
    not_before = now + timedelta(seconds=settle_s)
    phase1 = copy.deepcopy(dict(new.raw))
    phase1["hosts"] = {
        name: _lower(old.raw["hosts"].get(name), doc) for name, doc in new.raw["hosts"].items()
    }
    hosts = phase1["hosts"]
    for name, host in hosts.items():
        host["mirrors"] = [
            m
            for m in host["mirrors"]
            if any(r["from"] == name for r in hosts.get(m["to"], {}).get("receives", []))
        ]
        host["receives"] = [
            r
            for r in host["receives"]
            if any(m["to"] == name for m in hosts.get(r["from"], {}).get("mirrors", []))
        ]
    phase1["transition"] = {"phase": 1, "from_version": old.version, "to_version": new.version}
    phase1["created"] = format_time(now)
    phase2 = copy.deepcopy(dict(new.raw))
    phase2.update(
        version=new.version + 1,
        not_before=format_time(not_before),
        transition={"phase": 2, "from_version": old.version, "to_version": new.version},
    )
    return {"format": PLANSET_FORMAT, "format_version": FORMAT_VERSION, "plans": [phase1, phase2]}


def _lower(old, new):
    out = copy.deepcopy(new)
    old = old or {"local_rate": 0.0, "sflow_sampling": None, "mirrors": [], "receives": []}
    out["local_rate"] = min(float(old["local_rate"]), float(new["local_rate"]))
    samplings = [n for n in (old.get("sflow_sampling"), new.get("sflow_sampling")) if n]
    out["sflow_sampling"] = (
        max(samplings) if out["local_rate"] > 0 and len(samplings) == 2 else None
    )
    if out["sflow_sampling"] is None:
        out["local_rate"] = 0.0
    out["mirrors"] = _min_shares(old.get("mirrors", []), new.get("mirrors", []), "to")
    out["receives"] = _min_shares(old.get("receives", []), new.get("receives", []), "from")
    return out


def _min_shares(old, new, key):
    before = {item[key]: item for item in old}
    out = []
    for item in new:
        if item[key] in before:
            merged = dict(item)
            merged["rate"] = min(float(item["rate"]), float(before[item[key]]["rate"]))
            if "pps" in merged and "pps" in before[item[key]]:
                merged["pps"] = min(float(item["pps"]), float(before[item[key]]["pps"]))
            out.append(merged)
    return sorted(out, key=lambda item: item[key])


# whole seconds from the test run's start: nothing here ages as CI runs on later days
START = datetime.now(timezone.utc).replace(microsecond=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datacentres(max_servers=9),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.sampled_from(["exact", "noncollab"]),
)
def test_plan_set_is_the_per_host_reference(dc, seed, drop, old_solver):
    now = START + timedelta(seconds=seed % 10**6)
    old_doc = build_plan(dc, solve(dc, old_solver), created=now, version=10)
    next_dc = moved(dc, seed, drop)
    new_doc = build_plan(next_dc, solve(next_dc), created=now, version=11)
    old, new = (
        plan_from_dict(json.loads(json.dumps(old_doc))),
        plan_from_dict(json.loads(json.dumps(new_doc))),
    )
    got = transition(old, new, now, 120.0)
    expected = reference(old, new, now, 120.0)
    assert got["plans"][0]["plan_id"] == plan_id(got["plans"][0])
    assert {**got["plans"][0], "plan_id": None} == {**expected["plans"][0], "plan_id": None}
    assert got == {**expected, "plans": [got["plans"][0], expected["plans"][1]]}
    # the controller's path (no re-validation, phase 2's host bytes spliced) gives the same
    rendered = render(new_doc, 11, None, previous=old_doc, now=now, settle_s=120.0)
    phases = parse_document(rendered.data)
    assert json.loads(rendered.data) == json.loads(json.dumps(got))
    assert [p.version for p in phases] == [11, 12] == list(rendered.versions)
