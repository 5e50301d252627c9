"""The cpu method's coefficients with the switch's own threads as the cost: where is the bottleneck?

The cpu method states the law for a budget of CPUs that all of the forwarding work shares:
``c = CPU time of the cgroup / packet`` (sender, receiver, ovs-vswitchd and the softirq work in
their context) and ``T0 = budget / c0``. Flat out, the throughput method sees instead whichever
resource saturates first. On the userspace datapath without PMD threads ovs-vswitchd forwards
in one thread, so that thread is the bottleneck, and the law at saturation is the law of its
cost alone: ``c_switch = CPU time of ovs-vswitchd's threads / packet`` (the ``cpu_ovs`` column
every cpu-method row records) with a budget of one CPU. sFlow's work lands in that thread; a tc
mirror's lands in the sender's context and not in it.

This refits committed cpu-method calibrations on ``c_switch`` (same estimator, no covariate:
the receiver is not part of that cost) beside the cgroup fit the calibration reported, and
prints one Markdown row per calibration and mechanism. Throughput-method calibrations named by
``--throughput`` (repeatable) are the references, matched by mechanism: each row says how many
of its mechanism's throughput coefficients lie inside the cgroup interval and inside the switch
interval:

    python -m research.costmodel_bottleneck docs/data/methods/cpu-*.json \\
        --throughput docs/data/methods/throughput-*.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from cosample.costmodel.calibration_file import MechanismEntry, read_calibration_file
from cosample.costmodel.compare import needed_half_width, read_calibration
from cosample.costmodel.fit import CostModelFit
from cosample.errors import exit_status
from cosample.experiments.errors import ExperimentError

#: The switch's forwarding thread: one CPU is its whole budget.
SWITCH_BUDGET_CPUS = 1.0


def switch_cost(data: pd.DataFrame, where: str = "data") -> pd.DataFrame:
    """``data`` with the cost per packet of ovs-vswitchd's threads instead of the cgroup's and a
    budget of one CPU (``throughput_pps`` follows: ``1 CPU / cost``)."""
    if "cpu_ovs" not in data.columns:
        raise ExperimentError(f"{where}: no cpu_ovs column (a cpu-method calibration records it)")
    bad = data.index[~(data["cpu_ovs"] > 0)]
    if len(bad):
        raise ExperimentError(
            f"{where}: row {bad[0] + 2}: cpu_ovs must be > 0, got {data.loc[bad[0], 'cpu_ovs']!r}"
        )
    switch = data.copy()
    switch["cost_ns_per_packet"] = data["cpu_ovs"] * 1e9 / data["forwarded_pps"]
    switch["budget_cpus"] = SWITCH_BUDGET_CPUS
    switch["throughput_pps"] = SWITCH_BUDGET_CPUS * 1e9 / switch["cost_ns_per_packet"]
    return switch


def rows(path: Path) -> list[dict]:
    """One row per mechanism of the calibration at ``path``: reported (cgroup) and switch fits."""
    document, data = read_calibration(path)
    metadata = document.metadata
    if metadata.method != "cpu":
        raise ExperimentError(f"{path}: not a cpu-method calibration")
    fit = CostModelFit(covariates={m: None for m in data["mechanism"].unique()}).fit(
        switch_cost(data, str(path.parent / metadata.data))
    )
    out = []
    for mechanism, reported in document.mechanisms.items():
        switch = fit.results_[mechanism]
        low, high = switch.coefficient_ci
        out.append(
            {
                "data": path.name,
                "mechanism": mechanism,
                "a": reported.coefficient,
                "ci": tuple(reported.coefficient_ci),
                "a_switch": switch.coefficient,
                "ci_switch": (low, high),
                "half_width_switch": (high - low) / 2,
                "needed_switch": needed_half_width(metadata, switch.coefficient),
                "capacity_switch": switch.capacity_pps,
            }
        )
    return out


def references(paths: list[Path]) -> dict[str, list[tuple[str, MechanismEntry]]]:
    """Throughput-method fits by mechanism: ``{mechanism: [(file name, fit), ...]}``, in the
    order of ``paths``."""
    by_mechanism: dict[str, list[tuple[str, MechanismEntry]]] = {}
    for path in paths:
        document = read_calibration_file(path, error=ExperimentError)
        if document.metadata.method != "throughput":
            raise ExperimentError(
                f"{path}: not a throughput-method calibration (method {document.metadata.method!r})"
            )
        for mechanism, entry in document.mechanisms.items():
            by_mechanism.setdefault(mechanism, []).append((path.name, entry))
    return by_mechanism


def inside(interval: tuple[float, float], coefficients: list[float]) -> str:
    """How many of ``coefficients`` lie in ``interval``: ``"k of n"`` (``"-"`` for none given)."""
    if not coefficients:
        return "-"
    low, high = interval
    return f"{sum(low <= a <= high for a in coefficients)} of {len(coefficients)}"


def _interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibrations", nargs="+", type=Path, help="cpu-method calibration JSONs")
    parser.add_argument(
        "--throughput",
        type=Path,
        action="append",
        default=[],
        help="a throughput-method calibration JSON to compare with (repeatable; "
        "matched by mechanism)",
    )
    args = parser.parse_args(argv)

    def report() -> int:
        reference = references(args.throughput)
        print(
            "| data | mechanism | a (cgroup, reported) | 95% CI | a (switch threads) | 95% CI | "
            "half-width | needed | met | T0 switch (pps) | throughput a's inside (cgroup CI) "
            "| inside (switch CI) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for path in args.calibrations:
            for row in rows(path):
                theirs = [fit.coefficient for _, fit in reference.get(row["mechanism"], [])]
                met = "yes" if row["half_width_switch"] <= row["needed_switch"] + 1e-12 else "no"
                print(
                    f"| {row['data']} | {row['mechanism']} | {row['a']:.3f} "
                    f"| {_interval(*row['ci'])} "
                    f"| {row['a_switch']:.3f} | {_interval(*row['ci_switch'])} "
                    f"| {row['half_width_switch']:.3f} | {row['needed_switch']:.3f} | {met} "
                    f"| {row['capacity_switch']:,.0f} | {inside(row['ci'], theirs)} "
                    f"| {inside(row['ci_switch'], theirs)} |"
                )
        for mechanism, refs in reference.items():
            for name, fit in refs:
                print(
                    f"\nthroughput method, {mechanism} ({name}): "
                    f"a = {fit.coefficient:.3f} {_interval(*fit.coefficient_ci)}, "
                    f"T0 = {fit.capacity_pps:,.0f} pps"
                )
        return 0

    return exit_status("costmodel_bottleneck", report)


if __name__ == "__main__":
    sys.exit(main())
