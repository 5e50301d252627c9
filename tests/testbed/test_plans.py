"""The testbed's data-centre description goes through the real planner and its plan writer."""

from __future__ import annotations

import json

import pytest

from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.plans import (
    Coefficients,
    applied_rate,
    copies_sampled,
    description,
    load_plan,
    make_plans,
)
from cosample.experiments.testbed.topology import from_config, skewed_config


def test_description_plans_collaboratively_and_not(tmp_path):
    topology = from_config(skewed_config(servers=3, skew=0.5, capacity_pps=3000))
    document = description(
        topology, topology.traffic_matrix(), Coefficients(1.54, 0.46), "172.29.77.254:6343"
    )
    assert document["servers"][0] == {
        "name": "s1",
        "capacity_pps": 3000.0,
        "tunnel_ip": "172.29.77.1",
        "bridge": "ctbr1",
        "vm_ports": ["ct1v1", "ct1v2"],
    }
    paths = make_plans(document, tmp_path, version=100)
    collab, noncollab = load_plan(paths["collab"]), load_plan(paths["noncollab"])
    assert (noncollab["version"], collab["version"]) == (100, 101)
    assert all(not host["mirrors"] for host in noncollab["hosts"].values())
    assert collab["hosts"]["s1"]["role"] == "sender" and collab["hosts"]["s1"]["mirrors"]
    assert collab["hosts"]["s3"]["role"] == "receiver"
    assert collab["summary"]["collected_pps"] > noncollab["summary"]["collected_pps"]
    local, mirrored = applied_rate(collab["hosts"]["s1"])
    sampling = collab["hosts"]["s1"]["sflow_sampling"]
    assert local == pytest.approx(1 / sampling if sampling else 0.0)
    assert mirrored == pytest.approx(sum(m["rate"] for m in collab["hosts"]["s1"]["mirrors"]))
    assert applied_rate({"sflow_sampling": None, "mirrors": []}) == (0.0, 0.0)


def test_copies_are_sampled_at_their_receivers_rates():
    hosts = {
        "s1": {
            "sflow_sampling": None,
            "mirrors": [{"to": "s2", "rate": 0.2}, {"to": "s3", "rate": 0.3}],
        },
        "s2": {"sflow_sampling": 2, "mirrors": []},
        "s3": {"sflow_sampling": 1, "mirrors": [{"to": "s4", "rate": 0.5}]},
        "s4": {"sflow_sampling": None, "mirrors": []},
    }
    assert copies_sampled(hosts["s1"], hosts) == pytest.approx(0.2 / 2 + 0.3)
    assert copies_sampled(hosts["s3"], hosts) == 0.0  # a receiver without sFlow samples none
    assert copies_sampled(hosts["s2"], hosts) == 0.0


def test_capacity_override_applies_to_every_server():
    topology = from_config(skewed_config(servers=2))
    document = description(topology, {}, Coefficients(1.5, 0.5, capacity_pps=99.0), "1.2.3.4:1")
    assert {s["capacity_pps"] for s in document["servers"]} == {99.0}
    assert document["traffic_pps"] == {}


def test_calibration_file(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"alpha": 0.2, "beta": 0.1, "capacity_pps": 5e4, "r2": 0.9}))
    assert Coefficients.from_calibration(path) == Coefficients(0.2, 0.1, 5e4, str(path))
    path.write_text(json.dumps({"alpha": 0.2}))
    with pytest.raises(TestbedError, match="beta: missing: the planner needs it"):
        Coefficients.from_calibration(path)
    path.write_text("[")
    with pytest.raises(TestbedError, match="not valid JSON"):
        Coefficients.from_calibration(path)


def test_reads_what_cosample_fit_writes(tmp_path):
    """The calibration file of the cost model's own `cosample fit`, on data with a known answer."""
    from cosample.cli import main

    rows = ["mechanism,rate,throughput_pps"]
    for mechanism, cost in (("sflow", 0.3), ("mirror", 0.1)):
        for rate in (0.0, 0.25, 0.5, 1.0):
            rows += [
                f"{mechanism},{rate},{50000 / (1 + cost * rate) * factor:.3f}"
                for factor in (0.999, 1.001)
            ]
    (tmp_path / "cal.csv").write_text("\n".join(rows) + "\n")
    assert main(["fit", str(tmp_path / "cal.csv"), "-o", str(tmp_path / "cal.json")]) == 0
    coefficients = Coefficients.from_calibration(tmp_path / "cal.json")
    assert coefficients.alpha == pytest.approx(0.3, rel=0.05)
    assert coefficients.beta == pytest.approx(0.1, rel=0.1)
    assert coefficients.capacity_pps == pytest.approx(50000, rel=0.01)
