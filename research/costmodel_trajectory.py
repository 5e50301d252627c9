"""How many runs does a calibration need? Its interval after each run, refitted from its data.

``cosample calibrate --target-ci`` checks the interval after every run from the twelfth on and
stops at the first that is narrow enough. This refits committed cpu-method calibrations on their
first ``k`` runs, for every ``k`` from ``--from`` to all of them, with the estimator and
covariates ``cosample fit`` uses by default, and prints one Markdown row per calibration and
mechanism: ``a ± half-width`` after each run, the half-width the target needs for that ``a``,
the first ``k`` at which it was met, and the measuring time that took (``k`` runs' share of
the calibration's ``metadata.seconds``; the runs are of equal length). Run on a calibration given
a longer ``--max-time``, it says what a shorter budget would have reported:

    python -m research.costmodel_trajectory docs/data/budget/*.json --at 9
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from cosample.costmodel.compare import needed_half_width, read_calibration
from cosample.costmodel.fit import CostModelFit
from cosample.errors import exit_status
from cosample.experiments.errors import ExperimentError


def trajectory(path: Path, first: int = 3) -> list[dict]:
    """Per mechanism of the calibration at ``path``: its estimate after each of its runs."""
    document, data = read_calibration(path)
    if "block" not in data.columns:
        raise ExperimentError(f"{path}: no block column: not a run-by-run (paired) calibration")
    seconds = document.metadata.seconds or {}
    out = []
    for mechanism in document.mechanisms:
        phases = data[data["mechanism"] == mechanism]
        runs = sorted(phases["block"].unique())
        steps = []
        for k in range(max(first, 1), len(runs) + 1):
            fit = CostModelFit().fit(phases[phases["block"].isin(runs[:k])]).results_[mechanism]
            low, high = fit.coefficient_ci
            steps.append(
                {
                    "runs": k,
                    "a": fit.coefficient,
                    "half_width": (high - low) / 2,
                    "needed": needed_half_width(document.metadata, fit.coefficient),
                }
            )
        if not steps:
            raise ExperimentError(f"{path}: {mechanism}: {len(runs)} runs; the fit needs {first}")
        met = next((s["runs"] for s in steps if s["half_width"] <= s["needed"]), None)
        total = seconds.get(mechanism)
        out.append(
            {
                "data": path.name,
                "mechanism": mechanism,
                "runs": len(runs),
                "steps": steps,
                "met_at": met,
                "met_seconds": total * met / len(runs) if met and total else math.nan,
            }
        )
    return out


def _step(step: dict) -> str:
    return f"{step['a']:.3f} ± {step['half_width']:.3f} ({step['needed']:.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibrations", nargs="+", type=Path, help="cpu-method calibration JSONs")
    parser.add_argument(
        "--at",
        type=int,
        action="append",
        default=[],
        help="also show the estimate after this many runs (repeat)",
    )
    parser.add_argument(
        "--from",
        dest="first",
        type=int,
        default=3,
        help="first run count to refit at (default 3: the fit needs 3 runs)",
    )
    args = parser.parse_args(argv)

    def report() -> int:
        at = sorted(set(args.at))
        print(
            "| data | mechanism | runs | "
            + "".join(f"after {k} runs (needed) | " for k in at)
            + "at the end (needed) | target first met after | seconds by then |"
        )
        print("|---" * (5 + len(at)) + "|---|")
        for path in args.calibrations:
            for row in trajectory(path, args.first):
                by_runs = {s["runs"]: s for s in row["steps"]}
                cells = [_step(by_runs[k]) if k in by_runs else "-" for k in at]
                met = f"{row['met_at']} runs" if row["met_at"] else "not met"
                when = f"{row['met_seconds']:.0f}" if math.isfinite(row["met_seconds"]) else "-"
                print(
                    f"| {row['data']} | {row['mechanism']} | {row['runs']} | "
                    + "".join(f"{cell} | " for cell in cells)
                    + f"{_step(row['steps'][-1])} | {met} | {when} |"
                )
        return 0

    return exit_status("costmodel_trajectory", report)


if __name__ == "__main__":
    sys.exit(main())
