"""Every ``cosample plan``/``check`` path, including each documented bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosample.cli import build_parser, main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"
GOOD = {
    "cost": {"alpha": 1.54, "beta": 0.46},
    "servers": [{"name": "s1", "capacity_pps": 1000000}, {"name": "s2", "capacity_pps": 1000000}],
    "traffic_pps": {"s1": {"s1": 300000, "s2": 100000}, "s2": {"s2": 50000}},
}


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
    summary = json.loads(output.read_text())["summary"]["appmon"]  # its services are planned
    assert summary["services"] == 2 and summary["objective"]["gap"] <= 1e-6
    db1 = {entry["service"]["port"]: entry for entry in hosts["db1"]["appmon"]}
    assert db1[8080]["share"] >= 0.1


@pytest.mark.parametrize(
    "solver,backend", [("full", "glpk"), ("reduced", "highs"), ("full", "cbc")]
)
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
    assert normalised["cost"] == {"alpha": 1.54, "beta": 0.46} and normalised["name"] == "rack-7"
    assert normalised["servers"][1]["alpha"] == 1.2 and len(normalised["services"]) == 2


#: Every part of a description, so ``check`` can drop none of them unnoticed.
RICH = {
    "cost": {"alpha": 1.54, "beta": 0.46},
    "sflow": {"collector": "192.0.2.100:6343", "header_bytes": 128, "polling_s": 10},
    "ipfix": {"collector": "192.0.2.100:4739", "cache_active_timeout_s": 2},
    "budgets": {"collector_samples_pps": 400000, "analysis_hosts": 1},
    "appmon_cost": {"onsite": 3.0, "mirror_bytes": 900},
    "appmon_order": "sflow_first",
    "services": [
        {"server": "s1", "address": "2001:db8::0:5", "port": 80, "weight": 2, "min_share": 0.1}
    ],
    "servers": [
        {
            "name": "s1",
            "calibration": "cal.json",
            "weight": 5,
            "packet_bytes": 500,
            "mirror_cap_bytes_per_s": 1e8,
            "bridge_layout": "single",
            "tunnel_ip": "2001:db8::0:1",
            "vm_ports": ["tap1", "tap2"],
        },
        {"name": "s2", "capacity_pps": 1e6, "margin": 0.3, "alpha_sample": 0.2},
        {"name": "s3", "capacity_pps": 9e5, "alpha": 1.2, "beta": 0.4, "observation_domain": 7},
    ],
    "traffic_pps": {"s1": {"s1": 6e5, "s2": 1e5}, "s2": {"s2": 2e5}, "s3": {"s3": 1e5}},
}


@pytest.mark.parametrize(
    "source", ["rich", "datacentre.json", "datacentre.yaml", "fleet.json"], ids=str
)
@pytest.mark.parametrize("robust", [False, True], ids=["point", "robust"])
def test_checks_output_is_a_description_that_plans_to_the_same_plan(
    tmp_path, capsys, source, robust
):
    """``check FILE > OUT``, then ``plan OUT`` somewhere else: the same plan_id (and the
    output is a description ``check`` accepts again, unchanged)."""
    if source == "rich":
        (tmp_path / "cal.json").write_text(json.dumps(calibration()))  # with its intervals
        original = write(tmp_path, RICH)
    else:
        original = DOCS / source
    flags = ["--robust"] if robust else []

    def plan_id(path) -> str:
        assert main(["plan", str(path), "--json", *flags]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)["plan_id"]

    assert main(["check", str(original)]) == 0
    normalised = capsys.readouterr().out
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "checked.json").write_text(normalised)
    assert plan_id(elsewhere / "checked.json") == plan_id(original)
    assert main(["check", str(elsewhere / "checked.json")]) == 0
    assert capsys.readouterr().out == normalised


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
    (
        bad(traffic_pps={"s1": {"s9": 5}}),
        "traffic_pps.s1.s9: unknown server, not in servers (got 's9')",
    ),
    (
        bad(traffic_pps={"s7": {"s1": 5}}),
        "traffic_pps.s7: unknown server, not in servers (got 's7')",
    ),
    (
        bad(traffic_pps={"s1": {"s2": -5}}),
        "traffic_pps.s1.s2: input should be greater than or equal to 0 (got -5)",
    ),
    (bad(traffic_pps={"s1": []}), "traffic_pps.s1: input should be a valid dictionary (got [])"),
    (
        '{"cost": {"alpha": 1.54, "beta": 0.46}, "servers": [{"name": "s1", "capacity_pps": NaN}]}',
        "servers[0].capacity_pps ('s1'): input should be a finite number (got nan)",
    ),
    (
        '{"cost": {"alpha": Infinity, "beta": 0.46}, "servers": [{"name": "s1", "capacity_pps": 1}]}',
        "cost.alpha: input should be a finite number (got inf)",
    ),
    (
        bad(servers__1__name="s1"),
        "servers[1].name ('s1'): duplicate server name, also servers[0] (got 's1')",
    ),
    (bad(cost={"alpha": 0, "beta": 0.46}), "cost.alpha: input should be greater than 0 (got 0)"),
    (bad(cost={"alpha": 1.5, "beta": -1}), "cost.beta: input should be greater than 0 (got -1)"),
    (bad(cost={"alpha": 1.5}), "cost.beta: field required"),
    (
        bad(servers__0={"name": "s1", "capacity_pps": 1000000, "beta": 0}),
        "servers[0].beta ('s1'): input should be greater than 0 (got 0)",
    ),
    (
        bad(servers__0={"name": "s1", "capacity_pps": -3}),
        "servers[0].capacity_pps ('s1'): input should be greater than or equal to 0 (got -3)",
    ),
    (
        bad(servers__0={"name": "s1", "capacity_pps": 1000000, "cpu": 4}),
        "servers[0].cpu ('s1'): extra inputs are not permitted (got 4)",
    ),
    (
        bad(servers__0={"name": "s1"}),
        "servers[0].capacity_pps ('s1'): field required (neither the server nor its calibration file gives it)",
    ),
    (
        bad(servers__1={"name": "s2", "capacity_pps": 1, "bridge": "br/int"}),
        "servers[1].bridge ('s2'): not an interface name (1 to 15 bytes, no '/', ':' or white space, "
        "not '.' or '..') (got 'br/int')",
    ),
    (
        bad(servers__1={"name": "s2", "capacity_pps": 1, "tunnel_ip": "10.0.0.256"}),
        "servers[1].tunnel_ip ('s2'): expected an IP address (got '10.0.0.256')",
    ),
    # the agents' rule, so the planner never plans for an endpoint an agent would refuse
    (
        bad(servers__1={"name": "s2", "capacity_pps": 1, "tunnel_ip": "239.1.1.1"}),
        "servers[1].tunnel_ip ('s2'): expected a unicast address that routes between hosts (not "
        "multicast, loopback, link-local, reserved or unspecified) (got '239.1.1.1')",
    ),
    (
        bad(
            servers__1={
                "name": "s2",
                "capacity_pps": 1,
                "tunnel_ip": "2001:db8::1",
                "vm_ports": ["vnet0", ""],
            }
        ),
        "servers[1].vm_ports[1] ('s2'): not an interface name (1 to 15 bytes, no '/', ':' or white space, "
        "not '.' or '..') (got '')",
    ),
    (
        bad(servers__1={"name": "s2", "capacity_pps": 1, "calibration": "nope.json"}),
        "servers[1].calibration ('s2'): {dir}/nope.json: cannot read calibration: No such file or directory",
    ),
    (bad(servers=[]), "servers: list should have at least 1 item after validation, not 0 (got [])"),
    (
        bad(cost={"alpha": "1.5", "beta": 0.46}),
        "cost.alpha: input should be a valid number (got '1.5')",
    ),
    (
        bad(sflow={"collector": "c:6343", "polling_s": -1}),
        "sflow.polling_s: input should be greater than or equal to 0 (got -1)",
    ),
    (
        bad(servers__0={"name": "s1", "capacity_pps": 1000000, "margin": 1}),
        "servers[0].margin ('s1'): input should be less than 1 (got 1)",
    ),
    (
        bad(servers__0={"name": "s1", "capacity_pps": 1000000, "mirror_cap_bytes_per_s": 1e6}),
        "servers[0].mirror_cap_bytes_per_s ('s1'): needs packet_bytes (the mean packet size) to count "
        "mirrored packets (got 1000000.0)",
    ),
    (
        bad(servers__0={"name": "s1", "capacity_pps": 1000000, "bridge_layout": "flat"}),
        "servers[0].bridge_layout ('s1'): input should be 'patch' or 'single' (got 'flat')",
    ),
    (
        bad(servers__0={"name": "s1", "capacity_pps": 1000000, "weight": 0}),
        "servers[0].weight ('s1'): input should be greater than 0 (got 0)",
    ),
    (
        bad(budgets={"collector_samples_pps": -1}),
        "budgets.collector_samples_pps: input should be greater than or equal to 0 (got -1)",
    ),
    ([1, 2], "input should be a valid dictionary (got [1, 2])"),
    (
        "{not json",
        "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    (
        bad(
            servers__0={"name": "s1", "capacity_pps": 350000},
            servers__1={"name": "s2", "capacity_pps": 100000},
        ),
        "infeasible data centre: forwarding load exceeds capacity on 2 server(s): s1 by 50,000 pps, "
        "s2 by 50,000 pps; raise their capacity_pps or move traffic away",
    ),
]


@pytest.mark.parametrize("document,message", BAD_INPUTS)
def test_bad_input_is_one_clear_error_and_no_plan(tmp_path, capsys, document, message):
    """One line: the file, the field path (with the server's name), what is wrong, the value."""
    output = tmp_path / "plan.json"
    path = write(tmp_path, document)
    assert main(["plan", str(path), "-o", str(output)]) == 2
    err = capsys.readouterr().err
    prefix = "" if message.startswith("infeasible") else f"{path}: "
    assert err == f"cosample: error: {prefix}{message.format(dir=tmp_path)}\n"
    assert not output.exists()
    assert list(tmp_path.iterdir()) == [path]


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


def test_margin_flag_and_its_errors(tmp_path, capsys):
    output = tmp_path / "plan.json"
    assert main(["plan", "--margin", "0.2", "-o", str(output), "-q"]) == 0
    plan = json.loads(output.read_text())
    assert plan["summary"]["assumptions"]["margin"] == 0.2
    assert plan["summary"]["max_capacity_use"] <= 0.8 + 1e-9
    assert "margin 20.0%" in capsys.readouterr().out
    assert main(["plan", "--margin", "1.5", "-o", str(tmp_path / "x.json")]) == 2
    assert "--margin: expected a fraction in [0, 1), got 1.5" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def calibration(alpha=(1.4, 1.6), beta=(0.3, 0.6), capacity=(9e5, 1.1e6)):
    """A calibration JSON as ``cosample fit`` writes it, with 95 % intervals."""

    def fit(value, interval):
        return {
            "coefficient": value,
            "coefficient_ci": list(interval),
            "capacity_pps": 1e6,
            "capacity_ci": list(capacity),
        }

    return {
        "alpha": sum(alpha) / 2,
        "beta": sum(beta) / 2,
        "capacity_pps": 1e6,
        "mechanisms": {"sflow": fit(sum(alpha) / 2, alpha), "mirror": fit(sum(beta) / 2, beta)},
        "roles": {"alpha": "sflow", "beta": "mirror"},
    }


def test_robust_plans_with_interval_ends_and_states_the_point_estimate(tmp_path, capsys):
    (tmp_path / "cal.json").write_text(json.dumps(calibration()))
    document = {
        "cost": {"alpha": 1.54, "beta": 0.46},
        "servers": [
            {"name": "s1", "calibration": "cal.json"},
            {"name": "s2", "calibration": "cal.json"},
            {"name": "s3", "capacity_pps": 1e6},
        ],
        "traffic_pps": {"s1": {"s1": 7e5}, "s2": {"s2": 1e5}},
    }
    path = write(tmp_path, document)
    output = tmp_path / "plan.json"
    assert main(["plan", str(path), "--robust", "-o", str(output), "-q"]) == 0
    printed = capsys.readouterr().out
    plan = json.loads(output.read_text())
    s1 = plan["hosts"]["s1"]
    assert (s1["alpha"], s1["beta"], s1["capacity_pps"]) == (1.6, 0.6, 9e5)
    assert plan["hosts"]["s3"]["alpha"] == 1.54  # no calibration: the point estimate, noted
    assumptions = plan["summary"]["assumptions"]
    assert assumptions["robust"] is True
    point = assumptions["point_estimate_collected_pps"]
    assert point > plan["summary"]["collected_pps"]
    assert f"point estimates would collect {point:,.0f} pps" in printed
    assert any(
        "no calibration interval for 1 server(s)" in note and "s3" in note
        for note in plan["summary"]["notes"]
    )


def test_a_plan_says_when_it_assumes_beta_below_alpha_that_intervals_cannot_tell(tmp_path):
    (tmp_path / "cal.json").write_text(json.dumps(calibration(alpha=(0.1, 0.5), beta=(0.05, 0.4))))
    document = {
        "cost": {"alpha": 1.54, "beta": 0.46},
        "servers": [{"name": "s1", "calibration": "cal.json"}, {"name": "s2", "capacity_pps": 1e6}],
        "traffic_pps": {"s1": {"s1": 9e5}},
    }
    output = tmp_path / "plan.json"
    assert main(["plan", str(write(tmp_path, document)), "-o", str(output), "-q"]) == 0
    notes = json.loads(output.read_text())["summary"]["notes"]
    assert any(
        "beta < alpha although their calibration's 95 % intervals overlap" in note and "s1" in note
        for note in notes
    )


def test_budgets_weights_and_bridge_layout_from_the_description(tmp_path):
    document = {
        "cost": {"alpha": 1.54, "beta": 0.46},
        "budgets": {"collector_samples_pps": 300000},
        "servers": [
            {
                "name": "s1",
                "capacity_pps": 1e6,
                "weight": 5,
                "packet_bytes": 500,
                "mirror_cap_bytes_per_s": 1e8,
                "bridge_layout": "single",
            },
            {"name": "s2", "capacity_pps": 1e6, "margin": 0.3},
            {"name": "s3", "capacity_pps": 1e6},
        ],
        "traffic_pps": {
            "s1": {"s1": 6e5, "s2": 1e5},
            "s2": {"s2": 2e5, "s1": 5e4},
            "s3": {"s3": 1e5},
        },
    }
    output = tmp_path / "plan.json"
    assert main(["plan", str(write(tmp_path, document)), "-o", str(output), "-q"]) == 0
    plan = json.loads(output.read_text())
    s1 = plan["hosts"]["s1"]
    assert s1["weight"] == 5 and s1["sampled_pps"] == 7e5 + 5e4  # own + inbound on one bridge
    assert sum(m["rate"] for m in s1["mirrors"]) * 7e5 * 500 <= 1e8 * (1 + 1e-9)
    assert plan["hosts"]["s2"]["margin"] == 0.3 and plan["hosts"]["s3"]["margin"] == 0.1
    assert plan["summary"]["samples_pps"] <= 300000 * (1 + 1e-9)
    assert plan["summary"]["assumptions"]["collector_cap_pps"] == 300000
    assert plan["summary"]["objective"]["weighted"] is True
