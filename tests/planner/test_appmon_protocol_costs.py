"""The planner charges each protocol its own measured costs where a calibration has them
(``appmon.protocols``, written by ``python -m
cosample.experiments.appmon_protocol_calibration``), each in its own run's unit; else the
HTTP/1.x cost times ``PROTOCOL_FACTORS``, and the plan summary says which."""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import pytest

from cosample.planner.appmon import DEFAULT_COSTS
from cosample.planner.appmon_costs import PROTOCOL_FACTORS, protocol_key
from cosample.planner.appmon_plan import services_arrays
from cosample.planner.datacentre import DataCentre
from cosample.planner.planfile import build_plan
from cosample.planner.solvers import solve

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
HTTP = DATA / "appmon-costs" / "calibration-appmon.json"
MEASURED = DATA / "appmon-protocols" / "calibration-protocols.json"
BASE = {
    "cost": {"alpha": 1.0, "beta": 0.5},
    "servers": [
        {"name": "web1", "capacity_pps": 20000, "tunnel_ip": "10.0.0.1"},
        {"name": "idle1", "capacity_pps": 50000, "tunnel_ip": "10.0.0.2"},
    ],
    "traffic_pps": {"web1": {"web1": 12000}, "idle1": {"idle1": 100}},
    "services": [
        {"server": "web1", "address": "10.1.0.5", "port": 80, "interface": "vm-web1"},
        {"server": "web1", "address": "10.1.0.6", "port": 443, "protocol": "tls"},
        {"server": "web1", "address": "10.1.0.7", "port": 8443, "protocol": "h2"},
        {"server": "web1", "address": "10.1.0.8", "port": 443, "protocol": "tls"},
    ],
}


def with_tls(tmp_path: Path, change=None) -> DataCentre:
    """A calibration whose ``protocols.tls`` is the HTTP/1.x run's numbers, the selective
    mirror's CPU doubled and its bytes 4,000 per request (``change`` edits it further)."""
    appmon = json.loads(HTTP.read_text())["appmon"]
    tls = copy.deepcopy(appmon)
    tls["metadata"] = {"protocol": "tls"}
    mirror = tls["mechanisms"]["selective_mirror"]
    mirror["cpu_s_per_request"] *= 2
    mirror["cpu_s_per_request_ci"] = [0.5 * mirror["cpu_s_per_request"], 1e-4]
    mirror["fabric_bytes_per_request"] = 4000.0
    if change:
        change(tls)
    appmon["protocols"] = {"tls": tls}
    (tmp_path / "cal.json").write_text(json.dumps({"appmon": appmon}))
    return DataCentre.from_dict(
        {**BASE, "appmon_cost": {"calibration": "cal.json"}}, base_dir=tmp_path
    )


def test_a_protocols_measured_cost_replaces_its_estimate(tmp_path):
    dc = with_tls(tmp_path)
    tls = json.loads((tmp_path / "cal.json").read_text())["appmon"]["protocols"]["tls"]
    unit = tls["forwarding_cpu_s_per_packet"]
    sender = tls["mechanisms"]["selective_mirror"]["cpu_s_per_request"] / unit
    assert dc.appmon_cost[protocol_key("tls", "mirror_sender")] == pytest.approx(sender)
    costs = {**DEFAULT_COSTS, **dc.appmon_cost}
    svc = services_arrays(dc, dc.own_pps, costs)
    # the tls services: measured; h2 (none measured): the HTTP/1.x cost times its factor
    assert svc.sender(costs)[[1, 3]].tolist() == pytest.approx([sender, sender])
    assert svc.bytes_per_request[[1, 3]].tolist() == pytest.approx([4000.0, 4000.0])
    assert svc.sender(costs)[2] == pytest.approx(
        costs["mirror_sender"] * PROTOCOL_FACTORS["h2"]["sender"]
    )
    assert svc.bytes_per_request[2] == pytest.approx(
        costs["mirror_bytes"] * PROTOCOL_FACTORS["h2"]["mirror_bytes"]
    )
    assert svc.sender(costs)[0] == pytest.approx(costs["mirror_sender"])  # HTTP/1.x's own


def test_the_plan_summary_says_which_costs_were_measured(tmp_path):
    dc = with_tls(tmp_path)
    summary = build_plan(dc, solve(dc))["summary"]["appmon"]["protocol_costs"]
    assert sorted(summary) == ["h2", "tls"]
    assert {"mirror_sender", "mirror_bytes", "onsite", "analyser"} <= set(
        summary["tls"]["measured"]
    )
    assert "kernel_mirror_sender" in summary["tls"]["estimated"]  # not in this calibration
    assert summary["h2"]["measured"] == []
    assert "mirror_sender" in summary["h2"]["estimated"]


def test_a_cost_not_resolved_from_zero_stays_estimated(tmp_path, caplog):
    def unresolved(tls):
        mirror = tls["mechanisms"]["selective_mirror"]
        mirror["cpu_s_per_request_ci"] = [-mirror["cpu_s_per_request"], 1e-4]

    with caplog.at_level(logging.INFO, logger="cosample.planner"):
        dc = with_tls(tmp_path, unresolved)
    assert protocol_key("tls", "mirror_sender") not in dc.appmon_cost
    assert protocol_key("tls", "mirror_bytes") in dc.appmon_cost  # bytes are measured well
    assert "appmon.protocols.tls.mechanisms.selective_mirror.cpu_s_per_request" in caplog.text
    assert "stays estimated" in caplog.text
    costs = {**DEFAULT_COSTS, **dc.appmon_cost}
    svc = services_arrays(dc, dc.own_pps, costs)
    assert svc.sender(costs)[1] == pytest.approx(
        costs["mirror_sender"] * PROTOCOL_FACTORS["tls"]["sender"]
    )


def test_an_explicit_number_wins_over_every_protocols_measurement(tmp_path):
    with_tls(tmp_path)
    dc = DataCentre.from_dict(
        {**BASE, "appmon_cost": {"calibration": "cal.json", "mirror_sender": 2.5}},
        base_dir=tmp_path,
    )
    assert protocol_key("tls", "mirror_sender") not in dc.appmon_cost
    assert protocol_key("tls", "mirror_bytes") in dc.appmon_cost
    costs = {**DEFAULT_COSTS, **dc.appmon_cost}
    svc = services_arrays(dc, dc.own_pps, costs)
    assert svc.sender(costs)[1] == pytest.approx(2.5 * PROTOCOL_FACTORS["tls"]["sender"])


def test_the_committed_calibration_is_read_per_protocol(tmp_path):
    """The measured file: every protocol's costs resolved from 0 are its own, converted with
    its own run's forwarding cost; the others are named estimated in the plan."""
    shutil.copy(MEASURED, tmp_path / "protocols.json")
    dc = DataCentre.from_dict(
        {**BASE, "appmon_cost": {"calibration": "protocols.json"}}, base_dir=tmp_path
    )
    protocols = json.loads(MEASURED.read_text())["appmon"]["protocols"]
    assert {"tls", "h2", "h2c"} <= set(protocols)
    for protocol, section in protocols.items():
        unit = section["forwarding_cpu_s_per_packet"]
        for name, mechanism in (("mirror_bytes", "selective_mirror"), ("onsite", "sniffer_onsite")):
            entry = section["mechanisms"][mechanism]
            field = "fabric_bytes_per_request" if name == "mirror_bytes" else "cpu_s_per_request"
            value = entry[field] / (unit if name == "onsite" else 1.0)
            low = entry[f"{field}_ci"][0]
            key = protocol_key(protocol, name)
            if value > 0 and (name == "mirror_bytes" or (low is not None and low > 0)):
                assert dc.appmon_cost[key] == pytest.approx(value)
            else:
                assert key not in dc.appmon_cost
    assert protocol_key("h2c", "truncated_bytes") not in dc.appmon_cost  # never cut
    summary = build_plan(dc, solve(dc))["summary"]["appmon"]["protocol_costs"]
    assert summary["tls"]["measured"]  # something of TLS's was measured well
