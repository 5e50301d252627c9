"""Planner scaling benchmark: exact solver vs the reduced and full LP (GLPK, HiGHS), one run.

For n = 10, 20, 50, 100, ... every solver plans the same random data centre (sparse traffic:
each server sends to itself and to a few random peers; capacities spread loads from light to
nearly full, so there are both receivers and senders; calibration intervals of +-20 % on alpha
and beta and +-5 % on capacity), all with the default 10 % margin and ``robust`` on. A fifth
row, ``exact (budgets)``, adds weights (1, 2 or 5), a mirror cap on a third of the servers and
a collector budget of half the traffic; ``exact (sample)`` lets every other server use OVS's
``sample`` action (cost 0.61 alpha, as measured against sFlow, +-20 % interval), so the solver
chooses each such server's mechanism with its rate. A solver stops growing n once its next size is
predicted to take longer than ``--max-seconds``. The table gives times, LP variable counts, the
LP objective (``l + m``: the exact solver's closed-form bound) and the distinct packets of the
plan as applied (sFlow 1-in-N, ``realise``) beside what the solver returned (``planned_pps``:
the LPs' continuous plans); the run prints whether the LP objectives agree (relative 1e-6), how
the LP plans as applied compare with the exact one, and how many times faster the exact solver
is than the full LP with GLPK at n = 200. The exact solver's complexity: O(n log n) (one sort of
the senders' at most 3 hull steps, one of the pairing, the closed-form bounds); the MILP it
uses for up to 16 competing senders is bounded by its size, not by n. Times are the best of a few repeats
for fast solves (like ``timeit``); the 1-minute load average beside each row says how busy the
(shared) machine was.

    python -m cosample.experiments.bench_planner [--max-seconds 60] [--quick] [--exact-only]
        [--csv FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.experiments.errors import ExperimentError
from cosample.planner.choices import DEFAULT_LP_BACKEND, EXACT, FULL, REDUCED
from cosample.planner.datacentre import DataCentre

#: (solver, LP backend) pairs, in the order they run at each n.
SOLVERS = (
    (EXACT, None),
    (EXACT, "budgets"),
    (EXACT, "sample"),
    (REDUCED, "highs"),
    (REDUCED, "glpk"),
    (FULL, "highs"),
    (FULL, "glpk"),
)
#: The sample action's cost per sample against sFlow's in the calibration campaigns (0.50 and
#: 0.74 us against 0.83 and 1.21 us: docs/planner.md, "Beyond sFlow's 1-in-N").
SAMPLE_COST_RATIO = 0.61
SIZES = tuple(int(m * 10**e) for e in range(1, 7) for m in (1, 2, 5)) + (10**7,)
QUICK_SIZES = (10, 20, 50)
AGREEMENT = 1e-6
REFERENCE_N = 200
COLUMNS = (
    "solver_label",
    "solver",
    "lp_backend",
    "servers",
    "traffic_entries",
    "variables",
    "seconds",
    "cpu_seconds",
    "repeats",
    "load_average",
    "lp_objective_pps",
    "distinct_pps",
    "planned_pps",
    "method",
    "gap",
    "relative_difference",
    "agrees",
)


def label(solver: str, lp_backend: str | None) -> str:
    if solver == EXACT:
        return EXACT if lp_backend is None else f"{EXACT} ({lp_backend})"
    return f"{solver} LP ({lp_backend})"


def random_datacentre(
    servers: int,
    seed: int = 0,
    peers: int = 3,
    alpha: float = PAPER_ALPHA,
    beta: float = PAPER_BETA,
    budgets: bool = False,
    sample: bool = False,
) -> DataCentre:
    """A feasible data centre with sparse traffic: own traffic plus ``peers`` random flows each.

    Capacities are set from each server's forwarding load and a utilisation drawn uniformly in
    [0.2, 0.98], so some servers can sample everything (receivers) and others cannot (senders).
    ``sample``: every other server may use the sample action (``SAMPLE_COST_RATIO`` x alpha).
    """
    rng = np.random.default_rng(seed)
    source = np.repeat(np.arange(servers), peers + 1)
    destination = source.copy()
    if servers > 1:
        others = rng.integers(0, servers - 1, size=(servers, peers))
        others += others >= np.arange(servers)[:, None]  # skip self: uniform over the others
        destination.reshape(servers, peers + 1)[:, 1:] = others
    volume = rng.lognormal(mean=9.0, sigma=1.0, size=source.size)
    volume.reshape(servers, peers + 1)[:, 0] *= 4.0  # most traffic stays on its server
    forwarding = np.bincount(source, weights=volume, minlength=servers) + np.bincount(
        destination[source != destination], weights=volume[source != destination], minlength=servers
    )
    capacity = forwarding / rng.uniform(0.2, 0.98, size=servers)
    intervals = {
        "alpha": np.tile([alpha * 0.8, alpha * 1.2], (servers, 1)),
        "beta": np.tile([beta * 0.8, beta * 1.2], (servers, 1)),
        "capacity_pps": np.column_stack((capacity * 0.95, capacity * 1.05)),
    }
    extras = {}
    if budgets:
        extras = {
            "weight": rng.choice([1.0, 2.0, 5.0], servers),
            "packet_bytes": 800.0,
            "mirror_cap_bytes": np.where(rng.uniform(size=servers) < 1 / 3, 2e7, np.inf),
            "collector_cap_pps": float(volume.sum() / 2),
        }
    if sample:
        cost = alpha * SAMPLE_COST_RATIO
        extras = {
            "alpha_sample": np.where(np.arange(servers) % 2 == 0, cost, np.nan),
            "observation_domain": np.arange(1, servers + 1),
        }
        intervals["alpha_sample"] = np.tile([cost * 0.8, cost * 1.2], (servers, 1))
    return DataCentre.from_arrays(
        capacity,
        alpha,
        beta,
        source,
        destination,
        volume,
        names=[f"s{i}" for i in range(servers)],
        name=f"bench-{servers}",
        intervals=intervals,
        **extras,
    )


@dataclass(frozen=True)
class Timing:
    seconds: float
    cpu_seconds: float
    repeats: int
    lp_objective_pps: float
    distinct_pps: float  # as applied (sFlow 1-in-N, ``realise``)
    planned_pps: float  # as the solver returned it (continuous for the LPs)
    method: str
    gap: float  # to the plan's own bound (exact: over every 1-in-N plan)
    variables: int


def time_solver(
    dc: DataCentre,
    solver: str,
    lp_backend: str | None,
    min_total_s: float = 2.0,
    max_repeats: int = 5,
    min_repeats: int = 1,
) -> Timing:
    """Best wall-clock time of ``solve`` over repeats: at least ``min_repeats``, then more while
    the runs so far took less than ``min_total_s`` in all. Also the best CPU time of this
    process (``time.process_time``): on an oversubscribed machine the wall clock includes waiting
    for a core, the CPU time does not (an LP backend's own process, glpsol, is not counted)."""
    from cosample.planner import solve

    best, best_cpu, repeats, total = math.inf, math.inf, 0, 0.0
    while repeats < max_repeats and (repeats < min_repeats or total < min_total_s):
        started, cpu = time.perf_counter(), time.process_time()
        solution = solve(
            dc, solver=solver, lp_backend=lp_backend or DEFAULT_LP_BACKEND, robust=True
        )
        elapsed = time.perf_counter() - started
        best, repeats, total = min(best, elapsed), repeats + 1, total + elapsed
        best_cpu = min(best_cpu, time.process_time() - cpu)
    from cosample.planner.realise import realise

    return Timing(
        best,
        best_cpu,
        repeats,
        float(solution.bounds.lp),
        float(realise(solution).collected_pps),
        float(solution.collected_pps),
        solution.bounds.method,
        float(solution.gap),
        int(solution.variables),
    )


def predicted_seconds(history: list[tuple[int, float]], next_n: int) -> float:
    """Extrapolate from the last two sizes (power law), assuming n^2 with a single point."""
    n1, t1 = history[-1]
    exponent = 2.0
    if len(history) >= 2:
        n0, t0 = history[-2]
        if t0 > 0 and t1 > 0:
            exponent = max(1.0, math.log(t1 / t0) / math.log(n1 / n0))
    return t1 * (next_n / n1) ** exponent


def run(
    sizes: Sequence[int],
    solvers: Sequence[tuple[str, str | None]],
    max_seconds: float,
    max_lp_variables: int,
    seed: int = 0,
    log=None,
    repeat: bool = True,
) -> pd.DataFrame:
    """Measure every solver on growing instances; returns the tidy table (``COLUMNS``).

    ``repeat=False`` solves each instance once (for tests: checks results, not speed)."""
    from cosample.planner.lp import backend_available

    active = []
    for solver, lp_backend in solvers:
        reason = backend_available(lp_backend) if solver != EXACT else None
        if reason and log:
            log(f"skipping {label(solver, lp_backend)}: {reason}")
        if not reason:
            active.append((solver, lp_backend))
    history: dict[tuple[str, str | None], list[tuple[int, float]]] = {key: [] for key in active}
    rows = []
    for position, n in enumerate(sizes):
        if not active:
            break
        plain = random_datacentre(n, seed=seed)
        variants = {
            "budgets": random_datacentre(n, seed=seed, budgets=True),
            "sample": random_datacentre(n, seed=seed, sample=True),
        }
        for key in list(active):
            solver, lp_backend = key
            dc = variants.get(lp_backend, plain) if solver == EXACT else plain
            if solver != EXACT and _lp_variables(dc, solver) > max_lp_variables:
                active.remove(key)
                continue
            # the exact solver is cheap enough to always take the best of three
            backend = None if solver == EXACT else lp_backend
            timing = (
                time_solver(dc, solver, backend, min_repeats=3 if solver == EXACT else 1)
                if repeat
                else time_solver(dc, solver, backend, min_total_s=0.0)
            )
            rows.append(
                {
                    "solver_label": label(solver, lp_backend),
                    "solver": solver,
                    "lp_backend": lp_backend or "",
                    "servers": n,
                    "traffic_entries": int(dc.traffic_pps.size),
                    "variables": timing.variables,
                    "seconds": timing.seconds,
                    "cpu_seconds": timing.cpu_seconds,
                    "repeats": timing.repeats,
                    "load_average": os.getloadavg()[0],
                    "lp_objective_pps": timing.lp_objective_pps,
                    "distinct_pps": timing.distinct_pps,
                    "planned_pps": timing.planned_pps,
                    "method": timing.method,
                    "gap": timing.gap,
                }
            )
            if log:
                log(
                    f"n={n:>8} {label(solver, lp_backend):<20} {timing.seconds:10.4g} s "
                    f"{timing.variables:>9} variables"
                )
            history[key].append((n, timing.seconds))
            following = sizes[position + 1] if position + 1 < len(sizes) else None
            if following and predicted_seconds(history[key], following) > max_seconds:
                active.remove(key)
    return with_agreement(pd.DataFrame(rows, columns=list(COLUMNS[:-2])))


def with_agreement(table: pd.DataFrame) -> pd.DataFrame:
    """Add each LP's relative difference from the exact solver's LP bound at the same n.

    The budgets and sample rows plan other data centres: they are compared with nothing
    (agree, NaN).
    """
    plain = table["solver_label"] == EXACT
    exact = table[plain].set_index("servers")["lp_objective_pps"]
    reference = table["servers"].map(exact)
    difference = (table["lp_objective_pps"] - reference).abs() / reference.abs().clip(lower=1e-300)
    budgets = table["solver_label"].isin((label(EXACT, "budgets"), label(EXACT, "sample")))
    return table.assign(
        relative_difference=difference.where(~budgets),
        agrees=(difference.le(AGREEMENT) & reference.notna()) | budgets,
    )


def _lp_variables(dc: DataCentre, solver: str) -> int:
    """Variables the LP would have (same rule as planner.lp), to skip sizes that exhaust memory."""
    own, spare = dc.own_pps, dc.spare_pps
    senders = own > 0
    if solver == FULL:
        return int(senders.sum()) * dc.size
    receivers = spare - dc.alpha * own >= 0
    senders &= ~receivers
    return int(senders.sum()) * (int(receivers.sum()) + 1)


def speedup(
    table: pd.DataFrame, n: int, slow: str = "full LP (glpk)", fast: str = "exact"
) -> float:
    """How many times faster ``fast`` ran than ``slow`` at ``n`` (NaN if either is missing)."""
    at = table[table["servers"] == n].set_index("solver_label")["seconds"]
    if slow not in at or fast not in at:
        return math.nan
    return float(at[slow] / at[fast])


def wide_table(table: pd.DataFrame) -> pd.DataFrame:
    """Seconds per solver (columns) and n (rows), for reading and for docs."""
    return table.pivot_table(index="servers", columns="solver_label", values="seconds", sort=False)[
        list(dict.fromkeys(table["solver_label"]))
    ]


def markdown(table: pd.DataFrame) -> str:
    """Seconds (and LP variables) per n and solver as a Markdown table, for docs."""
    labels = list(dict.fromkeys(table["solver_label"]))
    lines = [
        "| n | " + " | ".join(labels) + " | load avg |",
        "|---:|" + "---:|" * len(labels) + "---:|",
    ]
    for n, rows in table.groupby("servers", sort=True):
        by_label = rows.set_index("solver_label")
        cells = []
        for name in labels:
            if name not in by_label.index:
                cells.append("")
                continue
            row = by_label.loc[name]
            cell = f"{row['seconds']:.3g} s"
            if row["variables"]:
                cell += f" ({int(row['variables']):,} var.)"
            cells.append(cell)
        lines.append(
            f"| {int(n):,} | " + " | ".join(cells) + f" | {rows['load_average'].max():.1f} |"
        )
    return "\n".join(lines)


def report(table: pd.DataFrame, out=print) -> bool:
    """Print the wide table, the agreement check and the headline ratios; True if all agree."""
    table = with_agreement(table[list(COLUMNS[:-2])])
    with pd.option_context("display.width", 160, "display.float_format", "{:.4g}".format):
        out("planning time (s) by n and solver:")
        seconds = wide_table(table)
        out(seconds.to_string())
        if "exact" in seconds.columns and len(seconds.columns) > 1:
            out("times slower than the exact solver:")
            ratios = seconds.drop(columns="exact").div(seconds["exact"], axis=0).dropna(how="all")
            out(ratios.to_string(float_format="{:,.0f}".format))
    worst = table["relative_difference"].max(skipna=True)
    agree = bool(table["agrees"].all())
    out(
        f"objectives agree with the exact solver (relative {AGREEMENT:g}): "
        f"{'yes' if agree else 'NO'} (worst relative difference {worst:.2e} over {len(table)} solves)"
    )
    compared = sorted(
        set(table.loc[table["solver_label"] == "full LP (glpk)", "servers"])
        & set(table.loc[table["solver"] == "exact", "servers"])
    )
    if compared:
        n = REFERENCE_N if REFERENCE_N in compared else compared[-1]
        out(f"exact vs full LP (glpk) at n={n}: {speedup(table, n):,.0f} times faster")
    for name in (EXACT, label(EXACT, "budgets"), label(EXACT, "sample")):
        exact = table[table["solver_label"] == name]
        if not exact.empty:
            biggest = exact.loc[exact["servers"].idxmax()]
            out(
                f"{name} (margin 10 %, robust) at n={int(biggest['servers']):,} "
                f"({int(biggest['traffic_entries']):,} traffic entries): {biggest['seconds']:.3g} s "
                f"wall, {biggest['cpu_seconds']:.3g} s CPU "
                f"(load average {biggest['load_average']:.1f} on {os.cpu_count()} CPUs); "
                f"{biggest['method']}, gap {biggest['gap']:.2e} to the bound on every applied plan"
            )
    sample = table[table["solver_label"] == label(EXACT, "sample")].set_index("servers")
    if not sample.empty:
        plain = table[table["solver_label"] == EXACT].set_index("servers")["distinct_pps"]
        ratio = (sample["distinct_pps"] / plain).dropna()
        if not ratio.empty:
            out(
                f"with the sample action on half the servers the exact plan as applied collects "
                f"{ratio.min():.4f} to {ratio.max():.4f} times the sFlow-only plan's"
            )
    lps = table[table["solver"] != EXACT]
    if not lps.empty:
        exact = table[table["solver_label"] == EXACT].set_index("servers")["distinct_pps"]
        ratio = lps["distinct_pps"] / lps["servers"].map(exact)
        out(
            f"LP plans as applied against the exact plan as applied: {ratio.min():.4f} to "
            f"{ratio.max():.4f} of it over {len(lps)} solves"
        )
    return agree


def build_parser() -> argparse.ArgumentParser:
    from cosample.experiments.bench_options import planner_benchmark_options

    parser = argparse.ArgumentParser(
        prog="python -m cosample.experiments.bench_planner", description=__doc__.splitlines()[0]
    )
    planner_benchmark_options(parser)
    return parser


def benchmark(args: argparse.Namespace, out=print) -> tuple[pd.DataFrame, bool]:
    """Run with parsed options: measure, print, optionally write the CSV."""
    from cosample.experiments.files import write_csv

    if args.max_seconds <= 0:
        raise ExperimentError(f"--max-seconds must be > 0, got {args.max_seconds}")
    sizes = QUICK_SIZES if args.quick else tuple(n for n in SIZES if n <= args.max_servers)
    if not sizes:
        raise ExperimentError(
            f"--max-servers {args.max_servers}: smaller than the smallest size 10"
        )
    solvers = (
        [key for key in SOLVERS if key[0] == EXACT]
        if getattr(args, "exact_only", False)
        else SOLVERS
    )
    table = run(
        sizes,
        solvers,
        args.max_seconds,
        args.max_lp_variables,
        seed=args.seed,
        log=lambda line: out(line),
        repeat=not args.quick,
    )
    agree = report(table, out=out)
    if getattr(args, "markdown", False):
        out(markdown(table))
    if args.csv is not None:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        write_csv(table, args.csv, float_format=None)  # objectives are compared to 1e-6
        out(f"wrote {args.csv}")
    return table, agree


def main(argv: Sequence[str] | None = None) -> int:
    from cosample.errors import CosampleError

    args = build_parser().parse_args(argv)
    try:
        _, agree = benchmark(args, out=lambda line: print(line, flush=True))
    except CosampleError as exc:
        print(f"bench_planner: error: {exc}", file=sys.stderr)
        return 2
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
