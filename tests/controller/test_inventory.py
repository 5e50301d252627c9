"""The inventory: strict validation, coefficients from calibrations per server or per class."""

from __future__ import annotations

import json

import pytest
import yaml

from cosample.cli import main
from cosample.controller.errors import InventoryError
from cosample.controller.inventory import inventory_from_dict, load_inventory
from controller_helpers import inventory_doc


def write_calibration(path, alpha, beta, capacity=None):
    path.write_text(json.dumps({"alpha": alpha, "beta": beta, "capacity_pps": capacity}))


def test_classes_and_calibrations_resolve_in_order(tmp_path):
    write_calibration(tmp_path / "big.json", 1.2, 0.4, 9000)
    write_calibration(tmp_path / "own.json", 2.0, 0.5)
    document = {
        "name": "dc1",
        "classes": {"big": {"calibration": "big.json"}, "small": {"capacity_pps": 100,
                                                                 "alpha": 3, "beta": 1}},
        "servers": [
            {"name": "a", "class": "big", "bridge": "br-int", "tunnel_ip": "10.0.0.1",
             "vm_ports": ["tap1", "tap2"]},
            {"name": "b", "class": "big", "calibration": "own.json", "capacity_pps": 5000},
            {"name": "c", "class": "small", "alpha": 4},
        ],
        "sflow": {"collector": "10.0.0.100:6343", "polling_s": 10},
    }
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(document))
    inventory = load_inventory(path)
    assert inventory.names == ("a", "b", "c")
    assert inventory.capacity_pps.tolist() == [9000, 5000, 100]
    assert inventory.alpha.tolist() == [1.2, 2.0, 4.0]
    assert inventory.beta.tolist() == [0.4, 0.5, 1.0]
    assert inventory.extras["a"] == {"bridge": "br-int", "tunnel_ip": "10.0.0.1",
                                     "vm_ports": ["tap1", "tap2"]}
    assert inventory.sflow == {"collector": "10.0.0.100:6343", "polling_s": 10}
    assert inventory.index["c"] == 2


@pytest.mark.parametrize("change, message", [
    (lambda d: d["servers"].append(dict(d["servers"][0])), "servers[2].name: duplicate server 's1'"),
    (lambda d: d["servers"][0].update({"class": "gpu"}), "servers[0].class ('s1'): unknown class 'gpu'"),
    (lambda d: d["servers"][1].update(tunnel_ip="192.0.2.1"), "servers[1].tunnel_ip ('s2'): 192.0.2.1 is also 's1'"),
    (lambda d: d["servers"][0].update(tunnel_ip="300.1.1.1"), "servers[0].tunnel_ip"),
    (lambda d: d["servers"][0].update(capacity_pps=-1), "servers[0].capacity_pps"),
    (lambda d: d["servers"][0].update(capacity_pps="1000"), "servers[0].capacity_pps"),
    (lambda d: d["servers"][0].update(vm_ports=["a/b"]), "servers[0].vm_ports[0]"),
    (lambda d: d["servers"][0].update(traffic_pps=5), "servers[0].traffic_pps ('s1'): extra inputs"),
    (lambda d: d.update(servers=[]), "servers: list should have at least 1 item"),
    (lambda d: d.pop("cost"), "servers[0].alpha ('s1'): missing"),
])
def test_bad_inventories_name_the_field(change, message):
    document = inventory_doc([1000, 1000])
    change(document)
    with pytest.raises(InventoryError) as caught:
        inventory_from_dict(document, source="dc.yaml")
    assert str(caught.value).startswith("dc.yaml: ")
    assert message.lower() in str(caught.value).lower()


def test_bad_calibration_names_the_server_and_file(tmp_path):
    (tmp_path / "cal.json").write_text('{"alpha": 0, "beta": 0.5}')
    document = inventory_doc([1000])
    document["servers"][0]["calibration"] = "cal.json"
    with pytest.raises(InventoryError, match=r"servers\[0\] \('s1'\)\.calibration: .*cal.json"):
        inventory_from_dict(document, base_dir=tmp_path, source="dc.json")


def test_check_command_prints_normalised_or_exits_2(tmp_path, capsys):
    path = tmp_path / "dc.json"
    path.write_text(json.dumps(inventory_doc([1000, 2000])))
    assert main(["controller", "check", "--inventory", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [s["capacity_pps"] for s in printed["servers"]] == [1000, 2000]
    path.write_text("{not json")
    assert main(["controller", "check", "--inventory", str(path)]) == 2
    assert f"{path}: not valid JSON" in capsys.readouterr().err


def test_the_documented_example_loads():
    from pathlib import Path

    path = Path(__file__).parents[2] / "docs" / "examples" / "inventory.yaml"
    inventory = load_inventory(path)
    assert inventory.names == ("s1", "s2", "s3")
    assert inventory.capacity_pps.tolist() == [1200000, 900000, 2000000]
    assert inventory.alpha.tolist() == [1.4, 1.4, 1.54]
