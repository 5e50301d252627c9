"""The snapshot's binary columnar form: the same snapshot as the JSON form, as strict."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.collector import snapshotbin
from cosample.collector.errors import CollectorError
from cosample.collector.snapshot import Snapshot, parse_snapshot_json
from cosample.collector.snapshottables import PlanRef, ServerEstimate
from cosample.controller.errors import SnapshotError
from cosample.controller.source import parse, snapshot_url
from cosample.times import format_time_ms

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def estimate(pps, local=3, mirrored=1, coverage=0.4, seen=True, **extra):
    return ServerEstimate.model_validate(
        {
            "packets_per_s": pps,
            "packets_per_s_ci95": [pps * 0.9, pps * 1.1],
            "bytes_per_s": pps * 1000,
            "bytes_per_s_ci95": [pps * 900, pps * 1100],
            "samples": local + mirrored,
            "samples_per_s": 1.5,
            "local_samples": local,
            "mirrored_samples": mirrored,
            "coverage": coverage,
            "last_sample": format_time_ms(NOW) if seen else None,
            **extra,
        }
    )


def snapshot(rows=None, traffic=None, **fields):
    rows = (
        rows
        if rows is not None
        else {
            "s1": estimate(
                100.0,
                interfaces={"7": {"in_pps": 90.0, "out_pps": 1.0}},
                packets_per_s_variance=4.0,
                bytes_per_s_variance=9.0,
            ),
            "s2": estimate(
                5.0,
                local=0,
                mirrored=2,
                seen=False,
                packets_per_s_variance=1.0,
                bytes_per_s_variance=2.0,
            ),
        }
    )
    return Snapshot.from_servers(
        rows,
        collector="c1",
        time=NOW,
        window_s=30.0,
        plan=PlanRef(version=7, plan_id="ab12"),
        traffic_pps=traffic if traffic is not None else {"s1": {"s2": 3.0, "s1": 50.0}},
        dropped={"truncated": 2},
        agents=["192.0.2.1"],
    )


def same(a: Snapshot, b: Snapshot) -> None:
    assert a.estimates() == b.estimates()
    assert a.model_dump(exclude={"servers", "interfaces", "traffic_pps"}) == b.model_dump(
        exclude={"servers", "interfaces", "traffic_pps"}
    )
    for table in ("interfaces", "traffic_pps"):
        left, right = getattr(a, table), getattr(b, table)
        assert (left is None) == (right is None)
        if left is not None:
            for key in type(left).model_fields:
                assert np.array_equal(
                    np.asarray(getattr(left, key)), np.asarray(getattr(right, key))
                ), (table, key)


def test_round_trip_equals_the_json_form():
    original = snapshot()
    data = snapshotbin.encode(original)
    assert snapshotbin.is_binary(data) and not snapshotbin.is_binary(original.to_json().encode())
    decoded = snapshotbin.decode(data)
    same(decoded, parse_snapshot_json(original.to_json().encode()))
    assert snapshotbin.encode(decoded) == data  # a decoded snapshot encodes to the same bytes
    assert decoded.traffic_pps.names is decoded.servers.name  # one list for both


rates = st.floats(0, 1e9, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(rates, st.integers(0, 50), st.integers(0, 50), st.floats(0, 1), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), rates), max_size=30),
    st.booleans(),
)
def test_any_snapshot_reads_back_as_its_json_form(rows, entries, other_names):
    table = {
        f"h{k}": estimate(pps, local, mirrored, coverage, seen)
        for k, (pps, local, mirrored, coverage, seen) in enumerate(rows)
    }
    names = list(table) if not other_names else [f"x{k}" for k in range(12)]
    traffic = {}
    for src, dst, pps in entries:
        if src < len(names) and dst < len(names):
            traffic.setdefault(names[src], {})[names[dst]] = pps
    original = snapshot(table, traffic or None)
    same(
        snapshotbin.decode(snapshotbin.encode(original)),
        parse_snapshot_json(original.to_json().encode()),
    )


def columns_of(data: bytes) -> tuple[dict, list[np.ndarray]]:
    size = struct.unpack_from("<Q", data, 8)[0]
    header = orjson.loads(data[16 : 16 + size])
    offset = 16 + size + (-(16 + size) % 8)
    arrays = []
    for dtype, count in header["columns"]:
        arrays.append(np.frombuffer(data, dtype=dtype, count=count, offset=offset).copy())
        offset += 8 * count
    return header, arrays


def rebuilt(header: dict, arrays: list[np.ndarray]) -> bytes:
    header = dict(header, columns=[[a.dtype.str, int(a.size)] for a in arrays])
    text = orjson.dumps(header)
    pad = b"\0" * (-(16 + len(text)) % 8)
    return b"".join(
        [snapshotbin.MAGIC, struct.pack("<Q", len(text)), text, pad, *(a.tobytes() for a in arrays)]
    )


def altered(path: str, index: int, value) -> bytes:
    """The binary form with one value of one column changed."""
    header, arrays = columns_of(snapshotbin.encode(snapshot()))
    table, key = path.split(".")
    column = header[table][key]["$column"]
    arrays[column][index] = value
    return rebuilt(header, arrays)


@pytest.mark.parametrize(
    "path, index, value, message",
    [
        (
            "servers.packets_per_s",
            1,
            -1.0,
            "servers.packets_per_s[1] (server 's2'): expected a finite number >= 0 (got -1.0)",
        ),
        (
            "servers.bytes_per_s",
            0,
            np.inf,
            "servers.bytes_per_s[0] (server 's1'): expected a finite",
        ),
        (
            "servers.coverage",
            1,
            1.5,
            "servers.coverage[1] (server 's2'): expected a finite number in [0, 1] (got 1.5)",
        ),
        ("servers.samples", 0, -3, "servers.samples[0] (server 's1'): expected a non-negative"),
        (
            "servers.samples",
            0,
            99,
            "servers.samples[0]: server 's1': local_samples + mirrored_samples",
        ),
        ("servers.packets_per_s_ci95_low", 0, 1e6, "low bound above high bound"),
        ("traffic_pps.src", 0, 5, "traffic_pps.src[0]: no such row in names (2 rows) (got 5)"),
        (
            "traffic_pps.pps",
            0,
            np.nan,
            "traffic_pps.pps[0]: expected a finite number >= 0 (got nan)",
        ),
        ("interfaces.in_pps", 0, -2.0, "interfaces.in_pps[0]: expected a finite number >= 0"),
    ],
)
def test_a_bad_value_is_named_with_its_server(path, index, value, message):
    with pytest.raises(CollectorError) as caught:
        snapshotbin.decode(altered(path, index, value), "http://c1/snapshot.bin")
    assert str(caught.value).startswith("http://c1/snapshot.bin: ")
    assert message in str(caught.value)


def test_broken_framing_is_named():
    data = snapshotbin.encode(snapshot())
    header, arrays = columns_of(data)
    cases = {
        data[:-8]: "columns[",
        data + b"\0" * 8: "8 bytes after the last column",
        b"{}": "not a binary snapshot",
        snapshotbin.MAGIC + struct.pack("<Q", 10**9): "header of 1000000000 bytes",
        rebuilt({**header, "colector": "x"}, arrays): "colector",
        rebuilt({**header, "window_s": -1}, arrays): "window_s",
        rebuilt(
            {**header, "servers": {**header["servers"], "name": ["s1", ""]}}, arrays
        ): "servers.name[1]",
        rebuilt(
            {**header, "servers": {**header["servers"], "name": ["s1", "s1"]}}, arrays
        ): "'s1' appears twice",
        rebuilt({**header, "servers": {**header["servers"], "name": ["s1"]}}, arrays): "1 servers",
        rebuilt(
            {**header, "servers": {**header["servers"], "coverage": [0.4, 0.4]}}, arrays
        ): 'servers.coverage: expected {"$column": index}',
    }
    wrong_type = [a.astype("<f8") if a.dtype.kind == "i" else a for a in arrays]
    cases[rebuilt(header, wrong_type)] = "expected integers (<i8), got <f8"
    for bad, message in cases.items():
        with pytest.raises(CollectorError) as caught:
            snapshotbin.decode(bad, "snap.bin")
        assert str(caught.value).startswith("snap.bin: ") and message in str(caught.value), (
            message,
            str(caught.value),
        )


def test_the_controller_reads_either_form(tmp_path):
    original = snapshot()
    from_json = parse(original.to_json().encode(), "a.json")
    from_binary = parse(snapshotbin.encode(original), "a.bin")
    same(from_json, from_binary)
    with pytest.raises(SnapshotError, match="a.bin: .*servers.coverage"):
        parse(altered("servers.coverage", 0, -1.0), "a.bin")
    assert snapshot_url("http://c1:9100") == "http://c1:9100/snapshot.bin"
    assert snapshot_url("http://c1:9100/snapshot") == "http://c1:9100/snapshot"


def test_the_controllers_estimate_is_the_same_from_either_form():
    from controller_helpers import inventory_doc

    from cosample.controller.estimate import measure
    from cosample.controller.inventory import inventory_from_dict

    inventory = inventory_from_dict(inventory_doc([3000.0, 3000.0, 3000.0]))
    rows = {name: estimate(pps) for name, pps in (("s1", 900.0), ("s2", 300.0), ("s3", 20.0))}
    original = snapshot(rows, {"s1": {"s2": 400.0, "s1": 300.0}, "s3": {"s1": 10.0}})
    a = measure(parse(original.to_json().encode(), "j"), inventory)
    b = measure(parse(snapshotbin.encode(original), "b"), inventory)
    for key in ("measured", "own_pps", "traffic_src", "traffic_dst", "traffic_pps"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key
    assert a.own_pps[0] == 900.0
