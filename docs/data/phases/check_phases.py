"""Checks of the shorter-phase sFlow data (docs/costmodel.md, "Shorter phases for sFlow").

Per calibration CSV: phases per run, seconds counted per run; whether every counted "on" phase
sampled (sFlow samples at the collector over packets forwarded: median, 1st percentile, least)
and no "off" phase did; the phases' residual sd of log cost after each run's and rate's mean,
and its autocorrelation at lags 1-3 within runs; ``a`` from the first and the second half of
each run's phases; the cost per packet at rate 0 (c0) and ovs-vswitchd's part of it (medians,
ns). Run from the repository root:

    .venv/bin/python docs/data/phases/check_phases.py docs/data/phases/*/*.csv
"""

import sys

import numpy as np
import pandas as pd


def ratio_a(frame: pd.DataFrame) -> float:
    log_cost = np.log(frame["cost_ns_per_packet"])
    on = frame["rate"] > 0
    return float(np.exp(log_cost[on].mean() - log_cost[~on].mean()) - 1)


def autocorrelation(frame: pd.DataFrame, lag: int) -> float:
    num = den = 0.0
    for _, run in frame.groupby("block"):
        r = run["residual"].to_numpy()
        num += float(r[lag:] @ r[:-lag])
        den += float(r @ r)
    return num / den


def main(paths: list[str]) -> None:
    print(
        "data | phases/run | counted s/run | on: samples/forwarded median, 1%, least | "
        "off: most | residual sd | lag 1, 2, 3 | a first half, second half | c0 | ovs part of c0"
    )
    for path in paths:
        f = pd.read_csv(path).sort_values(["block", "phase"])
        on, off = f[f["rate"] > 0], f[f["rate"] == 0]
        sampled = on["copies_pps"] / on["forwarded_pps"]
        f["residual"] = np.log(f["cost_ns_per_packet"])
        f["residual"] -= f.groupby(["block", "rate"])["residual"].transform("mean")
        f["half"] = f["phase"] >= f.groupby("block")["phase"].transform("max") / 2
        halves = [ratio_a(f[f["half"] == h]) for h in (False, True)]
        lags = ", ".join(f"{autocorrelation(f, k):+.2f}" for k in (1, 2, 3))
        ovs = off["cpu_ovs"] * 1e9 / off["forwarded_pps"]
        print(
            f"{path.rsplit('/', 1)[-1]} | {len(f) / f['block'].nunique():.0f} | "
            f"{f.groupby('block')['duration_s'].sum().mean():.2f} | "
            f"{sampled.median():.3f}, {sampled.quantile(0.01):.3f}, {sampled.min():.3f} | "
            f"{(off['copies_pps'] / off['forwarded_pps']).max():.3f} | "
            f"{f['residual'].std():.3f} | {lags} | {halves[0]:.3f}, {halves[1]:.3f} | "
            f"{off['cost_ns_per_packet'].median():,.0f} | {ovs.median():,.0f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
