"""Is the cpu method's interval honest on this machine's real noise? Two checks per measurements CSV.

1. **Placebo coverage**: each run's real phases, with the fitted effect taken out of the cost
   (``log c - log(1 + a s)``), keep the host's noise, its serial correlation and the covariate's
   real relation to it; a known effect (``--a``) is put back on a fresh random alternation per
   run (coin-tossed start, as the harness does, each run keeping its own trial rate), and the
   fit is repeated. The share of 95% intervals that contain the known value should be about
   95%. A run has only two alternations, so B runs have 2^B: when that is at most ``--draws``
   every one is fitted once (the exact coverage given this noise), else ``--draws`` at random.
   It is coverage *given the host's noise in these runs*: it varies from data set to data set
   around the interval's true coverage. Every small-sample correction named by ``--small-sample`` (CR1, CR2) sees the very
   same alternations, so their rows compare like with like.
2. **Cluster bootstrap**: runs resampled with replacement, refitted; its percentile interval
   beside the reported (cluster-robust, Student t) one.

    python -m research.costmodel_coverage docs/data/cpu-sflow.csv docs/data/cpu-mirror.csv
    python -m research.costmodel_coverage --shifts docs/data/cpu-*.csv

Prints one Markdown row per (file, mechanism, covariate). ``--shifts`` instead tabulates, for
every covariate recorded, what the mechanism does to it (the validity check) and what it would
buy: its share of the cost, the correlation of its per-phase deviations with the cost's, its
shift per unit rate with the 95% interval, and ``a`` with and without it.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from cosample.costmodel.ancova import DEFAULT_COVARIATES, fit_contrast, fit_with_covariate
from cosample.costmodel.data import read_measurements
from cosample.costmodel.errors import CostModelError


def placebo(
    group: pd.DataFrame,
    block: np.ndarray,
    covariate: str | None,
    a: float,
    draws: int,
    rng: np.random.Generator,
    small_sample: str = "cr2",
) -> tuple[float, float, str]:
    """(coverage, mean half-width, what the covariate check said on the real data)."""
    fit, check = fit_with_covariate(group, block, covariate, small_sample=small_sample)
    rate = group["rate"].to_numpy(float)
    trial = pd.Series(rate).groupby(block).transform("max").to_numpy()  # each run's own rate
    noise = np.log(group["throughput_pps"].to_numpy(float)) + np.log1p(fit.coefficient * rate)
    phase = group["phase"].to_numpy() if "phase" in group.columns else np.arange(len(group))
    runs = int(block.max()) + 1
    if 2**runs <= draws:  # every alternation once: the exact coverage given this noise
        patterns = ((np.arange(2**runs)[:, None] >> np.arange(runs)) & 1).astype(bool)
    else:
        patterns = rng.random((draws, runs)) < 0.5
    hits, widths = 0, []
    for starts in patterns:
        fake = np.where((phase % 2 == 0) == starts[block], trial, 0.0)
        frame = group.assign(rate=fake, throughput_pps=np.exp(noise - np.log1p(a * fake)))
        again, _ = fit_with_covariate(
            frame, block, covariate if check and check.used else None, small_sample=small_sample
        )
        hits += again.ci[0] <= a <= again.ci[1]
        widths.append((again.ci[1] - again.ci[0]) / 2)
    return hits / len(patterns), float(np.mean(widths)), (check.reason if check else "none")


def cluster_bootstrap(
    group: pd.DataFrame,
    block: np.ndarray,
    covariate: str | None,
    draws: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    runs = int(block.max()) + 1
    estimates = []
    for _ in range(draws):
        chosen = rng.integers(0, runs, runs)
        parts = [group[block == run].assign(block=k) for k, run in enumerate(chosen)]
        frame = pd.concat(parts, ignore_index=True)
        try:
            fit, _ = fit_with_covariate(frame, frame["block"].to_numpy(), covariate)
        except CostModelError:
            continue
        estimates.append(fit.coefficient)
    low, high = np.percentile(estimates, [2.5, 97.5])
    return float(low), float(high)


def mechanism_groups(paths: list[str]):
    """``(file name, mechanism, its rows numbered from 0)`` for every mechanism of every file."""
    for path in paths:
        frame = read_measurements(path)
        for mechanism, group in frame.groupby("mechanism"):
            yield path.split("/")[-1], str(mechanism), group.reset_index(drop=True)


def shifts(paths: list[str]) -> None:
    from cosample.costmodel.ancova import COVARIATES, covariate_values

    print(
        "| data | mechanism | covariate | share of cost | corr. with cost | shift per unit rate "
        "[95% CI] | a with it (half-width) | a without (half-width) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for file_name, mechanism, group in mechanism_groups(paths):
        block = pd.factorize(group["block"])[0]
        y = -np.log(group["throughput_pps"].to_numpy(float))
        cell = group["block"].astype(str) + "/" + group["rate"].astype(str)
        deviation = y - pd.Series(y).groupby(cell).transform("mean").to_numpy()
        for name, (column, minus) in COVARIATES.items():
            x = covariate_values(group, name)
            if x is None:
                continue
            share = (group[column] - (group[minus] if minus else 0)) / group["cpu_counted"]
            x_dev = x - pd.Series(x).groupby(cell).transform("mean").to_numpy()
            _, check = fit_with_covariate(group, block, name)
            forced = fit_contrast(group["rate"], group["throughput_pps"], block, x)
            low, high = check.shift_ci
            print(
                f"| {file_name} | {mechanism} | {name} | {share.mean():.2f} | "
                f"{np.corrcoef(deviation, x_dev)[0, 1]:.2f} | {check.shift:+.3f} "
                f"[{low:+.3f}, {high:+.3f}]{'' if check.used else ' refused'} | "
                f"{forced.coefficient:.3f} ({(forced.ci[1] - forced.ci[0]) / 2:.3f}) | "
                f"{check.coefficient_without:.3f} "
                f"({(check.ci_without[1] - check.ci_without[0]) / 2:.3f}) |"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+")
    parser.add_argument("--a", type=float, default=0.05, help="the placebo's known effect")
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--covariates",
        default="none,default",
        help="comma list: none, default (the mechanism's), or a covariate name",
    )
    parser.add_argument(
        "--small-sample",
        default="cr1,cr2",
        help="comma list of the cluster-robust interval's corrections to compare",
    )
    parser.add_argument(
        "--shifts",
        action="store_true",
        help="tabulate what each mechanism does to every recorded covariate",
    )
    args = parser.parse_args(argv)
    if args.shifts:
        shifts(args.data)
        return 0
    print(
        "| data | mechanism | covariate | interval | a | reported 95% CI | cluster bootstrap 95% | "
        "placebo coverage | placebo half-width |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for file_name, mechanism, group in mechanism_groups(args.data):
        block = pd.factorize(group["block"])[0]
        for choice in args.covariates.split(","):
            covariate = (
                DEFAULT_COVARIATES.get(mechanism)
                if choice == "default"
                else None
                if choice == "none"
                else choice
            )
            if choice == "default" and covariate is None:
                continue
            for kind in args.small_sample.split(","):
                rng = np.random.default_rng(args.seed)  # the same draws for every kind
                fit, check = fit_with_covariate(group, block, covariate, small_sample=kind)
                used = covariate if check and check.used else "none"
                if covariate and not (check and check.used):
                    used = f"none ({covariate} {check.reason.split(' (')[0].split(':')[0]})"
                low, high = cluster_bootstrap(
                    group, block, covariate if check and check.used else None, args.draws // 2, rng
                )
                coverage, width, _ = placebo(group, block, covariate, args.a, args.draws, rng, kind)
                dof = f"{fit.dof:.1f}" if kind == "cr2" else f"{fit.n_blocks - 1}"
                print(
                    f"| {file_name} | {mechanism} | {used} | {kind.upper()}, "
                    f"{dof} dof | {fit.coefficient:.4f} | [{fit.ci[0]:.4f}, {fit.ci[1]:.4f}] "
                    f"| [{low:.4f}, {high:.4f}] | {coverage:.1%} | {width:.4f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
