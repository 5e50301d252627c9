"""The snapshot's wire form written without pydantic: what ``collector replay --json`` prints.

``snapshot.Snapshot`` is the one model of the format (docs/collector.md, "Snapshot"); readers
validate with it, and so does the daemon before it serves a snapshot. A replay's snapshot is
printed once and read by nobody in the process, so it is written from the estimator's columns
(``Estimator.snapshot_data``) with orjson, byte for byte what ``Snapshot.to_json`` writes
(tests/collector/test_snapshot_wire.py): the replay command then never imports pydantic's
models, a tenth of its CPU time (docs/collector.md, "Speed").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from cosample.times import format_time_ms

SNAPSHOT_FORMAT, SNAPSHOT_VERSION = "cosample.snapshot", 2
#: The snapshot's columns per server, in the format's order: ``snapshottables.ServerTable``'s
#: fields (tests/collector/test_snapshot_wire.py compares them).
SERVER_COLUMNS = (
    "name",
    "packets_per_s",
    "packets_per_s_ci95_low",
    "packets_per_s_ci95_high",
    "bytes_per_s",
    "bytes_per_s_ci95_low",
    "bytes_per_s_ci95_high",
    "samples",
    "samples_per_s",
    "local_samples",
    "mirrored_samples",
    "coverage",
    "last_sample_age_s",
    "packets_per_s_variance",
    "bytes_per_s_variance",
)
#: The columns of sample counts among them (integers in the binary form).
COUNT_COLUMNS = ("samples", "local_samples", "mirrored_samples")


def traffic_columns(matrix: Mapping[str, Mapping[str, float]]) -> dict[str, list]:
    """``{src: {dst: pps}}`` as the snapshot's ``traffic_pps`` table (names sorted once)."""
    names = sorted(set(matrix) | {dst for row in matrix.values() for dst in row})
    index = {name: k for k, name in enumerate(names)}
    entries = [
        (index[src], index[dst], pps) for src, row in matrix.items() for dst, pps in row.items()
    ]
    return {
        "names": names,
        "src": [e[0] for e in entries],
        "dst": [e[1] for e in entries],
        "pps": [e[2] for e in entries],
    }


def snapshot_json(data: Mapping[str, Any]) -> str:
    """``Snapshot.model_validate(data).to_json()`` for the estimator's ``data`` (fields in the
    model's order, the time to the millisecond, newline-terminated), without the model.

    orjson would write a non-finite number as ``null``; where one is, the model is asked after
    all, and its error names the field."""
    if not _finite(data):
        # the model (pydantic's, and above this module) only to word a rare error
        from cosample.collector.snapshot import Snapshot

        return Snapshot.model_validate(data).to_json()
    wire = {
        "format": SNAPSHOT_FORMAT,
        "format_version": SNAPSHOT_VERSION,
        "collector": data["collector"],
        "time": format_time_ms(data["time"]),
    }
    for key in (
        "window_s",
        "plan",
        "servers",
        "interfaces",
        "traffic_pps",
        "dropped",
        "ignored",
        "agents",
        "unknown_agents",
        "sequence",
        "discards",
    ):
        wire[key] = data[key]
    started = data.get("started")  # a daemon's export; a replay has none
    wire["started"] = format_time_ms(started) if started is not None else None
    wire["serial"] = data.get("serial")
    wire["guard"] = {
        server: {**entry, "since": format_time_ms(entry["since"])}
        for server, entry in data["guard"].items()
    }
    return orjson.dumps(wire).decode() + "\n"


def _finite(data: Mapping[str, Any]) -> bool:
    """No NaN or infinity in the numbers of ``data``'s tables or its window."""
    tables = [data["servers"], data["interfaces"] or {}, data["traffic_pps"] or {}]
    return math.isfinite(data["window_s"]) and all(
        value.__class__ is not float or math.isfinite(value)
        for table in tables
        for column in table.values()
        if column
        for value in column
    )
