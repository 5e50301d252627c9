"""Every ``cosample plan``/``check`` path, including each documented bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosample.cli import build_parser, main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"
GOOD = {"cost": {"alpha": 1.54, "beta": 0.46},
        "servers": [{"name": "s1", "capacity_pps": 1000000}, {"name": "s2", "capacity_pps": 1000000}],
        "traffic_pps": {"s1": {"s1": 300000, "s2": 100000}, "s2": {"s2": 50000}}}


def write(tmp_path: Path, document, name: str = "dc.json") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_parser_defaults():
    args = build_parser().parse_args(["plan"])
    assert (args.file, args.solver, args.lp_backend, args.output) == (None, "exact", "highs", None)


def test_plan_of_embedded_example_prints_table_and_summary(capsys):
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "s12" in out and "receiver" in out and "sender" in out
    assert "gain" in out and "collected" in out


@pytest.mark.parametrize("example", ["datacentre.json", "datacentre.yaml"])
def test_documented_examples_plan(tmp_path, example, capsys):
    output = tmp_path / "plan.json"
    assert main(["plan", str(DOCS / example), "-o", str(output), "--valid-for", "30m"]) == 0
    plan = json.loads(output.read_text())
    assert plan["format"] == "cosample.plan" and plan["format_version"] == 1
    for key in ("collected_pps", "noncollab_pps", "gain"):
        assert isinstance(plan["summary"][key], float)
    assert plan["solver"]["name"] == "exact" and plan["solver"]["seconds"] >= 0
    for host in plan["hosts"].values():
        assert {"local_rate", "mirrors", "sflow_sampling", "capacity_use"} <= set(host)


def test_yaml_example_keeps_agent_fields_and_per_server_costs(tmp_path):
    output = tmp_path / "plan.json"
    assert main(["plan", str(DOCS / "datacentre.yaml"), "-o", str(output), "-q"]) == 0
    hosts = json.loads(output.read_text())["hosts"]
    assert hosts["db1"]["vm_ports"] == ["vnet0", "vnet1"]
    assert hosts["web2"]["alpha"] == 1.2 and hosts["web1"]["tunnel_ip"] == "192.0.2.11"


@pytest.mark.parametrize("solver,backend", [("full", "glpk"), ("reduced", "highs"), ("full", "cbc")])
def test_lp_solvers_from_the_cli(tmp_path, solver, backend):
    output = tmp_path / "plan.json"
    assert main(["plan", "--solver", solver, "--lp-backend", backend, "-o", str(output), "-q"]) == 0
    plan = json.loads(output.read_text())
    assert plan["solver"] == {**plan["solver"], "name": solver, "lp_backend": backend}


def test_noncollab_plan_has_no_mirrors(tmp_path):
    output = tmp_path / "plan.json"
    assert main(["plan", "--noncollab", "-o", str(output), "-q"]) == 0
    plan = json.loads(output.read_text())
    assert all(not host["mirrors"] for host in plan["hosts"].values())
    assert plan["summary"]["gain"] == 0.0


def test_check_prints_normalised_description(tmp_path, capsys):
    assert main(["check", str(DOCS / "datacentre.yaml")]) == 0
    normalised = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in normalised["servers"]] == ["web1", "web2", "db1"]
    assert normalised["servers"][0]["alpha"] == 1.54


def bad(**changes):
    document = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        target = document
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        last = keys[-1]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return document


BAD_INPUTS = [
    (bad(traffic_pps={"s1": {"s9": 5}}), "traffic_pps.s1.s9: unknown server 's9'"),
    (bad(traffic_pps={"s7": {"s1": 5}}), "traffic_pps.s7: unknown server 's7'"),
    (bad(traffic_pps={"s1": {"s2": -5}}), "traffic_pps.s1.s2: must be >= 0"),
    ('{"cost": {"alpha": 1.54, "beta": 0.46}, "servers": [{"name": "s1", "capacity_pps": NaN}]}',
     "server 's1': capacity_pps: must be finite"),
    ('{"cost": {"alpha": Infinity, "beta": 0.46}, "servers": [{"name": "s1", "capacity_pps": 1}]}',
     "cost.alpha: must be finite"),
    (bad(servers__1__name="s1"), "servers[1].name: duplicate server name 's1'"),
    (bad(cost={"alpha": 0, "beta": 0.46}), "cost.alpha: must be > 0"),
    (bad(cost={"alpha": 1.5, "beta": -1}), "cost.beta: must be > 0"),
    (bad(servers__0={"name": "s1", "capacity_pps": 1000000, "beta": 0}), "server 's1': beta: must be > 0"),
    (bad(servers__0={"name": "s1", "capacity_pps": -3}), "server 's1': capacity_pps: must be >= 0"),
    (bad(servers__0={"name": "s1", "capacity_pps": 1000000, "cpu": 4}), "unknown field 'cpu'"),
    (bad(servers__0={"name": "s1"}), "missing required field 'capacity_pps'"),
    (bad(servers=[]), "servers: expected a non-empty list"),
    (bad(cost={"alpha": "1.5", "beta": 0.46}), "cost.alpha: expected a number"),
    ("{not json", "not valid JSON"),
    (bad(servers__0={"name": "s1", "capacity_pps": 350000}, servers__1={"name": "s2", "capacity_pps": 100000}),
     "infeasible data centre: forwarding load exceeds capacity on 2 server(s): s1 by 50,000 pps, "
     "s2 by 50,000 pps"),
]


@pytest.mark.parametrize("document,message", BAD_INPUTS)
def test_bad_input_is_one_clear_error_and_no_plan(tmp_path, capsys, document, message):
    output = tmp_path / "plan.json"
    assert main(["plan", str(write(tmp_path, document)), "-o", str(output)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("error:") == 1
    assert not output.exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "dc.json"]


def test_missing_file_and_bad_duration(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope.json")]) == 2
    assert "cannot read data-centre description" in capsys.readouterr().err
    assert main(["plan", "--valid-for", "soon"]) == 2
    assert "--valid-for" in capsys.readouterr().err


def test_calibration_file_supplies_coefficients(tmp_path):
    (tmp_path / "cal.json").write_text(json.dumps({"alpha": 0.3, "beta": 0.1, "capacity_pps": 5e5}))
    document = bad(servers__0={"name": "s1", "calibration": "cal.json"})
    output = tmp_path / "plan.json"
    assert main(["plan", str(write(tmp_path, document)), "-o", str(output), "-q"]) == 0
    host = json.loads(output.read_text())["hosts"]["s1"]
    assert (host["alpha"], host["beta"], host["capacity_pps"]) == (0.3, 0.1, 5e5)
