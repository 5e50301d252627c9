"""The column-wise reading of a description (``planner.bulk``) against the models themselves.

Every valid document gives the same columns as validating it whole with ``Description``, and a
document with one bad value anywhere gives the whole-model error line, word for word: the bulk
reader is a faster route to the models' verdict, never a different one."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from cosample.planner import bulk
from cosample.planner.datacentre import DataCentre
from cosample.planner.description import Description, Envelope
from cosample.planner.errors import PlannerError
from cosample.validation import validate

N = 40


def fleet(seed: int) -> dict:
    """A valid description using every optional server field somewhere."""
    rng = random.Random(seed)
    servers = []
    for k in range(N):
        server = {"name": f"h{k}", "capacity_pps": rng.choice([1e6, 2_000_000, 1.5e6])}
        if rng.random() < 0.3:
            server["tunnel_ip"] = rng.choice(
                [f"10.0.{k}.1", "2001:DB8::1", f"172.16.0.{k + 1}", "2001:db8::2"]
            )
        if rng.random() < 0.3:
            server["bridge"] = rng.choice(["br-int", "br0", "brü"])
        if rng.random() < 0.2:
            server["vm_ports"] = rng.choice([[], ["vnet0", "tap-1"], ["eth.1"]])
        if rng.random() < 0.2:
            server["margin"] = rng.choice([0, 0.25, None])
        if rng.random() < 0.2:
            server["weight"] = rng.choice([1, 2.5])
        if rng.random() < 0.2:
            server["packet_bytes"] = 800
            server["mirror_cap_bytes_per_s"] = rng.choice([0, 1e7])
        if rng.random() < 0.2:
            server["alpha"], server["beta"] = 1.2, 0.5
        if rng.random() < 0.2:
            server["bridge_layout"] = rng.choice(["patch", "single"])
        servers.append(server)
    traffic = {
        f"h{k}": {f"h{k}": rng.choice([1000, 2500.5, 0]), f"h{(k + 1) % N}": 300} for k in range(N)
    }
    return {
        "name": "fleet",
        "cost": {"alpha": 1.54, "beta": 0.46},
        "servers": servers,
        "traffic_pps": traffic,
        "sflow": {"collector": "c:6343"},
    }


@pytest.mark.parametrize("seed", range(6))
def test_columns_are_the_models(seed):
    document = fleet(seed)
    fast = bulk.read(document, "f.json")
    slow = bulk.from_model(validate(Description, document))
    assert fast.servers == slow.servers
    assert fast.header == validate(
        Envelope,
        {key: value for key, value in document.items() if key not in ("servers", "traffic_pps")},
    )
    assert (fast.traffic_rows, fast.traffic_lengths, fast.traffic_dst) == (
        slow.traffic_rows,
        slow.traffic_lengths,
        slow.traffic_dst,
    )
    assert np.array_equal(fast.traffic_pps, slow.traffic_pps)
    a = DataCentre.from_dict(document, source="f.json")
    b = DataCentre.from_description(validate(Description, document), source="f.json")
    for key in (
        "capacity_pps",
        "alpha",
        "beta",
        "traffic_src",
        "traffic_dst",
        "traffic_pps",
        "margin",
        "weight",
        "packet_bytes",
        "mirror_cap_bytes",
        "samples_inbound",
    ):
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None and y is None) or np.array_equal(x, y, equal_nan=True), key
    assert a.server_extras == b.server_extras and a.names == b.names


def test_the_model_normalises_what_it_decides():
    """An address the column check does not accept plainly is the model's, normalised."""
    document = fleet(0)
    document["servers"][7]["tunnel_ip"] = "2001:DB8:0::1"
    assert bulk.read(document, "f").servers["tunnel_ip"][7] == "2001:db8::1"


BAD = [
    ("servers", 17, "capacity_pps", -1),
    ("servers", 17, "capacity_pps", math.nan),
    ("servers", 17, "capacity_pps", math.inf),
    ("servers", 17, "capacity_pps", True),
    ("servers", 17, "capacity_pps", "1e6"),
    ("servers", 17, "capacity_pps", 10**400),
    ("servers", 17, "alpha", 0),
    ("servers", 17, "beta", -0.5),
    ("servers", 17, "margin", 1),
    ("servers", 17, "weight", 0),
    ("servers", 17, "cpu", 4),
    ("servers", 17, "name", ""),
    ("servers", 17, "name", 5),
    ("servers", 17, "tunnel_ip", "10.0.0.256"),
    ("servers", 17, "tunnel_ip", "127.0.0.1"),
    ("servers", 17, "tunnel_ip", "239.1.1.1"),
    ("servers", 17, "tunnel_ip", 10),
    ("servers", 17, "bridge", "br/int"),
    ("servers", 17, "bridge", "."),
    ("servers", 17, "bridge", "a" * 16),
    ("servers", 17, "bridge", ["br0"]),
    ("servers", 17, "vm_ports", ["vnet0", ""]),
    ("servers", 17, "vm_ports", "vnet0"),
    ("servers", 17, "vm_ports", [3]),
    ("servers", 17, "bridge_layout", "flat"),
    ("servers", 17, "calibration", ""),
    ("servers", 17, "mirror_cap_bytes_per_s", 1e6),
    ("servers", 17, None, 5),
    ("servers", 17, None, None),
    ("traffic_pps", "h3", "h4", -5),
    ("traffic_pps", "h3", "h4", "5"),
    ("traffic_pps", "h3", "h4", math.nan),
    ("traffic_pps", "h3", None, []),
    ("traffic_pps", "h3", "h4", False),
]


@pytest.mark.parametrize("part,where,key,value", BAD)
def test_one_bad_value_gives_the_models_line(part, where, key, value):
    document = json.loads(json.dumps(fleet(1)))
    if key is None:
        document[part][where] = value
    else:
        document[part][where][key] = value
    if key == "mirror_cap_bytes_per_s":
        document[part][where].pop("packet_bytes", None)
    with pytest.raises(PlannerError) as whole:
        validate(Description, document, where="f.json", error=PlannerError)
    with pytest.raises(PlannerError) as columns:
        DataCentre.from_dict(document, source="f.json")
    assert str(columns.value) == str(whole.value)
    assert str(whole.value).startswith("f.json: ")


def test_agent_fields_read_as_the_mapping_of_dicts():
    document = fleet(2)
    dc = DataCentre.from_dict(document, source="f.json")
    expected = {}
    for server in validate(Description, document).servers:
        extra = {
            key: getattr(server, key)
            for key in ("tunnel_ip", "bridge", "vm_ports")
            if getattr(server, key) is not None
        }
        if extra:
            expected[server.name] = extra
    assert dict(dc.server_extras) == expected and bool(dc.server_extras) == bool(expected)
    assert len(dc.server_extras) == len(expected)
    assert dc.server_extras.get("nobody") is None
