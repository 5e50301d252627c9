"""A description whose servers and traffic are CSV files (``planner.fleetcsv``): the same plan as
the JSON form, and every bad cell one line naming the file, row, column and value."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cosample.cli import main
from cosample.planner.datacentre import DataCentre

SERVERS = [
    {
        "name": "s1",
        "capacity_pps": 1_000_000,
        "tunnel_ip": "10.0.0.1",
        "bridge": "br-int",
        "vm_ports": ["vnet0", "vnet1"],
    },
    {"name": "s2", "capacity_pps": 1_500_000, "tunnel_ip": "2001:DB8::2", "margin": 0.2},
    {
        "name": "s3",
        "capacity_pps": 400_000,
        "tunnel_ip": "10.0.0.3",
        "weight": 2,
        "bridge_layout": "single",
    },
    {
        "name": "s4",
        "capacity_pps": 900_000,
        "alpha": 1.2,
        "beta": 0.5,
        "packet_bytes": 800,
        "mirror_cap_bytes_per_s": 1e7,
    },
]
TRAFFIC = {
    "s1": {"s1": 120_000, "s2": 30_000},
    "s2": {"s2": 200_000, "s3": 5_000},
    "s3": {"s3": 150_000, "s1": 40_000},
    "s4": {"s4": 90_000, "s1": 0},
}
COLUMNS = [
    "name",
    "capacity_pps",
    "alpha",
    "beta",
    "tunnel_ip",
    "bridge",
    "vm_ports",
    "margin",
    "weight",
    "packet_bytes",
    "mirror_cap_bytes_per_s",
    "bridge_layout",
]


def envelope(**changes) -> dict:
    return {
        "name": "fleet",
        "cost": {"alpha": 1.54, "beta": 0.46},
        "servers": "servers.csv",
        "traffic_pps": "traffic.csv",
        **changes,
    }


def write_csv_form(tmp_path: Path, servers=SERVERS, traffic=TRAFFIC, header=COLUMNS) -> Path:
    with open(tmp_path / "servers.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(header)
        for server in servers:
            writer.writerow(
                [
                    " ".join(server[key])
                    if key == "vm_ports" and key in server
                    else server.get(key, "")
                    for key in header
                ]
            )
    with open(tmp_path / "traffic.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["source", "destination", "pps"])
        for source, row in traffic.items():
            for destination, pps in row.items():
                writer.writerow([source, destination, pps])
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(envelope()))
    return path


def test_csv_form_plans_as_the_json_form(tmp_path):
    csv_form = write_csv_form(tmp_path)
    json_form = tmp_path / "same.json"
    json_form.write_text(json.dumps({**envelope(), "servers": SERVERS, "traffic_pps": TRAFFIC}))
    plans = []
    for path in (csv_form, json_form):
        output = tmp_path / f"{path.stem}.plan.json"
        assert main(["plan", str(path), "-o", str(output), "-q", "--plan-version", "1"]) == 0
        plans.append(json.loads(output.read_text()))
    assert plans[0]["plan_id"] == plans[1]["plan_id"]
    assert plans[0]["hosts"] == plans[1]["hosts"]
    assert plans[0]["hosts"]["s2"]["tunnel_ip"] == "2001:db8::2"  # the model's normal form
    assert plans[0]["hosts"]["s1"]["vm_ports"] == ["vnet0", "vnet1"]


def test_only_one_part_as_csv(tmp_path):
    write_csv_form(tmp_path)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({**envelope(), "servers": SERVERS}))
    dc = DataCentre.load(path)
    assert dc.names == ("s1", "s2", "s3", "s4") and len(dc.traffic_pps) == 7  # s4 -> s1 is 0


def servers_with(**cells):
    """SERVERS with server s3's cells replaced (a CSV cell is text)."""
    return [dict(server, **cells) if server["name"] == "s3" else server for server in SERVERS]


BAD = [
    (
        dict(servers=servers_with(capacity_pps=-1)),
        "servers.csv: row 4: capacity_pps: input should be greater than or equal to 0 (got -1.0)",
    ),
    (
        dict(servers=servers_with(capacity_pps="lots")),
        "servers.csv: row 4: capacity_pps: input should be a valid number (got 'lots')",
    ),
    (
        dict(servers=servers_with(capacity_pps="nan")),
        "servers.csv: row 4: capacity_pps: input should be a finite number (got nan)",
    ),
    (
        dict(servers=servers_with(margin=1)),
        "servers.csv: row 4: margin: input should be less than 1 (got 1.0)",
    ),
    (
        dict(servers=servers_with(tunnel_ip="239.1.1.1")),
        "servers.csv: row 4: tunnel_ip: expected a unicast address that routes between hosts (not "
        "multicast, loopback, link-local, reserved or unspecified) (got '239.1.1.1')",
    ),
    (
        dict(servers=servers_with(bridge="br/int")),
        "servers.csv: row 4: bridge: not an interface name (1 to 15 bytes, no '/', ':' or white "
        "space, not '.' or '..') (got 'br/int')",
    ),
    (
        dict(servers=servers_with(bridge_layout="flat")),
        "servers.csv: row 4: bridge_layout: input should be 'patch' or 'single' (got 'flat')",
    ),
    (dict(servers=servers_with(name="")), "servers.csv: row 4: name: field required"),
    (
        dict(servers=servers_with(capacity_pps="")),
        "servers.csv: row 4: capacity_pps ('s3'): field required (neither the server nor its "
        "calibration file gives it)",
    ),
    (
        dict(servers=servers_with(name="s1")),
        "servers.csv: row 4: name ('s1'): duplicate server name, also row 2 (got 's1')",
    ),
    (
        dict(header=COLUMNS + ["cpu"]),
        "servers.csv: row 1: column 13 'cpu': not a server field (one of name, capacity_pps, alpha, "
        "beta, calibration, tunnel_ip, bridge, vm_ports, margin, weight, packet_bytes, "
        "mirror_cap_bytes_per_s, bridge_layout, alpha_sample, observation_domain)",
    ),
    (
        dict(traffic={**TRAFFIC, "s2": {"s9": 5}}),
        "traffic.csv: row 4: destination: unknown server, not in servers (got 's9')",
    ),
    (
        dict(traffic={**TRAFFIC, "s7": {"s1": 5}}),
        "traffic.csv: row 10: source: unknown server, not in servers (got 's7')",
    ),
    (
        dict(traffic={**TRAFFIC, "s2": {"s2": -5}}),
        "traffic.csv: row 4: pps: input should be greater than or equal to 0 (got -5.0)",
    ),
    (
        dict(traffic={**TRAFFIC, "s2": {"s2": "x"}}),
        "traffic.csv: row 4: pps: input should be a valid number (got 'x')",
    ),
]


@pytest.mark.parametrize("changes,message", BAD)
def test_bad_cell_is_one_line_with_file_row_column_value(tmp_path, capsys, changes, message):
    path = write_csv_form(tmp_path, **changes)
    output = tmp_path / "plan.json"
    assert main(["plan", str(path), "-o", str(output)]) == 2
    assert capsys.readouterr().err == f"cosample: error: {tmp_path}/{message}\n"
    assert not output.exists()


def test_ragged_row_and_repeated_pair(tmp_path, capsys):
    path = write_csv_form(tmp_path)
    with open(tmp_path / "traffic.csv", "a") as stream:
        stream.write("s1,s2,7\n")
    assert main(["plan", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"cosample: error: {tmp_path}/traffic.csv: row 10: "
        "destination: the pair 's1' -> 's2' again, also row 3\n"
    )
    with open(tmp_path / "servers.csv", "a") as stream:
        stream.write("s9,5\n")
    assert main(["plan", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"cosample: error: {tmp_path}/servers.csv: row 6: 2 cells, the header has 12\n"
    )


def test_documented_csv_example_plans(tmp_path):
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet.json"
    output = tmp_path / "plan.json"
    assert main(["plan", str(example), "-o", str(output), "-q"]) == 0
    hosts = json.loads(output.read_text())["hosts"]
    assert sorted(hosts) == ["db1", "web1", "web2"]
    assert hosts["web1"]["vm_ports"] == ["vnet0", "vnet1"] and "vm_ports" not in hosts["db1"]
    assert hosts["web2"]["margin"] == 0.2
