"""The snapshot model: what the controller validates, and the merge of several instances."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from cosample.collector.errors import CollectorError
from cosample.collector.merge import merge_snapshots
from cosample.collector.snapshot import Snapshot, interval, parse_snapshot, parse_snapshot_json
from cosample.collector.snapshottables import PlanRef, ServerEstimate
from cosample.times import format_time_ms as format_time

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def server(pps: float, local: int = 3, mirrored: int = 1) -> dict:
    return {
        "packets_per_s": pps,
        "packets_per_s_ci95": [pps * 0.9, pps * 1.1],
        "bytes_per_s": pps * 1000,
        "bytes_per_s_ci95": [pps * 900, pps * 1100],
        "samples": local + mirrored,
        "samples_per_s": 1.5,
        "local_samples": local,
        "mirrored_samples": mirrored,
        "coverage": 0.4,
        "last_sample": format_time(NOW),
    }


def document(
    name: str = "c1", servers: dict | None = None, traffic_pps: dict | None = None, **extra
) -> dict:
    """A version-2 (columnar) snapshot document of per-server entries given as objects."""
    servers = servers if servers is not None else {"s1": server(100.0)}
    snapshot = Snapshot.from_servers(
        {k: ServerEstimate.model_validate(v) for k, v in servers.items()},
        collector=name,
        time=NOW,
        window_s=30.0,
        plan=PlanRef(version=7, plan_id="ab12"),
        traffic_pps=traffic_pps,
        dropped={"truncated": 2},
    )
    out = json.loads(snapshot.to_json())
    out.update(extra)
    return out


def test_round_trip_through_json():
    snapshot = parse_snapshot(json.dumps(document()))
    assert snapshot.servers["s1"].packets_per_s == 100.0
    assert snapshot.estimates()["s1"].last_sample == NOW
    assert snapshot.time == NOW
    again = parse_snapshot(snapshot.to_json())
    assert again == snapshot
    assert json.loads(snapshot.to_json())["time"].endswith("Z")
    assert parse_snapshot_json(snapshot.to_json().encode()) == snapshot


def test_columns_carry_what_the_rows_said():
    rows = {
        "s1": dict(
            server(100.0),
            interfaces={"7": {"in_pps": 90.0, "out_pps": 1.0}},
            packets_per_s_variance=4.0,
            bytes_per_s_variance=9.0,
        ),
        "s2": dict(
            server(5.0, local=0, mirrored=2),
            last_sample=None,
            packets_per_s_variance=1.0,
            bytes_per_s_variance=2.0,
        ),
    }
    snapshot = parse_snapshot(document(servers=rows, traffic_pps={"s1": {"s2": 3.0}}))
    back = snapshot.estimates()
    for name, row in rows.items():
        assert back[name] == ServerEstimate.model_validate(row)
    assert snapshot.traffic_pps.as_dict() == {"s1": {"s2": 3.0}}
    assert set(snapshot.servers) == {"s1", "s2"} and "s3" not in snapshot.servers


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("servers", "packets_per_s", 0), -1.0, "servers.packets_per_s[0] (server 's1')"),
        (("servers", "packets_per_s", 0), "12", "servers.packets_per_s[0] (server 's1')"),
        (("servers", "packets_per_s", 0), float("nan"), "servers.packets_per_s[0] (server 's1')"),
        (
            ("servers", "packets_per_s_ci95_low", 0),
            500.0,
            "servers.packets_per_s_ci95_low[0]: server 's1': low bound above high bound",
        ),
        (("servers", "packets_per_s"), [], "servers.packets_per_s: 0 entries for 1 servers"),
        (("servers", "coverage", 0), 1.5, "servers.coverage[0] (server 's1')"),
        (
            ("servers", "samples", 0),
            9,
            "servers.samples[0]: server 's1': local_samples + "
            "mirrored_samples (3 + 1) != samples (9)",
        ),
        (("servers", "name"), ["s1", "s2"], "servers.packets_per_s: 1 entries for 2 servers"),
        (("traffic_pps", "dst", 0), 5, "traffic_pps.dst[0]: no such row in names (2 rows)"),
        (("traffic_pps", "pps"), [], "traffic_pps.pps: 0 entries, src has 1"),
        (("traffic_pps", "names", 1), "s1", "traffic_pps.names[1]: 's1' appears twice"),
        (("time",), "2026-11-23T10:00:00+01:00", "time"),
        (("format_version",), 1, "format_version"),
        (("window_s",), 0, "window_s"),
        (("surprise",), 1, "surprise"),
        (("dropped", "truncated"), -1, "dropped.truncated"),
    ],
)
def test_bad_fields_are_named(path, value, message):
    doc = document(traffic_pps={"s1": {"s2": 3.0}})
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(CollectorError) as caught:
        parse_snapshot(doc, where="http://c1/snapshot")
    assert str(caught.value).startswith(f"http://c1/snapshot: {message}")
    with pytest.raises(CollectorError) as fast:  # the controller's path: straight from bytes
        parse_snapshot_json(json.dumps(doc).encode(), where="http://c1/snapshot")
    assert str(fast.value) == str(caught.value)


def test_duplicate_server_names_are_named():
    doc = document(servers={"s1": server(1.0), "s2": server(2.0)})
    doc["servers"]["name"] = ["s1", "s1"]
    with pytest.raises(CollectorError, match=r"^c1: servers\.name\[1\]: 's1' appears twice"):
        parse_snapshot(doc, where="c1")


def test_not_json_is_one_error():
    with pytest.raises(CollectorError, match="snapshot: not valid UTF-8 JSON"):
        parse_snapshot(b"\xff{")


def test_merge_unites_servers_and_adds_matrices_and_drops():
    a = parse_snapshot(
        document(
            "c1",
            {"s1": server(100.0)},
            traffic_pps={"s1": {"s1": 60.0, "s2": 40.0}},
            dropped={"truncated": 2, "unknown_agent": 1},
        )
    )
    later = format_time(NOW + timedelta(seconds=5))
    b = parse_snapshot(
        document(
            "c2",
            {"s2": server(50.0)},
            time=later,
            window_s=10.0,
            plan={"version": 8, "plan_id": "cd34"},
            traffic_pps={"s2": {"s1": 50.0}, "s1": {"s2": 1.0}},
            dropped={"truncated": 3},
        )
    )
    merged = merge_snapshots([a, b])
    assert set(merged.servers) == {"s1", "s2"}
    assert merged.collector == "c1+c2"
    assert merged.traffic_pps.as_dict() == {"s1": {"s1": 60.0, "s2": 41.0}, "s2": {"s1": 50.0}}
    assert merged.dropped == {"truncated": 5, "unknown_agent": 1}
    assert merged.time == NOW and merged.window_s == 10.0
    assert merged.plan.version == 8
    assert isinstance(merged, Snapshot) and parse_snapshot(merged.to_json()) == merged


def test_merge_without_inventory_keeps_no_matrix():
    merged = merge_snapshots(
        [parse_snapshot(document("c1")), parse_snapshot(document("c2", {"s9": server(1.0)}))]
    )
    assert merged.traffic_pps is None


def test_merge_rejects_an_agent_heard_twice():
    with pytest.raises(CollectorError, match="agent 10.0.0.1 is heard by both 'c1' and 'c2'"):
        merge_snapshots(
            [
                parse_snapshot(document("c1", agents=["10.0.0.1"])),
                parse_snapshot(
                    document("c2", {"s2": server(1.0)}, agents=["10.0.0.2", "10.0.0.1"])
                ),
            ]
        )
    with pytest.raises(CollectorError, match="no snapshots"):
        merge_snapshots([])


def test_partial_estimates_of_one_server_add_up():
    """s1's local samples reach c1, the copies mirrored to s2 reach c2: rates and variances add."""
    local = dict(
        server(100.0, local=5, mirrored=0), packets_per_s_variance=400.0, bytes_per_s_variance=4e8
    )
    mirrored = dict(
        server(50.0, local=0, mirrored=2), packets_per_s_variance=100.0, bytes_per_s_variance=1e8
    )
    merged = merge_snapshots(
        [
            parse_snapshot(document("c1", {"s1": local}, agents=["10.0.0.1"])),
            parse_snapshot(document("c2", {"s1": mirrored}, agents=["10.0.0.2"])),
        ]
    )
    s1 = merged.servers["s1"]
    assert s1.packets_per_s == 150.0 and s1.packets_per_s_variance == 500.0
    assert (s1.samples, s1.local_samples, s1.mirrored_samples) == (7, 5, 2)
    low, high = s1.packets_per_s_ci95
    assert low < 150.0 < high and 1.5 < (high - low) / (2 * 500.0**0.5) < 2.5
    assert merged.agents == ["10.0.0.1", "10.0.0.2"]


def test_partial_estimates_without_variances_cannot_be_added():
    with pytest.raises(CollectorError, match="'s1' is in the snapshots of 'c1', 'c2' without"):
        merge_snapshots([parse_snapshot(document("c1")), parse_snapshot(document("c2"))])


def test_interval_is_clipped_at_zero():
    assert interval(3.0, 5.0) == [0.0, 8.0]
    with pytest.raises(ValueError):
        interval(float("nan"), 1.0)


def test_the_documented_example_is_a_valid_snapshot():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "collector.md").read_text()
    example = text.split("An example (one server, no inventory):", 1)[1]
    example = example.split("```json", 1)[1].split("```", 1)[0]
    snapshot = parse_snapshot(example, where="docs/collector.md")
    assert snapshot.servers["s1"].packets_per_s_ci95 == [90.0, 110.0]
