"""Which run length narrows the cpu method's interval most per second of measuring.

The cluster-robust interval's half-width is about ``t(B-1) * sd_run / sqrt(B)``: ``sd_run`` is
the spread of the per-run estimates, ``B`` the number of runs that fit into the budget. A run of
``L`` seconds in ``P`` phases costs ``L + per_run + P * per_phase`` seconds (iperf3's start,
first packet and stop; switching the mechanism and reading the counters in every phase,
``costmodel_toggle``) and counts ``L - P * guard`` of them; its estimate varies by
``sd_run^2 = between + within / counted``: ``between`` is the effect's own variation from run to
run (it does not shrink with longer runs), ``within`` the phases' noise per counted second.
``within`` is measured from the difference of each run's two halves (which the run's shared
state cancels; phases counted as independent would understate it, since neighbouring phases
correlate), ``between`` as the rest of the per-run variance. ``lag1`` is the correlation of
consecutive runs' estimates: the model treats runs as independent, and a clearly positive
``lag1`` says the "between" part is the effect drifting with the host's state over minutes, which
more, shorter runs do not average away as the prediction assumes.

    python -m research.costmodel_runlength docs/data/cpu-mirror_vxlan*.csv \
        --designs 12/40,4/14,2/8 --phase-overhead 0.012

prints, per data file, the components and overhead measured, and the predicted half-width for
each run design ``L/P`` in ``--designs`` within ``--budget`` seconds (pooling the files given).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd


def run_estimate(frame: pd.DataFrame) -> float:
    """``a`` of one run (or part of it): the ratio of the geometric mean costs on and off, - 1."""
    log_cost = np.log(frame["cost_ns_per_packet"].to_numpy(float))
    on = frame["rate"].to_numpy(float) > 0
    if on.all() or not on.any():
        return math.nan
    return math.exp(log_cost[on].mean() - log_cost[~on].mean()) - 1


def components(frame: pd.DataFrame) -> dict[str, float]:
    """Per-run estimates of one mechanism's paired runs: their spread, and that spread split
    into within-run noise (from the halves' difference) and the effect's between-run part."""
    full, first, second = [], [], []
    for _, run in frame.groupby("block", sort=True):
        run = run.sort_values("phase")
        half = len(run) // 2
        full.append(run_estimate(run))
        first.append(run_estimate(run.iloc[:half]))
        second.append(run_estimate(run.iloc[half:]))
    full, diff = np.array(full), np.array(first) - np.array(second)
    if len(full) < 3 or not np.all(np.isfinite(diff)):
        raise ValueError("needs at least 3 paired runs, each with both rates in each half")
    # Var(half1 - half2) = 2 w_half = 4 w_full (the run's shared effect cancels).
    within = float(np.var(diff, ddof=1) / 4)
    spread = float(np.var(full, ddof=1))
    centred = full - full.mean()  # runs in the order they ran (blocks are numbered in order)
    lag1 = float(centred[:-1] @ centred[1:] / (centred @ centred)) if spread > 0 else math.nan
    return {
        "runs": len(full),
        "a": float(full.mean()),
        "sd_run": math.sqrt(spread),
        "within_sd": math.sqrt(within),
        "between_sd": math.sqrt(max(spread - within, 0.0)),
        "lag1": lag1,
    }


def run_cost(
    length_s: float, phases: int, guard_s: float, per_run_s: float, per_phase_s: float
) -> tuple[float, float]:
    """``(counted, wall)`` seconds of one paired run of ``length_s`` in ``phases`` phases."""
    return length_s - phases * guard_s, length_s + per_run_s + phases * per_phase_s


def predicted_half_width(
    between: float,
    within: float,
    counted_s: float,
    wall_s: float,
    budget_s: float,
    confidence: float = 0.95,
) -> tuple[int, float]:
    """``(runs, half-width)`` for runs of ``wall_s`` seconds, ``counted_s`` of them counted,
    within ``budget_s`` (variances given; ``within`` per counted second)."""
    from scipy.stats import t as student

    runs = int(budget_s // wall_s)
    if runs < 3 or counted_s <= 0:
        return runs, math.inf
    sd = math.sqrt(between + within / counted_s)
    return runs, float(student.ppf(0.5 + confidence / 2, runs - 1) * sd / math.sqrt(runs))


def overhead_of(csv: Path) -> float | None:
    """Seconds per run beyond its nominal duration, from the calibration JSON beside the data."""
    meta_path = csv.with_suffix(".json")
    if not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())["metadata"]
    runs, seconds = meta.get("rounds") or {}, meta.get("seconds") or {}
    if not runs or meta.get("design") != "paired":
        return None
    per_round = max(len([r for r in meta["rates"] if r > 0]), 1)
    total_runs = sum(runs.values()) * per_round
    lengths = meta.get("run_lengths") or {}
    nominal = sum(
        runs[m] * per_round * float(lengths.get(m, [meta["duration_s"]])[0]) for m in runs
    )
    return (sum(seconds.values()) - nominal) / total_runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+", type=Path)
    parser.add_argument(
        "--designs",
        default="12/40,6/20,4/14,3/10,2/8,2/4,1/4",
        help="comma list of run length / phases",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=116.0,
        help="seconds of runs (the 2-minute budget less warm-up)",
    )
    parser.add_argument("--guard", type=float, default=0.05, help="seconds skipped per phase")
    parser.add_argument(
        "--phase-overhead",
        type=float,
        default=0.0,
        help="seconds per phase beyond its length (costmodel_toggle); the rest "
        "of the measured overhead is per run",
    )
    parser.add_argument(
        "--overhead", type=float, help="seconds per run, phases included (default: measured)"
    )
    args = parser.parse_args(argv)
    pooled_between, pooled_within, per_run = [], [], []
    print(
        "data | mechanism | run s / phases | runs | a | sd of runs | within | between | "
        "lag1 | overhead s"
    )
    for path in args.data:
        frame = pd.read_csv(path)
        counted = float(frame.groupby("block")["duration_s"].sum().mean())
        meta = json.loads(path.with_suffix(".json").read_text())["metadata"]
        for mechanism, group in frame.groupby("mechanism"):
            c = components(group)
            nominal, phases, *_ = (meta.get("run_lengths") or {}).get(
                mechanism, [meta["duration_s"], meta.get("phases") or 2]
            )
            pooled_within.append(c["within_sd"] ** 2 * counted)  # per counted second
            pooled_between.append(c["between_sd"] ** 2)
            overhead = args.overhead if args.overhead is not None else overhead_of(path)
            if overhead is not None:
                per_run.append(overhead - int(phases) * args.phase_overhead)
            print(
                f"{path.name} | {mechanism} | {float(nominal):g} / {int(phases)} ({counted:.1f} "
                f"counted) | {c['runs']} | {c['a']:.3f} | {c['sd_run']:.3f} | "
                f"{c['within_sd']:.3f} | {c['between_sd']:.3f} | {c['lag1']:+.2f} | "
                f"{'-' if overhead is None else f'{overhead:.2f}'}"
            )
    between, within = float(np.mean(pooled_between)), float(np.mean(pooled_within))
    run_overhead = max(float(np.mean(per_run or [1.0])), 0.0)
    print(
        f"pooled: between-run sd {math.sqrt(between):.3f}, within-run sd per 10 counted s "
        f"{math.sqrt(within / 10):.3f}, overhead {run_overhead:.2f} s per run + "
        f"{args.phase_overhead:.3f} s per phase"
    )
    print("run s / phases | counted s | wall s | runs in budget | predicted half-width")
    for design in args.designs.split(","):
        length, phases = design.split("/")
        counted_s, wall_s = run_cost(
            float(length), int(phases), args.guard, run_overhead, args.phase_overhead
        )
        runs, half = predicted_half_width(between, within, counted_s, wall_s, args.budget)
        print(f"{design} | {counted_s:.2f} | {wall_s:.2f} | {runs} | {half:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
