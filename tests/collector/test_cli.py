"""``cosample collector replay|merge`` through the real command line, and its bad input."""

from __future__ import annotations

import json

import pytest

from cosample.cli import main
from cosample.collector.pcap import write_pcap
from cosample.collector.snapshot import Snapshot, parse_snapshot
from cosample.lab.sflowstream import simulate

TRUTH = {"s1": 30_000, "s2": 1_000, "s3": 2_000, "s4": 16_000}


@pytest.fixture
def capture(tmp_path, four_plan):
    stream = simulate(four_plan, TRUTH, duration_s=5.0, seed=9, overlay_samples=10)
    return write_pcap(tmp_path / "sflow.pcap", stream.datagrams), stream


def test_replay_json_has_the_documented_fields(write_plan, capture, capsys):
    path, stream = capture
    assert (
        main(
            [
                "collector",
                "replay",
                "--plan",
                str(write_plan()),
                str(path),
                "--json",
                "--name",
                "r1",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["collector"] == "r1" and out["ignored"] == {"overlay_ingress": 10}
    table = out["servers"]  # columnar (format_version 2): one list per field, rows by name
    assert out["format_version"] == 2
    for server, packets in TRUTH.items():
        k = table["name"].index(server)
        low, high = table["packets_per_s_ci95_low"][k], table["packets_per_s_ci95_high"][k]
        assert low * out["window_s"] * 0.999 <= packets <= high * out["window_s"] * 1.001
        assert table["samples"][k] == table["local_samples"][k] + table["mirrored_samples"][k]
    assert out["dropped"] == {}


def test_replay_table(write_plan, capture, capsys):
    assert main(["collector", "replay", "--plan", str(write_plan()), str(capture[0])]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["server", "packets/s"]
    assert "ignored: overlay_ingress 10" in out


def test_linux_cooked_capture_with_junk_frames(tmp_path, write_plan, four_plan, capsys):
    """SLL framing, a non-UDP frame and a garbage UDP payload: read, counted, estimates intact."""
    import struct

    stream = simulate(four_plan, {"s4": 1600}, duration_s=2.0, seed=1)
    ethernet = write_pcap(
        tmp_path / "e.pcap", stream.datagrams + [(stream.datagrams[-1][0], b"junk!!!!")]
    )
    data = ethernet.read_bytes()
    out = bytearray(data[:20] + struct.pack("<I", 113))
    offset = 24
    while offset < len(data):
        seconds, micros, included, original = struct.unpack_from("<IIII", data, offset)
        frame = data[offset + 16 : offset + 16 + included]
        cooked = struct.pack("!HHH8sH", 0, 1, 6, b"\2\0\0\0\0\1\0\0", 0x0800) + frame[14:]
        out += struct.pack("<IIII", seconds, micros, len(cooked), len(cooked)) + cooked
        offset += 16 + included
    tcp = (
        struct.pack("!HHH8sH", 0, 1, 6, bytes(8), 0x0800)
        + bytes([0x45, 0, 0, 40])
        + bytes(5)
        + bytes([6])
        + bytes(30)
    )
    out += struct.pack("<IIII", 1, 0, len(tcp), len(tcp)) + tcp
    (tmp_path / "c.pcap").write_bytes(bytes(out))
    assert (
        main(
            ["collector", "replay", "--plan", str(write_plan()), str(tmp_path / "c.pcap"), "--json"]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    table = result["servers"]
    pps = table["packets_per_s"][table["name"].index("s4")]
    assert pps * result["window_s"] == pytest.approx(1600, rel=0.3)
    assert result["dropped"] == {"bad_version": 1}


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: tmp / "missing.pcap", "cannot read capture"),
        (lambda tmp: _write(tmp / "x.pcap", b"not a capture at all...."), "not a pcap capture"),
        (
            lambda tmp: _write(tmp / "x.pcap", b"\x0a\x0d\x0d\x0a" + bytes(40)),
            "pcapng is not supported",
        ),
        (
            lambda tmp: _write(
                tmp / "x.pcap", bytes.fromhex("d4c3b2a1") + bytes(16) + b"\x69\0\0\0"
            ),
            "link type 105 is not supported",
        ),
    ],
)
def test_bad_captures_are_one_error(tmp_path, write_plan, capsys, make, message):
    assert main(["collector", "replay", "--plan", str(write_plan()), str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cosample: error: ") and message in err and err.count("\n") == 1


def test_bad_plan_is_one_error(tmp_path, capture, capsys):
    bad = _write(tmp_path / "plan.json", b'{"format": "cosample.plan", "format_version": 1}')
    assert main(["collector", "replay", "--plan", str(bad), str(capture[0])]) == 2
    assert "version" in capsys.readouterr().err


def test_bad_inventory_names_the_field(tmp_path, write_plan, capture, capsys):
    inventory = _write(
        tmp_path / "inv.json",
        json.dumps(
            {"format": "cosample.addresses", "servers": {"s1": {"vm_addresses": ["10.0.0.300"]}}}
        ).encode(),
    )
    assert (
        main(
            [
                "collector",
                "replay",
                "--plan",
                str(write_plan()),
                str(capture[0]),
                "--inventory",
                str(inventory),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"{inventory}: servers.s1.vm_addresses[0]" in err and "10.0.0.300" in err


def test_merge_command(tmp_path, write_plan, capture, capsys):
    paths = []
    for name in ("a", "b"):
        main(
            [
                "collector",
                "replay",
                "--plan",
                str(write_plan()),
                str(capture[0]),
                "--json",
                "--name",
                name,
            ]
        )
        whole = parse_snapshot(capsys.readouterr().out)
        keep = {"a": ["s1", "s2"], "b": ["s3", "s4"]}[name]
        part = Snapshot.from_servers(
            {k: v for k, v in whole.estimates().items() if k in keep},
            collector=whole.collector,
            time=whole.time,
            window_s=whole.window_s,
            plan=whole.plan,
            agents=[f"172.29.0.{int(k[1])}" for k in keep],
        )
        paths.append(_write(tmp_path / f"{name}.json", part.to_json().encode()))
    assert main(["collector", "merge", *map(str, paths)]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert merged["servers"]["name"] == ["s1", "s2", "s3", "s4"] and merged["collector"] == "a+b"
    assert main(["collector", "merge", str(paths[0]), str(paths[0])]) == 2
    assert "heard by both" in capsys.readouterr().err


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_documented_address_inventory_example_loads(write_plan, capture, capsys):
    from pathlib import Path

    example = Path(__file__).parents[2] / "docs" / "examples" / "addresses.json"
    from cosample.collector.inventory import read_inventory

    inventory = read_inventory(example)
    assert inventory.servers["s1"].agent_ip == "192.0.2.1"
    assert inventory.server_of_address()["10.0.2.1"] == "s2"
