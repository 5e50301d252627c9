"""The testbed's topology is pure data: names, addresses, flows and strict configuration."""

from __future__ import annotations

import json

import pytest

from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.topology import (
    MAX_IFNAME,
    from_config,
    load_config,
    skewed_config,
)


def test_skewed_config_names_addresses_and_traffic():
    topology = from_config(skewed_config(servers=3, vms=2, top_pps=2400, skew=0.5), prefix="ct")
    assert [s.name for s in topology.servers] == ["s1", "s2", "s3"]
    s1 = topology.servers[0]
    assert (s1.namespace, s1.bridge, s1.phy_bridge, s1.tunnel_bridge) == (
        "ct1h",
        "ctbr1",
        "ctbp1",
        "ctbt1",
    )
    assert s1.tunnel_ip == "172.29.77.1" and topology.collector_ip == "172.29.77.254"
    vm = topology.vm("s2v1")
    assert (vm.namespace, vm.port, vm.ip) == ("ct2v1", "ct2v1", "10.77.2.1")
    matrix = topology.traffic_matrix()
    assert sum(matrix["s1"].values()) == pytest.approx(2400)
    assert sum(matrix["s2"].values()) == pytest.approx(1200)
    assert sum(matrix["s3"].values()) == pytest.approx(600)
    assert matrix["s1"]["s2"] == pytest.approx(600)  # a quarter goes to the next server
    assert topology.server_of_ip()["10.77.3.2"] == "s3"


def test_every_name_carries_the_prefix_and_fits_an_interface_name():
    topology = from_config(skewed_config(servers=12, vms=3), prefix="ct")
    names = topology.interface_names()
    assert len(names) == len(set(names))
    assert all(name.startswith("ct") and len(name) <= MAX_IFNAME for name in names)


ONE = {"servers": [{"capacity_pps": 1, "vms": 2}]}


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"servers": []},
            "servers: list should have at least 1 item after validation, not 0 (got [])",
        ),
        (
            {"servers": [{"capacity_pps": 1}] * 201},
            "servers: list should have at most 200 items after "
            "validation, not 201 (got [{'capacity_pps': 1}, "
            "{'capacity_pps': 1}, {'capacity_pps': 1}, "
            "{'capacity_pps': 1}, ...])",
        ),
        (
            {"servers": [{"capacity_pps": 1}], "colour": 1},
            "colour: extra inputs are not permitted (got 1)",
        ),
        (
            {"servers": [{"capacity_pps": -1}]},
            "servers[0].capacity_pps: input should be greater than or equal to 0 (got -1)",
        ),
        (
            {"servers": [{"capacity_pps": 1, "vms": 0}]},
            "servers[0].vms: input should be greater than or equal to 1 (got 0)",
        ),
        (
            {"servers": [{"capacity_pps": 1, "vms": True}]},
            "servers[0].vms: input should be a valid integer (got True)",
        ),
        (
            {**ONE, "flows": [{"src": "s1v1", "dst": "s9v1", "pps": 5}]},
            "flows[0].dst: unknown VM (known: s1v1, s1v2) (got 's9v1')",
        ),
        (
            {
                **ONE,
                "flows": [
                    {"src": "s1v1", "dst": "s1v2", "pps": 5},
                    {"src": "v", "dst": "s1v2", "pps": 5},
                ],
            },
            "flows[1].src: unknown VM (known: s1v1, s1v2) (got 'v')",
        ),
        (
            {**ONE, "flows": [{"src": "s1v1", "dst": "s1v1", "pps": 5}]},
            "flows[0].dst: the same VM as src (got 's1v1')",
        ),
        (
            {**ONE, "flows": [{"src": "s1v1", "dst": "s1v2", "pps": "x"}]},
            "flows[0].pps: input should be a valid number (got 'x')",
        ),
        (
            {**ONE, "flows": [{"src": "s1v1", "dst": "s1v2", "pps": 0.5}]},
            "flows[0].pps: input should be greater than or equal to 1 (got 0.5)",
        ),
        ({**ONE, "flows": [{"src": "s1v1", "dst": "s1v2"}]}, "flows[0].pps: field required"),
        (
            {"servers": [{"capacity_pps": 1}], "packet_bytes": 9000},
            "packet_bytes: input should be less than or equal to 1372 (got 9000)",
        ),
        ("servers: 3", "input should be a valid dictionary (got 'servers: 3')"),
    ],
)
def test_bad_config_names_the_field(config, message):
    with pytest.raises(TestbedError) as info:
        from_config(config, where="tb.yaml")
    assert str(info.value) == f"tb.yaml: {message}"


def test_prefix_must_keep_names_short_and_plain():
    with pytest.raises(TestbedError) as info:
        from_config(skewed_config(servers=2), prefix="averyverylongprefix")
    assert str(info.value) == (
        "prefix: makes the interface name 'averyverylongprefixbr0' invalid: not an "
        "interface name (1 to 15 bytes, no '/', ':' or white space, not '.' or '..') "
        "(got 'averyverylongprefix')"
    )
    for bad in ("c-t", "", "1ct", "çt"):
        with pytest.raises(TestbedError) as info:
            from_config(skewed_config(servers=2), prefix=bad)
        assert (
            str(info.value)
            == f"prefix: expected letters and digits starting with a letter (got {bad!r})"
        )


def test_load_config_reads_json_and_yaml(tmp_path):
    config = skewed_config(servers=2)
    (tmp_path / "tb.json").write_text(json.dumps(config))
    (tmp_path / "tb.yaml").write_text("servers:\n  - {capacity_pps: 10, vms: 2}\nflows: []\n")
    assert len(load_config(tmp_path / "tb.json").flows) == 4
    assert load_config(tmp_path / "tb.yaml").servers[0].capacity_pps == 10
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TestbedError, match="not valid"):
        load_config(tmp_path / "bad.json")
    with pytest.raises(TestbedError, match="cannot read"):
        load_config(tmp_path / "missing.json")
