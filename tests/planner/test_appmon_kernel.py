"""The kernel mirror in the planner: a service's ``mirror: kernel_mirror`` becomes the plan's
``kernel_mirror`` entry (accepted by the agents' parser), charged at its own sender cost where
one is calibrated or given, else the selective mirror's; its bytes are the untruncated mirror's."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

from cosample.costmodel.calibration_file import AppmonCalibration
from cosample.plan.document import parse_plan
from cosample.planner.appmon import DEFAULT_COSTS, loads
from cosample.planner.appmon_costs import costs_from_calibration
from cosample.planner.appmon_plan import services_arrays
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.planbytes import compact_json
from cosample.planner.planfile import build_plan
from cosample.planner.solvers import solve

MEASURED = Path(__file__).resolve().parents[2] / "docs/data/appmon-costs/calibration-appmon.json"
BASE = {
    "cost": {"alpha": 1.0, "beta": 0.5},
    "servers": [
        {"name": "web1", "capacity_pps": 20000, "tunnel_ip": "10.0.0.1"},
        {"name": "idle1", "capacity_pps": 50000, "tunnel_ip": "10.0.0.2"},
    ],
    "traffic_pps": {"web1": {"web1": 12000}, "idle1": {"idle1": 100}},
    # the on-site sniffer made dear: the services go to idle1
    "appmon_cost": {"onsite": 1000.0},
    "services": [
        {
            "server": "web1",
            "address": "10.1.0.5",
            "port": 80,
            "interface": "vm-web1",
            "request_rate": 200,
            "mirror": "kernel_mirror",
        },
        {"server": "web1", "address": "10.1.0.6", "port": 8080, "request_rate": 200},
    ],
}


def test_a_kernel_mirrored_service_becomes_a_kernel_mirror_entry():
    dc = DataCentre.from_dict(BASE)
    plan = build_plan(dc, solve(dc))
    (host,) = [h for h in parse_plan(compact_json(plan)).hosts.values() if h.name == "web1"]
    by_port = {e.service.port: e for e in host.appmon}
    kernel, selective = by_port[80], by_port[8080]
    assert (kernel.mechanism, kernel.interface, kernel.to) == ("kernel_mirror", "vm-web1", "idle1")
    assert kernel.truncate_bytes is None and kernel.share > 0
    assert selective.mechanism == "selective_mirror"


def test_its_sender_cost_is_its_own_or_the_selective_mirrors():
    dc = DataCentre.from_dict(BASE)
    costs = {**DEFAULT_COSTS, **dc.appmon_cost}
    svc = services_arrays(dc, dc.own_pps, costs)
    assert list(svc.sender_cost) == [costs["mirror_sender"]] * 2  # nothing calibrated for it
    assert list(svc.bytes_per_request) == [costs["mirror_bytes"]] * 2  # untruncated
    dear = {**costs, "kernel_mirror_sender": 3 * costs["mirror_sender"]}
    svc = services_arrays(dc, dc.own_pps, dear)
    assert list(svc.sender_cost) == [dear["kernel_mirror_sender"], costs["mirror_sender"]]
    # the plan's load on the sender is charged at it
    load, _, _ = loads(svc, np.array([1, 1]), np.array([0.5, 0.25]), dear, 2)
    assert load[0] == pytest.approx(
        200 * 0.5 * dear["kernel_mirror_sender"] + 200 * 0.25 * costs["mirror_sender"]
    )


def test_a_given_kernel_cost_reaches_the_planner():
    document = copy.deepcopy(BASE)
    document["appmon_cost"]["kernel_mirror_sender"] = 0.125
    assert DataCentre.from_dict(document).appmon_cost["kernel_mirror_sender"] == 0.125


def test_a_calibrated_kernel_mirror_is_read_and_its_absence_noted():
    section = json.loads(MEASURED.read_text())["appmon"]
    costs, notes = costs_from_calibration(AppmonCalibration.model_validate(section), "f.json")
    assert "kernel_mirror_sender" not in costs
    assert any(
        "kernel_mirror absent: kernel_mirror_sender the planner uses mirror_sender" in n
        for n in notes
    )
    section = copy.deepcopy(section)
    section["mechanisms"]["kernel_mirror"] = {
        **section["mechanisms"]["selective_mirror"],
        "cpu_s_per_request": 2 * section["mechanisms"]["selective_mirror"]["cpu_s_per_request"],
    }
    costs, _ = costs_from_calibration(AppmonCalibration.model_validate(section), "f.json")
    assert costs["kernel_mirror_sender"] == pytest.approx(2 * costs["mirror_sender"])


@pytest.mark.parametrize(
    "change, words",
    [
        ({"interface": None}, "kernel_mirror needs interface"),
        ({"truncate_bytes": 96}, "kernel_mirror cannot truncate"),
        ({"mirror": "port_mirror"}, "services[0].mirror"),
    ],
)
def test_bad_kernel_services_name_the_field(change, words):
    document = copy.deepcopy(BASE)
    document["services"][0].update(change)
    document["services"][0] = {k: v for k, v in document["services"][0].items() if v is not None}
    with pytest.raises(PlannerError, match=re.escape(words)) as info:
        DataCentre.from_dict(document)
    assert "services[0]" in str(info.value)
