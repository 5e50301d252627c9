"""The validating plan reader: good plans parse, each bad plan gets one error naming the field."""

from __future__ import annotations

import json

import pytest

from cosample.plan.document import parse_document, parse_plan, plan_from_dict
from cosample.plan.errors import PlanError


def test_good_plan_parses_with_sorted_shares(make_plan, to_bytes):
    plan = parse_plan(to_bytes(make_plan()))
    s1 = plan.hosts["s1"]
    assert plan.version == 100
    assert s1.sflow_sampling == 10 and s1.local_rate == 0.1
    assert [(m.peer, m.rate) for m in s1.mirrors] == [("s2", 0.2), ("s3", 0.3)]
    assert [r.peer for r in plan.hosts["s2"].receives] == ["s1"]
    assert plan.hosts["s4"].sflow_sampling is None


def test_unknown_extra_keys_are_tolerated(make_plan, to_bytes):
    doc = make_plan()
    doc["future_field"] = {"x": 1}
    doc["hosts"]["s1"]["load_pps"] = 1.0
    assert parse_plan(to_bytes(doc)).version == 100


def _set(path, value):
    def mutate(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return mutate


_DELETE = object()

#: (mutation, text the error must contain): the corpus of bad plans.
BAD_PLANS = [
    (_set(["format"], "other"), "format"),
    (_set(["format_version"], 2), "format_version"),
    (_set(["version"], -1), "version"),
    (_set(["version"], "7"), "version"),
    (_set(["version"], True), "version"),
    (_set(["created"], "yesterday"), "created"),
    (_set(["expires"], "2026-11-22T09:00:00Z"), "expires"),
    (_set(["expires"], "2026-11-22T16:00:00"), "expires"),
    (_set(["not_before"], 12), "not_before"),
    (_set(["plan_id"], None), "plan_id"),
    (_set(["hosts"], {}), "hosts"),
    (_set(["sflow"], {"collector": "nohost"}), "sflow.collector"),
    (_set(["sflow"], {"collector": "1.2.3.4:99999"}), "sflow.collector"),
    (_set(["hosts", "s1", "role"], "boss"), "hosts.s1.role"),
    (_set(["hosts", "s1", "local_rate"], 1.5), "hosts.s1.local_rate"),
    (_set(["hosts", "s1", "local_rate"], float("nan")), "hosts.s1.local_rate"),
    (_set(["hosts", "s1", "sflow_sampling"], 0), "hosts.s1.sflow_sampling"),
    (_set(["hosts", "s1", "sflow_sampling"], 2), "hosts.s1.sflow_sampling"),  # 1/2 > 0.1
    (_set(["hosts", "s1", "sflow_sampling"], None), "hosts.s1.sflow_sampling"),
    (_set(["hosts", "s1", "mirrors"], {"to": "s2"}), "hosts.s1.mirrors"),
    (_set(["hosts", "s1", "mirrors"], [{"to": "s2", "rate": 0}]), "hosts.s1.mirrors[0].rate"),
    (_set(["hosts", "s1", "mirrors"], [{"to": "s1", "rate": 0.1}]), "hosts.s1.mirrors[0].to"),
    (_set(["hosts", "s1", "mirrors"], [{"to": "s9", "rate": 0.2}]), "hosts.s1.mirrors[0].to"),
    (
        _set(["hosts", "s1", "mirrors"], [{"to": "s2", "rate": 0.25}, {"to": "s3", "rate": 0.3}]),
        "hosts.s1.mirrors[0].to",
    ),  # s2 receives 0.2, not 0.25
    (
        _set(["hosts", "s1", "mirrors"], [{"to": "s2", "rate": 0.2}, {"to": "s2", "rate": 0.2}]),
        "hosts.s1.mirrors",
    ),
    (_set(["hosts", "s2", "receives"], []), "hosts.s1.mirrors[0].to"),
    (_set(["hosts", "s4", "receives"], [{"from": "s1", "rate": 0.1}]), "hosts.s4.receives[0]"),
    (_set(["hosts", "s1", "tunnel_ip"], "10.0.0.300"), "hosts.s1.tunnel_ip"),
    (_set(["hosts", "s1", "bridge"], "a/b"), "hosts.s1.bridge"),
    (_set(["hosts", "s1", "vm_ports"], ["p1", "p1"]), "hosts.s1.vm_ports"),
]


def _overfull(doc):
    doc["hosts"]["s1"]["mirrors"] = [{"to": "s2", "rate": 0.7}, {"to": "s3", "rate": 0.35}]
    doc["hosts"]["s2"]["receives"][0]["rate"] = 0.7
    doc["hosts"]["s3"]["receives"][0]["rate"] = 0.35


BAD_PLANS.append((_overfull, "sum to"))


@pytest.mark.parametrize("mutate,field", BAD_PLANS, ids=[f for _, f in BAD_PLANS])
def test_bad_plan_rejected_with_field_named(make_plan, to_bytes, mutate, field):
    doc = make_plan()
    mutate(doc)
    with pytest.raises(PlanError) as info:
        parse_plan(to_bytes(doc))
    assert field in str(info.value)


@pytest.mark.parametrize("data", [b"", b"not json", b"\xff\xfe", b"[]", b"null"])
def test_non_plan_bytes_rejected(data):
    with pytest.raises(PlanError):
        parse_document(data)


def test_plan_set_sorted_by_version_and_duplicates_rejected(make_plan):
    document = {
        "format": "cosample.planset",
        "format_version": 1,
        "plans": [make_plan(version=7), make_plan(version=5)],
    }
    plans = parse_document(json.dumps(document).encode())
    assert [p.version for p in plans] == [5, 7]
    document["plans"][1]["version"] = 7
    with pytest.raises(PlanError, match="duplicate versions"):
        parse_document(json.dumps(document).encode())
    document["plans"][1]["hosts"] = []
    with pytest.raises(PlanError, match=r"plans\[1\]\.hosts"):
        parse_document(json.dumps(document).encode())


def test_not_before_parsed(make_plan):
    doc = make_plan()
    doc["not_before"] = "2026-11-22T11:00:00Z"
    plan = plan_from_dict(doc)
    assert plan.not_before is not None and plan.not_before.hour == 11
