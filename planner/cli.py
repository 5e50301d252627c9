"""``cosample plan`` and ``cosample check``: parsing here, work in ``planner.commands``."""

from __future__ import annotations

import argparse

from cosample.planner.choices import DEFAULT_LP_BACKEND, DEFAULT_SOLVER, LP_BACKENDS, SOLVERS


def register(subparsers: argparse._SubParsersAction) -> None:
    plan = subparsers.add_parser(
        "plan",
        help="compute a collaborative sampling plan",
        description="Compute the data-centre-wide sampling plan. Without FILE, plans the embedded "
        "example data centre (12 servers, skewed load, the paper's coefficients).",
    )
    plan.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="data-centre description (JSON or YAML); default: embedded example",
    )
    plan.add_argument(
        "--solver",
        choices=SOLVERS,
        default=DEFAULT_SOLVER,
        help="exact closed form (default), or the paper's LP reduced or full",
    )
    plan.add_argument(
        "--lp-backend",
        choices=tuple(LP_BACKENDS),
        default=DEFAULT_LP_BACKEND,
        help=f"LP solver for --solver reduced/full (default: {DEFAULT_LP_BACKEND})",
    )
    plan.add_argument(
        "--noncollab",
        action="store_true",
        help="plan the non-collaborative baseline instead (no mirrors)",
    )
    plan.add_argument(
        "--margin",
        type=float,
        metavar="F",
        help="keep this share of every server's capacity free, 0 <= F < 1 "
        "(overrides the description's per-server margins; default 0.1)",
    )
    plan.add_argument(
        "--robust",
        action="store_true",
        help="plan with the pessimistic end of each calibration's 95%% interval "
        "(alpha and beta high, capacity low); the summary says what the point "
        "estimates would have given",
    )
    plan.add_argument(
        "-o",
        "--output",
        metavar="PLAN.json",
        help="write the plan file here ('-': standard output, the table then on standard error)",
    )
    plan.add_argument(
        "--json",
        action="store_true",
        help="print the summary as JSON (plan id, version, solver, the summary's numbers, "
        "where the plan went) instead of the table",
    )
    plan.add_argument(
        "--plan-version",
        type=int,
        metavar="N",
        help="plan version (default: creation time in Unix seconds)",
    )
    plan.add_argument(
        "--valid-for",
        default="6h",
        metavar="DURATION",
        help="how long agents may apply the plan, e.g. 90s, 30m, 6h, 2d (default 6h)",
    )
    plan.add_argument(
        "--time-limit", type=float, metavar="SECONDS", help="give up an LP solve after this long"
    )
    plan.add_argument("--quiet", "-q", action="store_true", help="print only the summary")
    plan.set_defaults(func=_run_plan)

    check = subparsers.add_parser(
        "check",
        help="validate a data-centre description",
        description="Validate a data-centre description and print it normalised, or the error.",
    )
    check.add_argument("file", metavar="FILE")
    check.set_defaults(func=_run_check)


def _run_plan(args: argparse.Namespace) -> int:
    from cosample.planner.commands import run_plan

    return run_plan(args)


def _run_check(args: argparse.Namespace) -> int:
    from cosample.planner.commands import run_check

    return run_check(args)
