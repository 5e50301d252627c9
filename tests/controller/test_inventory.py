"""The inventory: strict validation, coefficients from calibrations per server or per class."""

from __future__ import annotations

import json

import pytest
import yaml
from controller_helpers import inventory_doc

from cosample.cli import main
from cosample.controller.errors import InventoryError
from cosample.controller.inventory import inventory_from_dict, load_inventory


def write_calibration(path, alpha, beta, capacity=None):
    path.write_text(json.dumps({"alpha": alpha, "beta": beta, "capacity_pps": capacity}))


def test_classes_and_calibrations_resolve_in_order(tmp_path):
    write_calibration(tmp_path / "big.json", 1.2, 0.4, 9000)
    write_calibration(tmp_path / "own.json", 2.0, 0.5)
    document = {
        "name": "dc1",
        "classes": {
            "big": {"calibration": "big.json"},
            "small": {"capacity_pps": 100, "alpha": 3, "beta": 1},
        },
        "servers": [
            {
                "name": "a",
                "class": "big",
                "bridge": "br-int",
                "tunnel_ip": "10.0.0.1",
                "vm_ports": ["tap1", "tap2"],
            },
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
    assert inventory.extras["a"] == {
        "bridge": "br-int",
        "tunnel_ip": "10.0.0.1",
        "vm_ports": ["tap1", "tap2"],
    }
    assert inventory.sflow == {"collector": "10.0.0.100:6343", "polling_s": 10}
    assert inventory.index["c"] == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["servers"].append(dict(d["servers"][0])),
            "servers[2].name: duplicate server 's1'",
        ),
        (
            lambda d: d["servers"][0].update({"class": "gpu"}),
            "servers[0].class ('s1'): unknown class 'gpu'",
        ),
        (
            lambda d: d["servers"][1].update(tunnel_ip="192.0.2.1"),
            "servers[1].tunnel_ip ('s2'): 192.0.2.1 is also 's1'",
        ),
        (lambda d: d["servers"][0].update(tunnel_ip="300.1.1.1"), "servers[0].tunnel_ip"),
        (lambda d: d["servers"][0].update(capacity_pps=-1), "servers[0].capacity_pps"),
        (lambda d: d["servers"][0].update(capacity_pps="1000"), "servers[0].capacity_pps"),
        (lambda d: d["servers"][0].update(vm_ports=["a/b"]), "servers[0].vm_ports[0]"),
        (
            lambda d: d["servers"][0].update(traffic_pps=5),
            "servers[0].traffic_pps ('s1'): extra inputs",
        ),
        (lambda d: d.update(servers=[]), "servers: list should have at least 1 item"),
        (lambda d: d.pop("cost"), "servers[0].alpha ('s1'): missing"),
    ],
)
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


def test_extras_kept_as_columns_write_the_same_plan():
    """The inventory keeps the servers' extras as columns (``ExtraColumns``: every publication
    writes them column by column); the plan's bytes are those of the per-host dictionaries."""
    from datetime import datetime, timedelta, timezone

    import numpy as np

    from cosample.controller.inventory import Inventory
    from cosample.planner import solve
    from cosample.planner.datacentre import DataCentre, ExtraColumns
    from cosample.planner.planbytes import compact_json
    from cosample.planner.planfile import build_plan

    names = tuple(f"s{i}" for i in range(6))
    extras = {
        name: {"bridge": "br-int", "tunnel_ip": f"10.0.0.{i + 1}"} for i, name in enumerate(names)
    }
    extras["s2"] = {"bridge": "br-x", "vm_ports": ["tap1", "tap2"]}  # a partial column
    del extras["s4"]  # and a server with none
    inventory = Inventory("dc", names, np.full(6, 1e4), np.full(6, 1.54), np.full(6, 0.46), extras)
    assert isinstance(inventory.extras, ExtraColumns)
    assert dict(inventory.extras) == extras and inventory.extras.get("s4", {}) == {}
    moment = datetime.now(timezone.utc).replace(microsecond=0)

    def plan(server_extras):
        dc = DataCentre(
            names=names,
            capacity_pps=inventory.capacity_pps,
            alpha=inventory.alpha,
            beta=inventory.beta,
            traffic_src=np.arange(6),
            traffic_dst=np.arange(6),
            traffic_pps=np.linspace(2e3, 9e3, 6),
            name="dc",
            server_extras=server_extras,
        )
        document = build_plan(
            dc,
            solve(dc),
            created=moment,
            valid_for=timedelta(1),
            version=1,
            report=False,
            lazy_hosts=True,
        )
        document["solver"] = {**document["solver"], "seconds": 0.0}  # the one volatile field
        return compact_json(document)

    assert plan(inventory.extras) == plan(extras)
    with_none = {"s0": {"bridge": None}}
    assert (
        Inventory("dc", names, np.ones(6), np.ones(6), np.ones(6), with_none).extras is with_none
    )  # None would read as "not given": kept as it is
