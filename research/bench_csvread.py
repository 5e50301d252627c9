"""Reading a fleet's CSV files: the standard library's ``csv`` module against pandas and numpy.

Reads the servers file (name, capacity, tunnel address) and the traffic file (source,
destination, pps) written by ``bench_plancmd --csv-form`` into what the planner needs (name
strings, float arrays), each reader in its own fresh process (CPU time and peak memory of the
whole process, ``os.wait4``), best of ``--repeats``, the cyclic garbage collector off as in the
planner's CSV reading. pandas is in the ``all`` extra only, not
in the planner's install set (docs/dependencies.md, "Install sets"); numpy's ``loadtxt`` reads
mixed columns as strings.

    python -m research.bench_csvread ENVELOPE.json [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

READERS = ("csv", "pandas", "numpy")


def read(reader: str, envelope: Path) -> int:
    import gc

    import numpy as np

    gc.disable()  # as the planner reads CSV (planner/fleetcsv.py)

    document = orjson.loads(envelope.read_bytes())
    servers = envelope.parent / document["servers"]
    traffic = envelope.parent / document["traffic_pps"]
    if reader == "csv":
        import csv

        with open(servers, newline="") as stream:
            names, capacity, _ = zip(*list(csv.reader(stream))[1:])
        with open(traffic, newline="") as stream:
            sources, destinations, pps = zip(*list(csv.reader(stream))[1:])
        numbers = np.array(capacity, dtype=float), np.array(pps, dtype=float)
    elif reader == "pandas":
        import pandas as pd

        table = pd.read_csv(servers, dtype={"name": str, "tunnel_ip": str}, keep_default_na=False)
        flows = pd.read_csv(
            traffic, dtype={"source": str, "destination": str}, keep_default_na=False
        )
        names, sources, destinations = (
            list(table["name"]),
            list(flows["source"]),
            list(flows["destination"]),
        )
        numbers = table["capacity_pps"].to_numpy(float), flows["pps"].to_numpy(float)
    else:
        table = np.loadtxt(servers, dtype=str, delimiter=",", skiprows=1)
        flows = np.loadtxt(traffic, dtype=str, delimiter=",", skiprows=1)
        names, sources, destinations = (
            table[:, 0].tolist(),
            flows[:, 0].tolist(),
            flows[:, 1].tolist(),
        )
        numbers = table[:, 1].astype(float), flows[:, 2].astype(float)
    return len(names) + len(sources) + len(destinations) + sum(map(len, numbers))


def main(argv: list[str] | None = None) -> int:
    from research.bench_plancmd import measure

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envelope", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reader", choices=READERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader:
        read(args.reader, args.envelope)
        return 0
    best = {}
    for _ in range(args.repeats):
        for reader in READERS:
            cpu, mib = measure(
                [
                    sys.executable,
                    "-m",
                    "research.bench_csvread",
                    str(args.envelope),
                    "--reader",
                    reader,
                ]
            )
            best[reader] = min(best.get(reader, (cpu, mib)), (cpu, mib))
    print(f"{'reader':>8} {'CPU s':>7} {'MiB':>6} {'vs csv':>7}")
    for reader in READERS:
        cpu, mib = best[reader]
        print(f"{reader:>8} {cpu:>7.2f} {mib:>6.0f} {cpu / best['csv'][0]:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
