"""How many explicit rates the MILP over every applied plan starts from, side by side in one run.

``applied_milp.solve_space`` starts each server with its highest affordable rate, the next
DENSE - 1 and LADDER - 1 halvings on both ladders (sFlow's 1-in-N, the sample action's K); the
intervals between them are split only where a round of the MILP picks one. More explicit rates:
fewer rounds, a larger MILP each round. On random data centres
(``bench_planner.random_datacentre``, every other server able to use the sample action, seeds
0..K-1) and on the testbed's three servers (``research.loop_window.TESTBED``, every flow
redrawn within +/-10 % per seed) this solves each fleet as the exact planner does (its
mirroring limits explicit from the start) with every ``--start`` in turn, fleet by fleet, and
prints per start the CPU seconds in all and their ratio to the first start's, the rounds, the
fleets proved optimal within the time limit, and against the first start on how many fleets
the plan collects less, the same (within the proof's tolerance, 1e-6) or more.

    python -m research.planner_ladder [--seeds 10] [--sizes 3 5 8] [--start 4,11 2,4]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence

import numpy as np


def fleets(sizes: Sequence[int], seeds: Sequence[int]) -> Iterator[tuple[object, dict]]:
    """(fleet, the exact planner's extra levels) of every data centre solved."""
    from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
    from cosample.experiments.bench_planner import random_datacentre
    from cosample.planner.datacentre import DataCentre
    from cosample.planner.exact import _limits
    from cosample.planner.fleet import fleet_of
    from cosample.planner.problem import build_problem
    from cosample.planner.quantised import choose_applied
    from research.loop_window import TESTBED

    names = sorted(TESTBED)
    pairs = [(s, d) for s in names for d in TESTBED[s]]
    for seed in seeds:
        rng = np.random.default_rng(seed)
        testbed = DataCentre.from_arrays(
            np.full(len(names), 3000.0),
            PAPER_ALPHA,
            PAPER_BETA,
            [names.index(s) for s, _ in pairs],
            [names.index(d) for _, d in pairs],
            [TESTBED[s][d] * rng.uniform(0.9, 1.1) for s, d in pairs],
            names=names,
        )
        for dc in [testbed, *(random_datacentre(n, seed=seed, sample=True) for n in sizes)]:
            problem = build_problem(dc)
            if np.isfinite(problem.collector_cap_pps):
                continue
            yield fleet_of(problem), _limits(choose_applied(problem))


def compare(sizes: Sequence[int], seeds: Sequence[int], starts: Sequence[tuple[int, int]]):
    """Per start: CPU seconds, rounds, proved, and the objective of every fleet."""
    from cosample.planner.applied_milp import solve_space

    totals = {start: {"cpu_s": 0.0, "rounds": 0, "proved": 0, "objective": []} for start in starts}
    count = 0
    for fleet, extra in fleets(sizes, seeds):
        count += 1
        for start in starts:
            began = time.process_time()
            found = solve_space(fleet, extra, start=start)
            total = totals[start]
            total["cpu_s"] += time.process_time() - began
            total["rounds"] += found.rounds if found is not None else 0
            total["proved"] += int(found is not None and found.proved)
            total["objective"].append(found.objective if found is not None else 0.0)
    return count, totals


def report(count: int, totals: dict, out=print) -> None:
    """One line per start; plans within the proof's tolerance of each other count as the same
    (each proved plan is only known to within it of the optimum)."""
    from cosample.planner.applied_milp import PROOF_TOLERANCE as SAME

    first = next(iter(totals))
    reference = np.asarray(totals[first]["objective"])
    for start, total in totals.items():
        mine = np.asarray(total["objective"])
        less = int((mine < reference * (1 - SAME)).sum())
        more = int((mine > reference * (1 + SAME)).sum())
        apart = float(np.max(np.abs(mine - reference) / np.maximum(reference, 1e-300)))
        out(
            f"start {start[0]},{start[1]}: {total['cpu_s']:.2f} CPU s "
            f"({total['cpu_s'] / max(totals[first]['cpu_s'], 1e-9):.2f} x {first[0]},{first[1]}), "
            f"{total['rounds']} rounds, proved {total['proved']} of {count}; against "
            f"{first[0]},{first[1]}: less {less}, same {count - less - more}, more {more} "
            f"(relative difference at most {apart:.1e})"
        )


def _start(text: str) -> tuple[int, int]:
    try:
        dense, ladder = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--start {text!r}: expected DENSE,LADDER") from None
    if dense < 1 or ladder < 1:
        raise argparse.ArgumentTypeError(f"--start {text!r}: both must be >= 1")
    return dense, ladder


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.planner_ladder", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seeds", type=int, default=10, help="data centres per size (10)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 5, 8], help="servers (3 5 8)")
    parser.add_argument(
        "--start",
        type=_start,
        nargs="+",
        default=[(4, 11), (2, 4)],
        help="DENSE,LADDER to compare, the first the reference (4,11 2,4)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or min(args.sizes) < 2:
        parser.error("--seeds must be >= 1 and --sizes >= 2")
    count, totals = compare(args.sizes, range(args.seeds), args.start)
    print(
        f"{count} fleets (the testbed and {args.sizes} servers, seeds 0..{args.seeds - 1})",
        flush=True,
    )
    report(count, totals, out=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
