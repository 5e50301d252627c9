"""Tidy measurement tables: one row per measurement, read, validated and written through pandas.

Required columns: ``mechanism`` (e.g. ``sflow``, ``mirror``), ``rate`` (the sampled or mirrored
fraction, 0..1) and ``throughput_pps`` (packets delivered to the receiver per second, >= 0: a
stall that forwarded nothing is a measurement too). Any other
column (trial, protocol, duration, bits/s, CPU, copies) is kept as it is. Files are written
atomically: a temporary file in the same directory, then ``os.replace``.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cosample.costmodel.errors import DataError
from cosample.files import write_output, write_text_atomic

REQUIRED_COLUMNS = ("mechanism", "rate", "throughput_pps")
#: Columns the harness writes, in this order (a CSV may hold a subset beyond the required ones).
HARNESS_COLUMNS = (
    "mechanism",
    "rate",
    "throughput_pps",
    "method",
    "rate_requested",
    "protocol",
    "packet_bytes",
    "trial",
    "order",
    "block",
    "phase",
    "duration_s",
    "sent_pps",
    "forwarded_pps",
    "copies_pps",
    "offered_pps",
    "cost_ns_per_packet",
    "budget_cpus",
    "cpu_counted",
    "cpu_ovs",
    "cpu_ksoftirqd",
    "cpu_host_busy",
    "cpu_host_softirq",
    "cpu_sender",
    "cpu_receiver",
    "wait_ovs",
    "wait_sender",
    "wait_receiver",
    "slices_ovs",
    "slices_sender",
    "slices_receiver",
    "iperf_pps",
    "bits_per_second",
    "cpu_sender_pct",
    "cpu_receiver_pct",
    "lost_percent",
)


def read_measurements(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read and validate a measurements CSV; errors name the file, column and line."""
    path = Path(path)
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except pd.errors.EmptyDataError:
        raise DataError(
            f"{path}: empty file; expected a CSV with columns {', '.join(REQUIRED_COLUMNS)}"
        ) from None
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read as CSV: {exc}") from None
    return validate_measurements(frame, source=str(path), first_line=2)


def validate_measurements(
    frame: pd.DataFrame, source: str = "measurements", first_line: int | None = None
) -> pd.DataFrame:
    """A clean copy of ``frame`` or one ``DataError`` naming what is wrong and where.

    ``first_line`` is the file line of the first data row (2 for a CSV with a header), so
    messages can point at a line; without it they name the row position.
    """
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"{source}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [column for column in REQUIRED_COLUMNS if column not in frame.columns]
    if missing:
        raise DataError(
            f"{source}: missing column {missing[0]!r} "
            f"(required: {', '.join(REQUIRED_COLUMNS)}; found: "
            f"{', '.join(map(str, frame.columns)) or 'none'})"
        )
    if frame.empty:
        raise DataError(f"{source}: no measurements (the table has a header but no rows)")
    frame = frame.reset_index(drop=True).copy()

    def where(position: int) -> str:
        return f"line {position + first_line}" if first_line is not None else f"row {position}"

    mechanisms = frame["mechanism"]
    bad = mechanisms.isna() | (mechanisms.astype(str).str.strip() == "")
    if bad.any():
        raise DataError(f"{source}: {where(int(np.argmax(bad)))}: mechanism is empty")
    frame["mechanism"] = mechanisms.astype(str).str.strip()

    for column in ("rate", "throughput_pps"):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() | ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
        if bad.any():
            position = int(np.argmax(bad))
            raise DataError(
                f"{source}: {where(position)}: {column} must be a finite number, "
                f"got {frame[column].iloc[position]!r}"
            )
        frame[column] = values.astype(float)
    rate = frame["rate"]
    for bad, need in (((rate < 0), ">= 0"), ((rate > 1), "<= 1")):
        if bad.any():
            position = int(np.argmax(bad))
            raise DataError(
                f"{source}: {where(position)}: rate must be {need} (a fraction of "
                f"packets), got {rate.iloc[position]!r}"
            )
    bad = frame["throughput_pps"] < 0
    if bad.any():
        position = int(np.argmax(bad))
        raise DataError(
            f"{source}: {where(position)}: throughput_pps must be >= 0, got "
            f"{frame['throughput_pps'].iloc[position]:g}"
        )
    return frame


def write_measurements(frame: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Validate and write ``frame`` as CSV, harness columns first, atomically."""
    frame = validate_measurements(frame, source=str(path))
    ordered = [c for c in HARNESS_COLUMNS if c in frame.columns]
    ordered += [c for c in frame.columns if c not in ordered]
    buffer = io.StringIO()
    frame[ordered].to_csv(buffer, index=False, float_format="%.6g")
    return write_text_atomic(path, buffer.getvalue())


def write_json(document: Any, path: str | os.PathLike[str]) -> Path:
    """Write a JSON document (finite numbers only) atomically, with a trailing newline
    (``-``: standard output; ``cosample.files.write_output``)."""
    text = json.dumps(document, indent=2, sort_keys=False, allow_nan=False) + "\n"
    return Path(write_output(path, lambda stream: stream.write(text)))


def finite_or_none(value: float) -> float | None:
    """JSON-safe number: NaN and infinities become None."""
    return float(value) if value is not None and math.isfinite(value) else None
