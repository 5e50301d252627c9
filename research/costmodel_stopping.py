"""Does stopping as soon as the interval looks narrow enough keep the cpu method's coverage?

``cosample calibrate --target-ci`` refits after every run and stops at the first interval whose
half-width is at most ``max(relative * |a|, absolute)``, from ``ancova.MIN_STOPPING_BLOCKS`` runs on.
Stopping when an interval *looks* narrow favours intervals that are narrow by chance (an
underestimated spread), so the reported interval may cover less than its 95%. This simulates the
rule on this machine's real noise and counts.

Each simulated calibration draws runs one at a time, with replacement and in random order, from
a measured data set, up to the number of runs its two minutes held (``--max-runs``: default the
data set's own count), and applies each rule after every run. Two ways to make a run:

- ``placebo`` (as ``costmodel_coverage``): a measured run's phases with the fitted effect taken
  out keep the host's noise and its serial correlation; the known effect (the data set's own
  estimate, so the relative target is realistic) is put back on a fresh coin-tossed alternation.
- ``runs``: the measured run as it was, effect and all, so the effect's real variation from run
  to run is kept; the truth is the estimate from all the data set's runs (a bootstrap world).

Rules are ``MIN`` (stop from MIN runs on, at the first narrow-enough interval), ``MIN:F`` (the
same, but stop only when the half-width is at most F times the target, while the reported
interval stays the 95% one) and ``fixed`` (never stop early: all ``--max-runs`` runs). All rules
see the very same draws. Coverage is the share of final intervals containing the truth;
``stopped early`` the share that stopped before the last run; ``met`` the share whose final
interval met the target.

    python -m research.costmodel_stopping --draws 200 docs/data/cpu-sflow.csv \\
        docs/data/cpu-mirror_vxlan-default-seed9.csv

Prints one Markdown row per (file, mechanism, mode, rule).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cosample.costmodel.adaptive import Target
from cosample.costmodel.ancova import DEFAULT_COVARIATES, fit_with_covariate
from cosample.costmodel.errors import CostModelError
from research.costmodel_coverage import mechanism_groups


@dataclass(frozen=True)
class Rule:
    """Stop from ``min_runs`` on when the half-width is at most ``factor`` x the target."""

    name: str
    min_runs: int
    factor: float = 1.0

    @classmethod
    def parse(cls, text: str, max_runs: int) -> Rule:
        if text == "fixed":
            return cls(text, max_runs, 1.0)
        runs, _, factor = text.partition(":")
        return cls(text, int(runs), float(factor) if factor else 1.0)


@dataclass
class Tally:
    hits: int = 0
    early: int = 0
    met: int = 0
    runs: int = 0
    draws: int = 0

    def row(self) -> str:
        n = max(self.draws, 1)
        return (
            f"{self.hits / n:.1%} | {self.early / n:.1%} | {self.met / n:.1%} | {self.runs / n:.1f}"
        )


def simulate(
    group: pd.DataFrame,
    covariate: str | None,
    mode: str,
    rules: list[Rule],
    max_runs: int,
    draws: int,
    target: Target,
    rng: np.random.Generator,
) -> tuple[float, dict[str, Tally]]:
    """Play every rule on the same ``draws`` simulated calibrations; (truth, tallies)."""
    block = pd.factorize(group["block"])[0]
    fit, check = fit_with_covariate(group, block, covariate, target.confidence)
    covariate = covariate if check and check.used else None
    truth = fit.coefficient
    rate = group["rate"].to_numpy(float)
    noise = np.log(group["throughput_pps"].to_numpy(float)) + np.log1p(truth * rate)
    runs = [group[block == b].assign(_noise=noise[block == b]) for b in range(block.max() + 1)]
    tallies = {rule.name: Tally() for rule in rules}
    for _ in range(draws):
        parts = []
        for k, chosen in enumerate(rng.integers(0, len(runs), max_runs)):
            run = runs[chosen].assign(block=k)
            if mode == "placebo":
                trial = run["rate"].max()
                first = rng.random() < 0.5
                fake = np.where((run["phase"].to_numpy() % 2 == 0) == first, trial, 0.0)
                run = run.assign(
                    rate=fake, throughput_pps=np.exp(run["_noise"] - np.log1p(truth * fake))
                )
            parts.append(run)
        frame = pd.concat(parts, ignore_index=True)
        fits: dict[int, tuple[float, float, float]] = {}  # runs -> (a, low, high)

        def at(n: int) -> tuple[float, float, float]:
            if n not in fits:
                part = frame[frame["block"] < n]
                try:
                    again, _ = fit_with_covariate(
                        part, part["block"].to_numpy(), covariate, target.confidence
                    )
                    fits[n] = (again.coefficient, *again.ci)
                except CostModelError:
                    fits[n] = (np.nan, -np.inf, np.inf)
            return fits[n]

        for rule in rules:
            n = max_runs
            for k in range(min(rule.min_runs, max_runs), max_runs):
                a, low, high = at(k)
                if np.isfinite(a) and (high - low) / 2 <= rule.factor * target.allowed(a):
                    n = k
                    break
            a, low, high = at(n)
            tally = tallies[rule.name]
            tally.draws += 1
            tally.hits += bool(low <= truth <= high)
            tally.early += n < max_runs
            tally.met += target.met(a, (high - low) / 2)
            tally.runs += n
    return truth, tallies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-runs", type=int, help="runs in the budget (default: the data's)")
    parser.add_argument("--modes", default="placebo,runs")
    parser.add_argument(
        "--rules", default="fixed,6,12,6:0.8", help="comma list: fixed, MIN or MIN:FACTOR"
    )
    parser.add_argument("--target-ci", type=float, default=0.1)
    parser.add_argument("--target-ci-abs", type=float, default=0.02)
    args = parser.parse_args(argv)
    target = Target(relative=args.target_ci, absolute=args.target_ci_abs)
    print(
        "| data | mechanism | covariate | mode | truth | runs max | rule | coverage | "
        "stopped early | met | mean runs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for file_name, mechanism, group in mechanism_groups(args.data):
        max_runs = args.max_runs or int(group["block"].nunique())
        rules = [Rule.parse(text, max_runs) for text in args.rules.split(",")]
        covariate = DEFAULT_COVARIATES.get(mechanism)
        for mode in args.modes.split(","):
            rng = np.random.default_rng(args.seed)  # the same draws for every rule
            truth, tallies = simulate(
                group, covariate, mode, rules, max_runs, args.draws, target, rng
            )
            for rule in rules:
                print(
                    f"| {file_name} | {mechanism} | {covariate or 'none'} | {mode} | "
                    f"{truth:.3f} | {max_runs} | {rule.name} | {tallies[rule.name].row()} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
