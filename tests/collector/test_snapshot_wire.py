"""``collector replay --json`` writes its snapshot without pydantic (snapshotwire): byte for byte
what the model writes, for every kind of snapshot the estimator makes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from collector_plans import FOUR
from pydantic import ValidationError
from sflow_corpus import CORPUS

from cosample.collector.attribution import build
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory
from cosample.collector.pcap import write_pcap
from cosample.collector.replay import run
from cosample.collector.snapshot import Snapshot, parse_snapshot
from cosample.collector.snapshottables import ServerTable
from cosample.collector.snapshotwire import COUNT_COLUMNS, SERVER_COLUMNS, snapshot_json
from cosample.lab.sflowstream import simulate, vm_address

CAPTURES = sorted(path.name for path in CORPUS.glob("*.pcap"))


def same_as_the_model(data) -> str:
    written = snapshot_json(data)
    assert written == Snapshot.model_validate(data).to_json()
    return written


@pytest.mark.parametrize("name", CAPTURES)
def test_every_real_capture_is_written_as_the_model_writes_it(name):
    estimator, last = run(None, CORPUS / name)
    written = same_as_the_model(estimator.snapshot_data(last))
    assert parse_snapshot(written).collector == "replay"


@pytest.mark.parametrize("window_s", [None, 5.0])
def test_plans_mirrors_traffic_and_ports_are_written_as_the_model_writes_them(four_plan, window_s):
    names = sorted(FOUR)
    inventory = Inventory(
        servers={
            name: {"vm_addresses": [vm_address(k, 1), vm_address(k, 2)]}
            for k, name in enumerate(names)
        }
    )
    stream = simulate(
        four_plan,
        {"s1": 60_000, "s2": 2_000, "s4": 30_000},
        duration_s=10.0,
        seed=4,
        counters=True,
        destinations={"s1": "s4", "s4": "s1", "s2": "s2"},
    )
    estimator = Estimator(build(four_plan, inventory), window_s=window_s)
    for when, data in stream.datagrams:
        estimator.ingest(data, when)
    estimator.ingest(b"\0\0\0\4\0\0\0\1", stream.datagrams[-1][0])  # a named drop
    data = estimator.snapshot_data()
    written = json.loads(same_as_the_model(data))
    assert written["plan"]["version"] == four_plan.version and written["traffic_pps"]["pps"]
    assert written["dropped"] == {"bad_version": 1}
    if window_s is None:  # the stream's counter samples are all older than a 5 s window
        assert written["interfaces"]["port"]


def test_the_command_prints_the_models_snapshot(tmp_path):
    """The command itself (its own process, where pydantic is never imported)."""
    capture = tmp_path / "corpus.pcap"
    from cosample.collector.pcap import udp_payloads

    write_pcap(capture, [item for name in CAPTURES[:4] for item in udp_payloads(CORPUS / name)])
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from cosample.cli import main; "
            "status = main(sys.argv[1:]); "
            "assert not any(m.startswith('pydantic') for m in sys.modules); "
            "sys.exit(status)",
            "collector",
            "replay",
            str(capture),
            "--json",
            "--name",
            "replay",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    estimator, last = run(None, capture)
    assert done.stdout == Snapshot.model_validate(estimator.snapshot_data(last)).to_json()


def test_a_number_orjson_cannot_write_is_refused_by_the_model(four_plan):
    estimator = Estimator(build(four_plan), window_s=None)
    data = estimator.snapshot_data(10.0)
    data["servers"]["packets_per_s"][1] = float("nan")
    with pytest.raises(ValidationError, match="packets_per_s.1"):
        snapshot_json(data)


def test_the_wire_columns_are_the_tables_fields():
    # the estimator writes the columns by these names (combine.py), the binary form types them
    # (snapshotbin.py): the model's fields, in its order
    assert SERVER_COLUMNS == tuple(ServerTable.model_fields)
    integer = {k for k, f in ServerTable.model_fields.items() if "int" in str(f.annotation)}
    assert set(COUNT_COLUMNS) == integer
