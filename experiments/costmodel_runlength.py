"""Which run length narrows the cpu method's interval most per second of measuring.

The cluster-robust interval's half-width is about ``t(B-1) * sd_run / sqrt(B)``: ``sd_run`` is
the spread of the per-run estimates, ``B`` the number of runs that fit into the budget. A run of
``T`` seconds costs ``T + overhead`` (iperf3's start and first packet, stopping it), and its
estimate varies by ``sd_run(T)^2 = between + within * T_ref / T``: ``between`` is the effect's own
variation from run to run (it does not shrink with longer runs), ``within`` the phases' noise in a
run of ``T_ref`` seconds. ``within`` is measured from the difference of each run's two halves
(which the run's shared state cancels; phases counted as independent would understate it, since
neighbouring phases correlate), ``between`` as the rest of the per-run variance.

    python -m cosample.experiments.costmodel_runlength docs/data/cpu-mirror_vxlan*.csv

prints, per data file, the components and overhead measured, and the predicted half-width for
each run length in ``--lengths`` within ``--budget`` seconds (pooling the files given).
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
    return {"runs": len(full), "a": float(full.mean()), "sd_run": math.sqrt(spread),
            "within_sd": math.sqrt(within), "between_sd": math.sqrt(max(spread - within, 0.0))}


def predicted_half_width(between: float, within: float, reference_s: float, length_s: float,
                         overhead_s: float, budget_s: float, confidence: float = 0.95) -> tuple:
    """``(runs, half-width)`` for runs of ``length_s`` within ``budget_s`` (variances given)."""
    from scipy.stats import t as student

    runs = int(budget_s // (length_s + overhead_s))
    if runs < 3:
        return runs, math.inf
    sd = math.sqrt(between + within * reference_s / length_s)
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
    nominal = sum(runs[m] * per_round * float(lengths.get(m, [meta["duration_s"]])[0]) for m in runs)
    return (sum(seconds.values()) - nominal) / total_runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+", type=Path)
    parser.add_argument("--lengths", default="12,9,8,6,5,4,3")
    parser.add_argument("--budget", type=float, default=116.0,
                        help="seconds of runs (the 2-minute budget less warm-up)")
    parser.add_argument("--overhead", type=float, help="seconds per run (default: measured)")
    args = parser.parse_args(argv)
    pooled_between, pooled_within, overheads = [], [], []
    print("data | mechanism | run s | runs | a | sd of runs | within | between | overhead s")
    for path in args.data:
        frame = pd.read_csv(path)
        duration = float(frame.groupby("block")["duration_s"].sum().mean())
        for mechanism, group in frame.groupby("mechanism"):
            c = components(group)
            meta = json.loads(path.with_suffix(".json").read_text())["metadata"]
            nominal = float((meta.get("run_lengths") or {}).get(mechanism, [meta["duration_s"]])[0])
            # put the variances on a 12-s scale before pooling
            pooled_within.append(c["within_sd"] ** 2 * nominal / 12.0)
            pooled_between.append(c["between_sd"] ** 2)
            overhead = overhead_of(path)
            if overhead is not None:
                overheads.append(overhead)
            print(f"{path.name} | {mechanism} | {nominal:g} ({duration:.1f} counted) | {c['runs']} | "
                  f"{c['a']:.3f} | {c['sd_run']:.3f} | {c['within_sd']:.3f} | "
                  f"{c['between_sd']:.3f} | {'-' if overhead is None else f'{overhead:.2f}'}")
    between, within = float(np.mean(pooled_between)), float(np.mean(pooled_within))
    overhead = args.overhead if args.overhead is not None else float(np.mean(overheads or [1.0]))
    print(f"pooled: between-run sd {math.sqrt(between):.3f}, within-run sd per 12 s "
          f"{math.sqrt(within):.3f}, overhead {overhead:.2f} s per run")
    print("run s | runs in budget | predicted half-width")
    for length in (float(x) for x in args.lengths.split(",")):
        runs, half = predicted_half_width(between, within, 12.0, length, overhead, args.budget)
        print(f"{length:g} | {runs} | {half:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
