"""Services in a description: validation, the plan's appmon entries (accepted by the agents'
plan parser), both orders of the joint problem, and plans without services unchanged."""

from __future__ import annotations

import copy
import re
from datetime import datetime, timezone

import pytest

from cosample.plan.document import parse_plan
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.planbytes import compact_json
from cosample.planner.planfile import AGENT_FIELDS, build_plan
from cosample.planner.solvers import solve

WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)
BASE = {
    "cost": {"alpha": 1.0, "beta": 0.5},
    "servers": [
        {"name": "web1", "capacity_pps": 20000, "tunnel_ip": "10.0.0.1"},
        {"name": "idle1", "capacity_pps": 50000, "tunnel_ip": "10.0.0.2"},
    ],
    "traffic_pps": {"web1": {"web1": 12000}, "idle1": {"idle1": 100}},
}
SERVICES = [
    {
        "server": "web1",
        "address": "10.1.0.5",
        "port": 80,
        "interface": "vm-web1",
        "request_rate": 200,
    },
    {"server": "web1", "address": "10.1.0.6", "port": 8080, "truncate_bytes": 78, "weight": 2},
]


def plan_for(document, report=True):
    dc = DataCentre.from_dict(document)
    return dc, build_plan(dc, solve(dc), created=WHEN, report=report)


def test_old_descriptions_plan_as_before():
    _, plain = plan_for(BASE)
    assert "appmon" not in plain["summary"]
    from cosample.planner.report import summary_lines

    assert not any(text.startswith("appmon") for text in summary_lines(plain))
    assert all("appmon" not in host for host in plain["hosts"].values())
    _, again = plan_for({**BASE, "services": []})
    assert again["plan_id"] == plain["plan_id"]  # everything but the solve time is the same


@pytest.mark.parametrize("order", ["appmon_first", "sflow_first"])
def test_services_become_entries_the_agents_accept(order):
    document = {**BASE, "services": SERVICES, "appmon_order": order}
    dc, plan = plan_for(document)
    parsed = parse_plan(compact_json(plan))
    entries = {h.name: h.appmon for h in parsed.hosts.values()}
    summary = plan["summary"]["appmon"]
    assert summary["objective"]["order"] == order
    assert summary["max_capacity_use"] <= 0.9 + 1e-9
    assert summary["objective"]["planned"] <= summary["objective"]["bound_lp"] * (1 + 1e-9)
    listed = [e for host in entries.values() for e in host]
    assert len(listed) == summary["onsite"] + summary["mirrored"]
    if order == "appmon_first":  # web1 has 6000 pps spare before sFlow: something is monitored
        assert listed and all(0 < e.share <= 1 for e in listed)
        assert all(e.to in (None, "idle1") for e in listed)
        assert entries["idle1"] == ()  # idle1 serves nothing, it only analyses
    else:  # the sFlow optimum fills web1 to its margin: nothing is left for the services
        assert summary["monitored_requests_per_s"] == 0 and listed == []
    from cosample.planner.report import summary_lines

    line = next(text for text in summary_lines(plan) if text.startswith("appmon"))
    assert f"{summary['services']} services" in line and order in line
    _, lean = plan_for(document, report=False)
    assert "appmon" in AGENT_FIELDS
    assert lean["hosts"]["web1"]["appmon"] == plan["hosts"]["web1"]["appmon"]


def test_appmon_first_takes_its_load_out_of_the_sflow_plan():
    _, plain = plan_for(BASE)
    _, with_services = plan_for({**BASE, "services": SERVICES})
    assert with_services["summary"]["collected_pps"] < plain["summary"]["collected_pps"]


@pytest.mark.parametrize(
    "change, path",
    [
        (lambda d: d["services"][0].update(server="nope"), "services[0].server"),
        (lambda d: d["services"][1].update(port=80, address="10.1.0.5"), "services[1].port"),
        (lambda d: d["services"][0].update(min_share=1.5), "services[0].min_share"),
        (lambda d: d["services"][0].update(protocol="smtp"), "services[0].protocol"),
        (lambda d: d["services"][0].update(truncate_bytes=3), "services[0].truncate_bytes"),
        (lambda d: d["services"][1].update(protocol="h2c"), "services[1]"),  # truncated
    ],
)
def test_bad_services_name_the_field(change, path):
    document = copy.deepcopy({**BASE, "services": SERVICES})
    change(document)
    with pytest.raises(PlannerError, match=re.escape(path)):
        DataCentre.from_dict(document)


def test_unknown_rate_splits_the_servers_own_traffic():
    from cosample.planner.appmon import DEFAULT_COSTS, MEASURED_PACKETS_PER_REQUEST
    from cosample.planner.appmon_plan import services_arrays

    dc = DataCentre.from_dict({**BASE, "services": SERVICES})
    svc = services_arrays(dc, dc.own_pps, DEFAULT_COSTS)
    assert svc.rate[0] == 200
    assert svc.rate[1] == pytest.approx(12000 / MEASURED_PACKETS_PER_REQUEST)
    assert svc.bytes_per_request[1] == DEFAULT_COSTS["truncated_bytes"]
    assert not svc.onsite_ok[1] and svc.onsite_ok[0]


def test_a_services_protocol_reaches_its_plan_entry():
    services = [{**SERVICES[0], "protocol": "tls"}, {**SERVICES[1], "protocol": "h2"}]
    _, plan = plan_for({**BASE, "services": services})
    parsed = parse_plan(compact_json(plan))
    entries = [e for host in parsed.hosts.values() for e in host.appmon]
    protocols = {e.service.port: e.service.protocol for e in entries}
    assert entries and protocols.items() <= {80: "tls", 8080: "h2"}.items()
    assert all(e.copied_segments == "all" for e in entries)


def test_a_protocols_costs_scale_the_http_ones():
    """HTTP/2 and TLS copy every segment and cost the analyser differently: the HTTP/1.x costs
    times ``PROTOCOL_FACTORS`` (docs/appmon.md, "What each protocol costs")."""
    from cosample.planner.appmon import DEFAULT_COSTS
    from cosample.planner.appmon_costs import PROTOCOL_FACTORS
    from cosample.planner.appmon_plan import services_arrays

    services = [
        SERVICES[0],
        {**SERVICES[0], "port": 81, "protocol": "h2c"},
        {**SERVICES[1], "protocol": "tls"},
    ]
    dc = DataCentre.from_dict({**BASE, "services": services})
    svc = services_arrays(dc, dc.own_pps, DEFAULT_COSTS)
    h2c, tls = PROTOCOL_FACTORS["h2c"], PROTOCOL_FACTORS["tls"]
    assert svc.bytes_per_request.tolist() == pytest.approx(
        [
            DEFAULT_COSTS["mirror_bytes"],
            DEFAULT_COSTS["mirror_bytes"] * h2c["mirror_bytes"],
            DEFAULT_COSTS["truncated_bytes"] * tls["truncated_bytes"],
        ]
    )
    assert svc.sender(DEFAULT_COSTS)[1] == pytest.approx(
        DEFAULT_COSTS["mirror_sender"] * h2c["sender"]
    )
    assert svc.analyser(DEFAULT_COSTS)[1] > svc.analyser(DEFAULT_COSTS)[0]
    assert svc.onsite(DEFAULT_COSTS)[2] == pytest.approx(DEFAULT_COSTS["onsite"] * tls["onsite"])
