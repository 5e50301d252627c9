"""Where a mechanism's run-to-run variation lives: per-run estimates beside per-run CPU parts
and contention, from a cpu-method measurements CSV.

    python -m research.costmodel_perrun docs/data/cpu-mirror_vxlan*.csv

For every file and mechanism (runs alternating rate 0 and one trial rate): the per-run effect
``log(c_on / c_off)`` (cost per packet of the rate-s phases over the rate-0 phases), the
correlation over runs of that effect with each part's extra CPU per packet (``d_ovs``,
``d_sender``, ``d_receiver``, ``d_ksoftirqd``, ``d_host_softirq``, relative to ``c0``) and with
the sender's run-queue wait (``wait_sender``, mean over the run's phases; ``wait0`` over its
rate-0 phases), and the 95% half-width of the runs' mean effect plain and adjusted for the mean
wait (a regression of the per-run effects on it: the intercept's t interval).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd
from scipy import stats

PARTS = ("ovs", "sender", "receiver", "ksoftirqd", "host_softirq")


def per_run(group: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for run, g in group.groupby("block"):
        on, off = g[g["rate"] > 0], g[g["rate"] == 0]
        c0 = float((off["cpu_counted"] / off["forwarded_pps"]).mean())
        row = {
            "run": run,
            "effect": np.log((on["cpu_counted"] / on["forwarded_pps"]).mean() / c0),
            "wait": g["wait_sender"].mean(),
            "wait0": off["wait_sender"].mean(),
        }
        for part in PARTS:
            column = f"cpu_{part}"
            row[f"d_{part}"] = (
                (on[column] / on["forwarded_pps"]).mean()
                - (off[column] / off["forwarded_pps"]).mean()
            ) / c0
        rows.append(row)
    return pd.DataFrame(rows)


def half_widths(runs: pd.DataFrame) -> tuple[float, float]:
    """95% half-width of the mean per-run effect, plain and adjusted for the mean wait."""
    y, n = runs["effect"].to_numpy(), len(runs)
    plain = stats.t.ppf(0.975, n - 1) * y.std(ddof=1) / np.sqrt(n)
    x = runs["wait"].to_numpy() - runs["wait"].mean()
    design = np.column_stack([np.ones(n), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    variance = residual @ residual / (n - 2) * np.linalg.inv(design.T @ design)[0, 0]
    return float(plain), float(stats.t.ppf(0.975, n - 2) * np.sqrt(variance))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+")
    args = parser.parse_args(argv)
    print(
        "| data | mechanism | runs | "
        + " | ".join(f"r(d_{p})" for p in PARTS)
        + " | r(wait) | r(wait0) | half-width plain | adjusted for wait |"
    )
    print("|---|---|---|" + "---|" * (len(PARTS) + 4))
    for path in args.data:
        frame = pd.read_csv(path)
        needed = {"cpu_counted", "wait_sender", *(f"cpu_{p}" for p in PARTS)}
        if not needed <= set(frame.columns):
            continue
        for mechanism, group in frame[frame["method"] == "cpu"].groupby("mechanism"):
            runs = per_run(group)
            if len(runs) < 4:
                continue
            r = runs.corr()["effect"]
            plain, adjusted = half_widths(runs)
            print(
                f"| {path.split('/')[-1]} | {mechanism} | {len(runs)} | "
                + " | ".join(f"{r[f'd_{p}']:+.2f}" for p in PARTS)
                + f" | {r['wait']:+.2f} | {r['wait0']:+.2f} | {plain:.3f} | {adjusted:.3f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
