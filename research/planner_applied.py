"""What each plan collects as the switches apply it (sFlow 1-in-N), side by side in one run.

On random data centres (``bench_planner.random_datacentre``, seeds 0..K-1, a few sizes) every
plan is rounded the same way (``realise``) and counted in distinct packets
(``summary.collected_pps``): the exact plan (every server's 1-in-N chosen with the mirror
shares, any server may take copies at its own N and send too), the plan that keeps receivers at
1-in-1 and senders apart (what the exact solver planned before issue 44, with whether it said
"optimal"), the continuous optimum rounded (before issue 24), the reduced and full LPs rounded
(HiGHS), and the exact plan with a margin 0.1 larger. On data centres of at most
``--brute-force-up-to`` servers also the brute force over every N <= 32 per server
(``brute_force``). Printed: per rival, on how many data centres the exact plan as applied
collects less / the same / more, and the range of the ratio; the split plan and the exact plan
against the brute force, and how many plans said "optimal" below it; the continuous optimum
rounded against the LPs rounded (the regression of issue 24). Also what rounding costs: the
continuous bound minus the applied optimum.

    python -m research.planner_applied [--seeds 50] [--sizes 4 8 12] [--margin 0]
        [--brute-force-up-to 4]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from cosample.experiments.bench_planner import random_datacentre

EXACT_APPLIED = "exact as applied"
SPLIT = "receivers 1-in-1 (before)"
BRUTE = "brute force N <= 32"
RIVALS = (
    SPLIT,
    "continuous optimum rounded",
    "reduced LP rounded",
    "full LP rounded",
    "exact, margin + 0.1",
)
SAME = 1e-9


def compare(
    sizes: Sequence[int],
    seeds: Sequence[int],
    margin: float,
    lp_backend: str = "highs",
    brute_force_up_to: int = 4,
) -> pd.DataFrame:
    """One row per data centre: distinct pps as applied of every plan, the continuous bound,
    and (small ones) the brute force's best."""
    from cosample.planner import solve
    from cosample.planner.exact import solve_continuous
    from cosample.planner.problem import build_problem
    from cosample.planner.quantised import choose_applied
    from cosample.planner.realise import realise
    from research.brute_force import brute_force

    rows = []
    for n in sizes:
        for seed in seeds:
            dc = random_datacentre(n, seed=seed)
            problem = build_problem(dc, margin=margin)
            exact = solve(problem)
            split = choose_applied(problem)
            continuous = solve_continuous(problem)
            rows.append(
                {
                    "servers": n,
                    "seed": seed,
                    "margin": margin,
                    "method": exact.bounds.method,
                    "optimal": exact.optimal,
                    "gap": exact.gap,
                    "split_method": split.method,
                    "split_optimal": split.optimal,
                    "continuous_bound_pps": continuous.bounds.envelope,
                    "bound_applied_pps": exact.bounds.applied,
                    EXACT_APPLIED: realise(exact).collected_pps,
                    SPLIT: split.objective,
                    RIVALS[1]: realise(continuous).collected_pps,
                    RIVALS[2]: realise(
                        solve(problem, "reduced", lp_backend=lp_backend)
                    ).collected_pps,
                    RIVALS[3]: realise(solve(problem, "full", lp_backend=lp_backend)).collected_pps,
                    RIVALS[4]: realise(solve(dc, margin=min(margin + 0.1, 0.99))).collected_pps,
                    BRUTE: brute_force(problem)[0] if n <= brute_force_up_to else float("nan"),
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
        fine &= less == 0 or rival == RIVALS[4] and not table["optimal"].all()
    brute = table[table[BRUTE].notna()]
    if len(brute):
        for label, plan, said in (
            ("before: receivers 1-in-1", SPLIT, "split_optimal"),
            ("exact as applied", EXACT_APPLIED, "optimal"),
        ):
            less, same, more, low, high = tally(brute[plan], brute[BRUTE])
            below = brute[plan] < brute[BRUTE] * (1 - SAME)
            out(
                f"{label:<28} vs {BRUTE} ({len(brute)} data centres of "
                f"{sorted(set(brute['servers']))} servers): less {less:>3}, same {same:>3}, "
                f"more {more:>3}; ratio {low:.4f}..{high:.4f}; said optimal while below it: "
                f"{int((below & brute[said]).sum())}"
            )
        fine &= not ((brute[EXACT_APPLIED] < brute[BRUTE] * (1 - SAME)) & brute["optimal"]).any()
    for rival in RIVALS[2:4]:
        less, same, more, low, high = tally(table[RIVALS[1]], table[rival])
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
    parser.add_argument(
        "--brute-force-up-to",
        type=int,
        default=4,
        help="brute force over N <= 32 on data centres of at most this many servers (default 4)",
    )
    parser.add_argument("--csv", default=None, help="write the per-data-centre table here")
    args = parser.parse_args(argv)
    if args.seeds < 1 or min(args.sizes) < 1 or not 0 <= args.margin < 1:
        parser.error("--seeds and --sizes must be >= 1 and --margin in [0, 1)")
    table = compare(
        args.sizes, range(args.seeds), args.margin, brute_force_up_to=args.brute_force_up_to
    )
    fine = report(table, out=lambda line: print(line, flush=True))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0 if fine else 1


if __name__ == "__main__":
    sys.exit(main())
