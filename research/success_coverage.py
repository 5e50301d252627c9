"""How often the success rate's 95 % interval covers the window's true success rate, on
simulated hash-sampled connections: the connection-level interval
(``appmon.successinterval``) beside a per-request one (Wilson on the final responses seen, as
if independent, with the finite-population correction), in one run.

Each row is one population of connections (final responses per connection geometric with mean
``mean``, 5 % of connections five times heavier; each request fails with ``fail``, and a share
``broken`` of the connections fails every request), sampled ``--trials`` times at ``share``;
the truth is the population's own success rate (docs/appmon-mechanisms.md, "The success rate's
interval").

    python -m research.success_coverage [--trials 400] [--seed 1]
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np

from cosample.appmon.successinterval import Z95, degrees_of_freedom, success_interval

GRID = {
    "connections": (1000, 3000),
    "mean": (1.0, 5.0, 30.0),
    "fail": (0.0, 0.01, 0.2),
    "broken": (0.0, 0.01, 0.05, 0.1, 0.3),
    "share": (0.1, 0.25, 0.5, 0.9),
}


def population(rng, connections: int, mean: float, fail: float, broken: float):
    final = rng.geometric(1 / mean, connections)
    final = np.where(rng.random(connections) < 0.05, final * 5, final)
    ok = rng.binomial(final, 1 - fail)
    return final, np.where(rng.random(connections) < broken, 0, ok)


def per_request(ok: int, final: int, share: float) -> tuple[float, float]:
    units, rate, z2 = final / (1 - share), ok / final, Z95**2
    centre = (rate + z2 / (2 * units)) / (1 + z2 / units)
    half = Z95 / (1 + z2 / units) * (rate * (1 - rate) / units + z2 / (4 * units**2)) ** 0.5
    return centre - half, centre + half


def coverages(final, ok, share: float, trials: int, rng) -> tuple[float, float, float]:
    """(connection-level, per-request, mean failing connections seen)."""
    truth = ok.sum() / final.sum()
    hits, naive, failing = 0, 0, 0
    for _ in range(trials):
        kept = rng.random(final.size) < share
        n, k = final[kept], ok[kept]
        failing += int((k < n).sum())
        if not n.sum():
            continue
        low, high = success_interval(
            int(k.sum()),
            int(n.sum()),
            (int((n * n).sum()), int((k * n).sum()), int((k * k).sum())),
            int(kept.sum()),
            share,
            degrees_of_freedom(zip(n.tolist(), k.tolist())),
        )
        hits += low <= truth <= high
        low, high = per_request(int(k.sum()), int(n.sum()), share)
        naive += low <= truth <= high
    return hits / trials, naive / trials, failing / trials


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("connections mean fail broken share failing_seen connection_level per_request")
    rows = []
    for values in itertools.product(*GRID.values()):
        row = dict(zip(GRID, values))
        final, ok = population(rng, row["connections"], row["mean"], row["fail"], row["broken"])
        if ok.sum() == final.sum():
            continue  # nothing failed: both intervals hold 1 trivially
        level, naive, failing = coverages(final, ok, row["share"], args.trials, rng)
        rows.append((failing, level, naive))
        print(
            f"{row['connections']} {row['mean']:g} {row['fail']:g} {row['broken']:g} "
            f"{row['share']:g} {failing:.1f} {level:.3f} {naive:.3f}",
            flush=True,
        )
    for label, keep in (
        ("all rows", lambda f: True),
        ("10-30 failing connections seen", lambda f: 10 <= f < 30),
        ("30+ failing connections seen", lambda f: f >= 30),
        ("under 10 failing connections seen", lambda f: f < 10),
    ):
        chosen = [(level, naive) for failing, level, naive in rows if keep(failing)]
        if chosen:
            level, naive = np.array(chosen).T
            print(
                f"{label}: {len(chosen)} rows; connection-level median {np.median(level):.3f}"
                f" min {level.min():.3f}, below 0.915 in {np.mean(level < 0.915):.0%};"
                f" per-request median {np.median(naive):.3f} min {naive.min():.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
