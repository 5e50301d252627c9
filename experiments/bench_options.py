"""Options of the planner benchmark, shared by ``cosample experiment scaling`` and
``python -m cosample.experiments.bench_planner``: import-light, so ``cosample --help`` stays fast
and neither module imports the other for them."""

from __future__ import annotations

import argparse
from pathlib import Path


def planner_benchmark_options(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to ``parser``."""
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="stop growing n for a solver once its next size is predicted to take "
        "longer than this (default 60)",
    )
    parser.add_argument(
        "--max-servers", type=int, default=10**6, help="largest n to try (default 1000000)"
    )
    parser.add_argument(
        "--max-lp-variables",
        type=int,
        default=400_000,
        help="skip LPs with more variables, a memory guard (default 400000)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny run for tests (n = 10, 20, 50); its times mean nothing",
    )
    parser.add_argument(
        "--exact-only",
        action="store_true",
        help="only the exact solver's rows (plain, budgets, sample), no LPs",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random data centres")
    parser.add_argument("--csv", type=Path, default=None, help="write the tidy table here")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
