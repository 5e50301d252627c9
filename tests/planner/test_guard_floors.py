"""The operator's per-server floors (``servers[].guard``): handed to the hosts' plan entries
with every field written, stated in the summary, refused when wrong, kept by a transition's
first phase (compiled and Python), and absent from plans whose description names none."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from cosample.plan import transition
from cosample.plan.document import parse_plan
from cosample.planner import solve
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.planbytes import compact_json
from cosample.planner.planfile import build_plan

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def description(guards: dict) -> dict:
    servers = [
        {"name": "s1", "capacity_pps": 1e6, "tunnel_ip": "192.0.2.1"},
        {"name": "s2", "capacity_pps": 1e6, "tunnel_ip": "192.0.2.2"},
        {"name": "s3", "capacity_pps": 1e6, "tunnel_ip": "192.0.2.3"},
    ]
    for server in servers:
        if server["name"] in guards:
            server["guard"] = guards[server["name"]]
    return {
        "cost": {"alpha": 1.54, "beta": 0.46},
        "servers": servers,
        "traffic_pps": {"s1": {"s1": 300000, "s2": 100000}, "s2": {"s2": 50000}},
        "sflow": {"collector": "192.0.2.100:6343"},
    }


def plan_of(document: dict, version: int = 1) -> dict:
    dc = DataCentre.from_dict(document)
    return build_plan(dc, solve(dc), created=NOW, version=version)


def test_floors_reach_the_hosts_and_the_summary():
    plan = plan_of(
        description(
            {
                "s1": {"floor_sampling": 4096},
                "s2": {"floor_sampling": 64, "floor_mirror_share": 0.5, "limit": 0.8},
            }
        )
    )
    hosts = plan["hosts"]
    assert hosts["s1"]["guard"] == {"floor_sampling": 4096, "floor_mirror_share": 0.0, "limit": 0.9}
    assert hosts["s2"]["guard"] == {"floor_sampling": 64, "floor_mirror_share": 0.5, "limit": 0.8}
    assert "guard" not in hosts["s3"]
    # s2 is a receiver (1-in-1): it may go to 1-in-64; s3 sends nothing and has no floor
    assert plan["summary"]["guard"] == {
        "servers": 2,
        "floor_sampling": [64, 4096],
        "floor_mirror_share": [0.0, 0.5],
        "limit": [0.8, 0.9],
        "no_room": 0,
    }
    parsed = parse_plan(orjson.dumps(plan))  # the agents' reader takes it
    assert parsed.hosts["s1"].guard.floor_sampling == 4096
    assert parsed.hosts["s3"].guard is None


def test_a_floor_no_sparser_than_the_plan_is_no_room():
    plan = plan_of(description({"s2": {"floor_sampling": 1}}))
    assert plan["summary"]["guard"]["no_room"] == 1


def test_no_floors_no_guard_anywhere():
    plan = plan_of(description({}))
    assert "guard" not in plan["summary"]
    assert all("guard" not in host for host in plan["hosts"].values())


@pytest.mark.parametrize(
    "guard, message",
    [
        ({"floor_sampling": 0}, "servers[0].guard.floor_sampling"),
        ({"floor_sampling": 64, "limit": 1.5}, "servers[0].guard.limit"),
        ({"floor_sampling": 64, "floor_mirror_share": -1}, "servers[0].guard.floor_mirror_share"),
        ({"floor_sampling": 64, "later": 1}, "servers[0].guard.later"),
        ({"limit": 0.8}, "servers[0].guard.floor_sampling"),
        ("4096", "servers[0].guard"),
    ],
)
def test_bad_floors_are_one_line_naming_the_field(guard, message):
    with pytest.raises(PlannerError, match=re.escape(message)) as caught:
        DataCentre.from_dict(description({"s1": guard}), source="dc.json")
    assert "\n" not in str(caught.value) and "dc.json" in str(caught.value)
    assert "(got" in str(caught.value) or "field required" in str(caught.value)


def test_a_transitions_first_phase_keeps_the_new_floors():
    old = plan_of(description({"s1": {"floor_sampling": 512}}), version=10)
    new = plan_of(description({"s1": {"floor_sampling": 4096}}), version=11)
    expires = NOW + timedelta(hours=6)
    python = transition.plan_set(old, new, 10, 11, expires, NOW, 120.0)
    assert python["plans"][0]["hosts"]["s1"]["guard"]["floor_sampling"] == 4096
    lowered = transition.compiled_lower(_bytes_table(old["hosts"]), _bytes_table(new["hosts"]))
    assert lowered is not None
    assert json.loads(lowered)["s1"]["guard"] == new["hosts"]["s1"]["guard"]
    assert lowered == compact_json(python["plans"][0]["hosts"])


class _bytes_table:
    """A host table kept as its bytes, as the controller keeps it (``HostTable.json``)."""

    def __init__(self, hosts: dict) -> None:
        self.json = compact_json(hosts)
