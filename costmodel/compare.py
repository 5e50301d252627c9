"""Put calibrations of the two methods side by side, and say in CPU terms why they differ.

``a`` is a cost *relative* to forwarding a packet, and the cost of forwarding one depends on the
load: at a fixed, moderate offered rate every packet pays for wake-ups that a saturated switch
amortises over large batches. So both methods can agree on the absolute cost of a sampled or
mirrored packet, ``a * c0`` nanoseconds, and still report different ``a``. Both methods record
the CPU time per forwarded packet (``cost_ns_per_packet`` or ``cpu_counted / forwarded_pps``),
so this module computes ``c0`` of each method's rate-0 phases and the absolute extra cost.

    python -m cosample.costmodel.compare CPU-METHOD.json THROUGHPUT-METHOD.json ...
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from cosample.costmodel.adaptive import Target
from cosample.costmodel.calibration_file import CalibrationDocument, Metadata, read_calibration_file
from cosample.costmodel.data import read_measurements
from cosample.costmodel.errors import DataError


def rate0_cost_ns(rows: pd.DataFrame) -> float:
    """Median CPU nanoseconds per forwarded packet over the rate-0 phases (NaN without CPU data)."""
    zero = rows[rows["rate"] == 0]
    if "cpu_counted" not in zero.columns or zero.empty:
        return math.nan
    cost = zero["cpu_counted"] / zero["forwarded_pps"].where(zero["forwarded_pps"] > 0) * 1e9
    return float(cost.median())


def mean_host_busy(rows: pd.DataFrame) -> float:
    """CPUs the whole host was busy, everyone's work, averaged over the phases (NaN without)."""
    if "cpu_host_busy" not in rows.columns or rows.empty:
        return math.nan
    return float(rows["cpu_host_busy"].mean())


def needed_half_width(metadata: Metadata, a: float) -> float:
    """The half-width an adaptive calibration's target allowed for ``a`` (NaN: no target)."""
    target = metadata.target_ci
    if not target:
        return math.nan
    return Target(relative=target["relative"], absolute=target["absolute"]).allowed(a)


def read_calibration(path: str | Path) -> tuple[CalibrationDocument, pd.DataFrame]:
    """A calibration JSON and the measurements CSV its ``metadata.data`` names (beside it)."""
    document = read_calibration_file(path, error=DataError)
    if not document.metadata.data:
        raise DataError(f"{path}: metadata.data does not name the measurements CSV")
    return document, read_measurements(Path(path).parent / document.metadata.data)


def summary_rows(paths: list[str]) -> pd.DataFrame:
    """One row per (calibration, mechanism): estimate, interval, target, time, c0, extra cost,
    runs and how busy the host was."""
    rows = []
    for path in paths:
        document, data = read_calibration(path)
        metadata = document.metadata
        for mechanism, entry in document.mechanisms.items():
            # a fit that came out non-finite is written as null (``fit.finite_or_none``): NaN
            low, high = (_or_nan(end) for end in entry.coefficient_ci)
            rows_of_mechanism = data[data["mechanism"] == mechanism]
            c0 = rate0_cost_ns(rows_of_mechanism)
            a = _or_nan(entry.coefficient)
            covariate = entry.covariate or {}
            without = covariate.get("ci_without") or [None, None]
            rows.append(
                {
                    "method": metadata.method,
                    "mechanism": mechanism,
                    "covariate": (
                        covariate.get("name")
                        if covariate.get("used")
                        else f"none ({covariate['name']} refused)"
                        if covariate.get("name")
                        else "none"
                    ),
                    "half_width_without": (
                        (without[1] - without[0]) / 2 if None not in without else math.nan
                    ),
                    "started": metadata.started,
                    "loadavg": metadata.loadavg_start,
                    "a": a,
                    "ci_low": low,
                    "ci_high": high,
                    "half_width": (high - low) / 2,
                    "needed": needed_half_width(metadata, a),
                    "target_met": (metadata.target_met or {}).get(mechanism),
                    "seconds": (metadata.seconds or {}).get(mechanism),
                    "rows": entry.n_points,
                    "runs": entry.n_blocks,
                    "capacity_pps": _or_nan(entry.capacity_pps),
                    "host_busy": mean_host_busy(rows_of_mechanism),
                    "c0_ns": c0,
                    "extra_ns_per_copy": a * c0,
                    "extra_ns_ci": (low * c0, high * c0),
                }
            )
    return pd.DataFrame(rows)


def markdown(frame: pd.DataFrame) -> str:
    lines = [
        "| mechanism | method | started (UTC), load | covariate | a | 95% CI | half-width "
        "(without covariate) | target met | seconds | T0 (pps) | c0 (ns/packet) "
        "| a·c0 (ns per copy) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in frame.sort_values(["mechanism", "method"]).itertuples():
        extra_low, extra_high = row.extra_ns_ci
        lines.append(
            f"| {row.mechanism} | {row.method} | {_when(row.started, row.loadavg)} | {row.covariate} "
            f"| {row.a:.3f} | [{row.ci_low:.3f}, {row.ci_high:.3f}] | {row.half_width:.3f}"
            + (f" ({row.half_width_without:.3f})" if math.isfinite(row.half_width_without) else "")
            + f" | {'yes' if row.target_met else 'no' if row.target_met is not None else '-'} "
            f"| {row.seconds if row.seconds is not None else '-'} | {row.capacity_pps:,.0f} "
            f"| {row.c0_ns:,.0f} "
            f"| {row.extra_ns_per_copy:,.0f} [{extra_low:,.0f}, {extra_high:,.0f}] |"
        )
    return "\n".join(lines)


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _when(started: str | None, loadavg: list | None) -> str:
    if not started:
        return "-"
    time = started[11:16] if len(started) >= 16 else started
    return f"{time}, {loadavg[0]:.1f}" if loadavg else time


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m cosample.costmodel.compare CALIBRATION.json ...", file=sys.stderr)
        return 2
    try:
        print(markdown(summary_rows(paths)))
    except DataError as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
