"""Where each method's CPU goes: per task, at rate 0 and at the highest rate, from calibrations.

Both methods record, for every phase, the CPU time of each task that forwards the calibration
traffic (``cpu_ovs``, ``cpu_sender``, ``cpu_receiver``, their sum with the softirq work run in
their context ``cpu_counted``) and of the whole host (``cpu_host_busy``, everyone's). The cpu
method offers a fixed rate well below saturation, the throughput method floods, so the same
columns say, side by side, where a sample's or a copy's work lands, whether a packet costs the
same at 20 kpps and flat out (batching), and what else takes CPUs from the forwarding when every
CPU is busy (``outside`` = host busy minus counted: the calibrating process with its sFlow
collector, other people's work).

    python -m research.costmodel_tasks docs/data/methods/*.json

For each calibration and mechanism, three rows: the medians over the rate-0 phases, over the
highest rate's phases, and the extra per copy, ``(cost at s - cost at 0) / s`` in nanoseconds per
forwarded packet (a copy per packet at s = 1) and the change in CPUs used. ``a`` columns are the
relative extra cost from the same medians: of the cgroup (``a counted``), of the switch's
threads alone (``a ovs``) and, for the throughput method, of the forwarded rate
(``a T = (T0 / T(s) - 1) / s``, what its fit estimates).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from cosample.costmodel.compare import read_calibration
from cosample.errors import exit_status
from cosample.experiments.errors import ExperimentError

#: The tasks every row accounts for, as ``cpu_<task>`` columns (CPUs used over the phase).
TASKS = ("counted", "ovs", "sender", "receiver")


def medians(rows: pd.DataFrame) -> dict[str, float]:
    """Medians over phases: packet rates, CPUs per task and outside the cgroup, ns per packet."""
    forwarded = rows["forwarded_pps"].where(rows["forwarded_pps"] > 0)
    out = {
        "forwarded_pps": float(rows["forwarded_pps"].median()),
        "sent_pps": float(rows["sent_pps"].median()),
        "outside": float((rows["cpu_host_busy"] - rows["cpu_counted"]).median()),
        "wait_ovs": float(rows["wait_ovs"].median()),
    }
    for task in TASKS:
        out[f"cpu_{task}"] = float(rows[f"cpu_{task}"].median())
        out[f"ns_{task}"] = float((rows[f"cpu_{task}"] / forwarded * 1e9).median())
    return out


def breakdown(data: pd.DataFrame, mechanism: str, where: str = "data") -> tuple[float, dict, dict]:
    """``(s, medians at rate 0, medians at the highest rate s)`` of one mechanism's rows."""
    missing = [f"cpu_{task}" for task in TASKS + ("host_busy",) if f"cpu_{task}" not in data]
    if missing or "wait_ovs" not in data:
        raise ExperimentError(
            f"{where}: no CPU columns ({', '.join(missing) or 'wait_ovs'}); "
            "calibrations since 2026-11-24 record them"
        )
    rows = data[data["mechanism"] == mechanism]
    s = float(rows["rate"].max())
    if rows[rows["rate"] == 0].empty or not s > 0:
        raise ExperimentError(f"{where}: {mechanism} needs phases at rate 0 and at a rate > 0")
    return s, medians(rows[rows["rate"] == 0]), medians(rows[rows["rate"] == s])


def table(paths: list[Path]) -> str:
    """The Markdown table of every calibration and mechanism in ``paths``."""
    head = (
        "| data | mechanism | phases | forwarded (kpps) | sent (kpps) | CPUs counted | ovs "
        "| sender | receiver | outside | ovs wait | ns/packet counted | ovs | sender "
        "| receiver "
        "| a counted | a ovs | a T |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for path in paths:
        document, data = read_calibration(path)
        method = document.metadata.method
        for mechanism in document.mechanisms:
            s, zero, high = breakdown(data, mechanism, str(path))
            a = {
                task: (high[f"ns_{task}"] / zero[f"ns_{task}"] - 1) / s
                for task in ("counted", "ovs")
            }
            a_t = (
                (zero["forwarded_pps"] / high["forwarded_pps"] - 1) / s
                if method == "throughput"
                else math.nan
            )
            name = f"{path.name} ({method})"
            for label, m in (("rate 0", zero), (f"rate {s:g}", high)):
                lines.append(f"| {name} | {mechanism} | {label} | {_row(m)} | | | |")
            extra = {key: (high[key] - zero[key]) / s for key in zero}
            lines.append(
                f"| {name} | {mechanism} | per copy (Δ/s) | {_row(extra, signed=True)} "
                f"| {a['counted']:.3f} | {a['ovs']:.3f} "
                f"| {'-' if math.isnan(a_t) else f'{a_t:.3f}'} |"
            )
    return "\n".join(lines)


def _row(m: dict[str, float], signed: bool = False) -> str:
    sign = "+" if signed else ""
    cpus = " | ".join(f"{m[f'cpu_{task}']:{sign}.3f}" for task in TASKS)
    ns = " | ".join(f"{m[f'ns_{task}']:{sign},.0f}" for task in TASKS)
    return (
        f"{m['forwarded_pps'] / 1e3:{sign}.1f} | {m['sent_pps'] / 1e3:{sign}.1f} | {cpus} "
        f"| {m['outside']:{sign}.3f} | {m['wait_ovs']:{sign}.3f} | {ns}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "calibrations",
        nargs="+",
        type=Path,
        help="calibration JSONs of either method (the CSV each names beside it)",
    )
    args = parser.parse_args(argv)
    return exit_status("costmodel_tasks", lambda: print(table(args.calibrations)))


if __name__ == "__main__":
    sys.exit(main())
