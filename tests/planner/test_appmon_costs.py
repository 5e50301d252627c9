"""The planner reads the calibrated application costs (``planner.appmon_costs``): from
``appmon_cost.calibration`` or the servers' calibration files, converted to packets forwarded
with the same run's forwarding cost; explicit numbers win; a file that cannot be converted is
one error naming it."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from cosample.planner.appmon import DEFAULT_COSTS
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
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
    "services": [
        {
            "server": "web1",
            "address": "10.1.0.5",
            "port": 80,
            "interface": "vm-web1",
            "request_rate": 1500,
        }
    ],
}


def expected(section: dict) -> dict[str, float]:
    """The conversion, written out from the file's own numbers."""
    unit = section["forwarding_cpu_s_per_packet"]
    m = section["mechanisms"]
    return {
        "onsite": m["sniffer_onsite"]["cpu_s_per_request"] / unit,
        "mirror_sender": m["selective_mirror"]["cpu_s_per_request"] / unit,
        "analyser": m["analysis_selective"]["cpu_s_per_request"] / unit,
        "mirror_bytes": m["selective_mirror"]["fabric_bytes_per_request"],
        "truncated_bytes": m["truncated_mirror"]["fabric_bytes_per_request"],
    }


def test_the_measured_file_converts_and_is_used(tmp_path):
    shutil.copy(MEASURED, tmp_path / "appmon.json")
    section = json.loads(MEASURED.read_text())["appmon"]
    dc = DataCentre.from_dict(
        {**BASE, "appmon_cost": {"calibration": "appmon.json"}}, base_dir=tmp_path
    )
    want = expected(section)
    assert dc.appmon_cost == pytest.approx(want)
    assert dc.appmon_cost != pytest.approx({k: DEFAULT_COSTS[k] for k in want})
    # the plan charges them: the on-site sniffer's load is the calibrated cost per request
    plan = build_plan(dc, solve(dc))
    default = build_plan(DataCentre.from_dict(BASE), solve(DataCentre.from_dict(BASE)))
    assert plan["summary"]["appmon"] != default["summary"]["appmon"]


def test_explicit_numbers_win(tmp_path):
    shutil.copy(MEASURED, tmp_path / "appmon.json")
    dc = DataCentre.from_dict(
        {**BASE, "appmon_cost": {"calibration": "appmon.json", "onsite": 9.5}}, base_dir=tmp_path
    )
    assert dc.appmon_cost["onsite"] == 9.5
    assert dc.appmon_cost["analyser"] == pytest.approx(
        expected(json.loads(MEASURED.read_text())["appmon"])["analyser"]
    )


def test_servers_calibration_files_are_read_and_the_highest_cost_taken(tmp_path):
    section = json.loads(MEASURED.read_text())["appmon"]
    dearer = copy.deepcopy(section)
    dearer["mechanisms"]["sniffer_onsite"]["cpu_s_per_request"] *= 2
    for name, appmon in (("a.json", section), ("b.json", dearer)):
        (tmp_path / name).write_text(
            json.dumps({"alpha": 1.0, "beta": 0.5, "capacity_pps": 20000, "appmon": appmon})
        )
    document = copy.deepcopy(BASE)
    document["servers"][0]["calibration"] = "a.json"
    document["servers"][1]["calibration"] = "b.json"
    dc = DataCentre.from_dict(document, base_dir=tmp_path)
    assert dc.appmon_cost["onsite"] == pytest.approx(expected(dearer)["onsite"])
    assert dc.appmon_cost["mirror_bytes"] == pytest.approx(expected(section)["mirror_bytes"])
    # a server calibration without an appmon section leaves the defaults alone
    (tmp_path / "plain.json").write_text(json.dumps({"alpha": 1.0, "beta": 0.5}))
    document["servers"][0]["calibration"] = document["servers"][1]["calibration"] = "plain.json"
    assert DataCentre.from_dict(document, base_dir=tmp_path).appmon_cost == {}


def test_a_section_without_the_unit_is_one_error_naming_file_and_field(tmp_path):
    section = json.loads(MEASURED.read_text())["appmon"]
    del section["forwarding_cpu_s_per_packet"]
    (tmp_path / "old.json").write_text(json.dumps({"appmon": section}))
    with pytest.raises(PlannerError, match=r"old\.json: appmon\.forwarding_cpu_s_per_packet"):
        DataCentre.from_dict(
            {**BASE, "appmon_cost": {"calibration": "old.json"}}, base_dir=tmp_path
        )
    (tmp_path / "none.json").write_text(json.dumps({"alpha": 1.0}))
    with pytest.raises(PlannerError, match=r"appmon_cost\.calibration.*no appmon section"):
        DataCentre.from_dict(
            {**BASE, "appmon_cost": {"calibration": "none.json"}}, base_dir=tmp_path
        )


def test_a_cost_not_above_zero_keeps_its_default(tmp_path):
    section = json.loads(MEASURED.read_text())["appmon"]
    section["mechanisms"]["selective_mirror"]["cpu_s_per_request"] = -1e-6
    (tmp_path / "neg.json").write_text(json.dumps({"appmon": section}))
    dc = DataCentre.from_dict(
        {**BASE, "appmon_cost": {"calibration": "neg.json"}}, base_dir=tmp_path
    )
    assert "mirror_sender" not in dc.appmon_cost  # the planner's default applies
    assert dc.appmon_cost["onsite"] == pytest.approx(expected(section)["onsite"])
