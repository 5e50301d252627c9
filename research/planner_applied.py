"""What each plan collects as the switches apply it (sFlow 1-in-N), side by side in one run.

On random data centres (``bench_planner.random_datacentre``, seeds 0..K-1, a few sizes) every
plan is rounded the same way (``realise``) and counted in distinct packets
(``summary.collected_pps``): the exact plan (1-in-N chosen with the mirror shares), the
continuous optimum rounded (what the exact solver planned before), the reduced and full LPs
rounded (HiGHS), and the exact plan with a margin 0.1 larger. Printed: per rival, on how many
data centres the exact plan as applied collects less / the same / more, and the range of the
ratio; and the continuous optimum rounded against the LPs rounded (the regression the exact
plan removes). Also what rounding costs: the continuous bound minus the applied optimum.

    python -m research.planner_applied [--seeds 50] [--sizes 4 8 12] [--margin 0]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from cosample.experiments.bench_planner import random_datacentre

EXACT_APPLIED = "exact as applied"
RIVALS = (
    "continuous optimum rounded",
    "reduced LP rounded",
    "full LP rounded",
    "exact, margin + 0.1",
)
SAME = 1e-9


def compare(
    sizes: Sequence[int], seeds: Sequence[int], margin: float, lp_backend: str = "highs"
) -> pd.DataFrame:
    """One row per data centre: distinct pps as applied of every plan, the continuous bound."""
    from cosample.planner import solve
    from cosample.planner.exact import solve_continuous
    from cosample.planner.problem import build_problem
    from cosample.planner.realise import realise

    rows = []
    for n in sizes:
        for seed in seeds:
            dc = random_datacentre(n, seed=seed)
            problem = build_problem(dc, margin=margin)
            exact = solve(problem)
            continuous = solve_continuous(problem)
            rows.append(
                {
                    "servers": n,
                    "seed": seed,
                    "margin": margin,
                    "method": exact.bounds.method,
                    "gap": exact.gap,
                    "continuous_bound_pps": continuous.bounds.envelope,
                    EXACT_APPLIED: realise(exact).collected_pps,
                    RIVALS[0]: realise(continuous).collected_pps,
                    RIVALS[1]: realise(
                        solve(problem, "reduced", lp_backend=lp_backend)
                    ).collected_pps,
                    RIVALS[2]: realise(solve(problem, "full", lp_backend=lp_backend)).collected_pps,
                    RIVALS[3]: realise(solve(dc, margin=min(margin + 0.1, 0.99))).collected_pps,
                }
            )
    return pd.DataFrame(rows)


def tally(mine: pd.Series, other: pd.Series) -> tuple[int, int, int, float, float]:
    """(less, same, more, lowest ratio, highest ratio) of ``mine`` against ``other``."""
    ratio = mine / other.where(other > 0)
    less = int((mine < other * (1 - SAME)).sum())
    more = int((mine > other * (1 + SAME)).sum())
    return less, len(mine) - less - more, more, float(ratio.min()), float(ratio.max())


def report(table: pd.DataFrame, out=print) -> bool:
    """Print the tallies; True when the exact plan as applied is never below a rival."""
    fine = True
    mine = table[EXACT_APPLIED]
    out(
        f"{len(table)} data centres ({sorted(set(table['servers']))} servers, seeds "
        f"{table['seed'].min()}..{table['seed'].max()}, margin {table['margin'].iloc[0]:g}); "
        f"methods: {dict(table['method'].value_counts())}"
    )
    for rival in RIVALS:
        less, same, more, low, high = tally(mine, table[rival])
        out(
            f"exact as applied vs {rival:<28} less {less:>3}, same {same:>3}, more {more:>3}; "
            f"ratio {low:.4f}..{high:.4f}"
        )
        fine &= less == 0 or rival == RIVALS[3] and (table["method"] == "greedy").any()
    for rival in RIVALS[1:3]:
        less, same, more, low, high = tally(table[RIVALS[0]], table[rival])
        out(
            f"before (continuous optimum rounded) vs {rival:<19} less {less:>3}, same {same:>3}, "
            f"more {more:>3}; ratio {low:.4f}..{high:.4f}"
        )
    cost = (table["continuous_bound_pps"] - mine) / table["continuous_bound_pps"]
    out(
        f"1-in-N costs (continuous bound - exact as applied) / bound: median {cost.median():.2%}, "
        f"max {cost.max():.2%}"
    )
    return fine


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.planner_applied", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seeds", type=int, default=50, help="data centres per size (default 50)")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[4, 8, 12],
        help="servers per data centre (default 4 8 12)",
    )
    parser.add_argument("--margin", type=float, default=0.0, help="planning margin (default 0)")
    parser.add_argument("--csv", default=None, help="write the per-data-centre table here")
    args = parser.parse_args(argv)
    if args.seeds < 1 or min(args.sizes) < 1 or not 0 <= args.margin < 1:
        parser.error("--seeds and --sizes must be >= 1 and --margin in [0, 1)")
    table = compare(args.sizes, range(args.seeds), args.margin)
    fine = report(table, out=lambda line: print(line, flush=True))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0 if fine else 1


if __name__ == "__main__":
    sys.exit(main())
