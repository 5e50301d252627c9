"""``cosample plan F -o plan.json`` as a whole process, beside a floor, at 10^4..10^6 servers.

The floor (``--floor FILE``, run as its own process) is the least any planning command must
do: read the same description with orjson, build the arrays (names, capacities, the traffic as
index arrays) and run the exact solver on them, with no validation, no plan, no output and the
cyclic garbage collector off (``--floor-csv``: the same from the CSV form, read by the ``csv``
module). Both
run as child processes, one after the other, alternating, and each is measured by
``os.wait4``: CPU (user + system) and peak resident memory of the whole process, interpreter
start-up and imports included; the command's wall-clock time (what a user waits for) is printed
beside the 1-minute load average, since on a shared machine it includes waiting for a core. The descriptions are random fleets (``bench_planner``'s traffic:
each server sends to itself and to 3 random peers) with a tunnel address per server, written
once per size as JSON and, with ``--csv-form``, also as the columnar CSV form
(docs/formats.md), planned by the same command. Medians of ``--repeats`` runs (1 at 10^6 unless
asked: one 10^6 run takes a minute of a shared machine); every child has a time limit.

    python -m research.bench_plancmd [--sizes 10000 100000 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from research import ROOT

SIZES = (10_000, 100_000, 1_000_000)
CHILD_TIMEOUT_S = 900.0


def fleet(servers: int, seed: int = 0, peers: int = 3):
    """Names, capacities, tunnel addresses and traffic (src, dst, pps) of a random fleet."""
    from cosample.experiments.bench_planner import random_datacentre

    dc = random_datacentre(servers, seed=seed, peers=peers)
    k = np.arange(servers)
    tunnel = [
        f"10.{a}.{b}.{c}"
        for a, b, c in zip(
            (k >> 16 & 255).tolist(), (k >> 8 & 255).tolist(), (k & 255 | 1).tolist()
        )
    ]
    return dc, tunnel


def write_json(servers: int, path: Path, seed: int = 0) -> None:
    """The fleet as a JSON description (docs/formats.md)."""
    dc, tunnel = fleet(servers, seed)
    names = dc.names
    traffic: dict[str, dict[str, float]] = {}
    for s, d, v in zip(dc.traffic_src.tolist(), dc.traffic_dst.tolist(), dc.traffic_pps.tolist()):
        row = traffic.setdefault(names[s], {})
        row[names[d]] = row.get(names[d], 0.0) + round(v, 3)
    document = {
        "name": f"bench-{servers}",
        "cost": {"alpha": PAPER_ALPHA, "beta": PAPER_BETA},
        "servers": [
            {"name": name, "capacity_pps": round(c, 1), "tunnel_ip": ip}
            for name, c, ip in zip(names, dc.capacity_pps.tolist(), tunnel)
        ],
        "traffic_pps": traffic,
    }
    path.write_bytes(orjson.dumps(document))


def write_csv_form(description: Path, envelope: Path) -> None:
    """The same fleet as an envelope naming two CSV files beside it (docs/formats.md)."""
    import csv

    document = orjson.loads(description.read_bytes())
    stem = envelope.stem
    with open(envelope.parent / f"{stem}-servers.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["name", "capacity_pps", "tunnel_ip"])
        writer.writerows(
            [s["name"], s["capacity_pps"], s["tunnel_ip"]] for s in document["servers"]
        )
    with open(envelope.parent / f"{stem}-traffic.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["source", "destination", "pps"])
        writer.writerows(
            [source, destination, pps]
            for source, row in document["traffic_pps"].items()
            for destination, pps in row.items()
        )
    envelope.write_bytes(
        orjson.dumps(
            {
                "name": document["name"],
                "cost": document["cost"],
                "servers": f"{stem}-servers.csv",
                "traffic_pps": f"{stem}-traffic.csv",
            }
        )
    )


def floor_csv(path: str) -> None:
    """The CSV form's floor: the csv module reads both files, numpy parses the numbers."""
    import csv

    envelope = Path(path)
    document = orjson.loads(envelope.read_bytes())
    with open(envelope.parent / document["servers"], newline="") as stream:
        rows = list(csv.reader(stream))[1:]
    names, capacity, _ = zip(*rows)
    with open(envelope.parent / document["traffic_pps"], newline="") as stream:
        sources, destinations, pps = zip(*list(csv.reader(stream))[1:])
    index = dict(zip(names, range(len(names))))
    _solve(
        names,
        np.array(capacity, dtype=float),
        document["cost"],
        list(map(index.__getitem__, sources)),
        list(map(index.__getitem__, destinations)),
        np.array(pps, dtype=float),
    )


def _solve(names, capacity, cost, src, dst, pps) -> None:
    from cosample.planner.choices import EXACT
    from cosample.planner.datacentre import DataCentre
    from cosample.planner.solvers import solve

    dc = DataCentre(
        names=tuple(names),
        capacity_pps=capacity,
        alpha=np.full(len(names), float(cost["alpha"])),
        beta=np.full(len(names), float(cost["beta"])),
        traffic_src=np.array(src, dtype=np.int64),
        traffic_dst=np.array(dst, dtype=np.int64),
        traffic_pps=np.asarray(pps),
    )
    solution = solve(dc, EXACT)
    print(f"floor: {len(names)} servers, objective {solution.objective:.6g}")


def floor(path: str) -> None:
    """Read with orjson, build the arrays, solve: the least a planning command does."""
    document = orjson.loads(Path(path).read_bytes())
    servers = document["servers"]
    names = tuple([s["name"] for s in servers])
    index = {name: k for k, name in enumerate(names)}
    capacity = np.array([s["capacity_pps"] for s in servers], dtype=float)
    src, dst, pps = [], [], []
    for origin, row in document["traffic_pps"].items():
        src += [index[origin]] * len(row)
        dst += map(index.__getitem__, row)
        pps += row.values()
    _solve(names, capacity, document["cost"], src, dst, np.array(pps))


def measure(argv: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and peak memory (MiB) of one child process."""
    return measure_wall(argv)[:2]


def measure_wall(argv: list[str]) -> tuple[float, float, float]:
    """CPU seconds, peak memory (MiB) and wall-clock seconds of one child process."""
    started = time.monotonic()
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT
    ) as child:
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                child.kill()
                os.wait4(child.pid, 0)
                raise SystemExit(f"{argv}: over {CHILD_TIMEOUT_S:.0f} s, stopped")
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
        error = child.stderr.read().decode(errors="replace")
    if child.returncode:
        raise SystemExit(f"{' '.join(argv)}: exit {child.returncode}: {error.strip()[-400:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--repeats", type=int, default=3, help="runs per size below 10^6")
    parser.add_argument("--repeats-million", type=int, default=1, help="runs at 10^6 and up")
    parser.add_argument("--csv-form", action="store_true", help="also plan the CSV form")
    parser.add_argument("--floor", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--floor-csv", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", metavar="DIR", help="keep the descriptions here")
    args = parser.parse_args(argv)
    if args.floor or args.floor_csv:
        gc.disable()  # the least: no collector rescanning the parsed rows
        floor(args.floor) if args.floor else floor_csv(args.floor_csv)
        return 0
    python = sys.executable
    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
        work = Path(args.workdir or scratch)
        print(
            f"{'servers':>9} {'form':>5} {'plan CPU s':>11} {'plan MiB':>9} {'floor CPU s':>12} "
            f"{'floor MiB':>10} {'CPU ratio':>10} {'plan wall s':>11} {'load':>6}",
            flush=True,
        )
        for n in args.sizes:
            description = work / f"fleet-{n}.json"
            if not description.exists():
                write_json(n, description)
            forms = [("json", description, "--floor")]
            if args.csv_form:
                envelope = work / f"fleet-{n}-csv.json"
                if not envelope.exists():
                    write_csv_form(description, envelope)
                forms.append(("csv", envelope, "--floor-csv"))
            repeats = args.repeats if n < 1_000_000 else args.repeats_million
            floors: dict[str, list[tuple[float, float]]] = {form: [] for form, *_ in forms}
            plans: dict[str, list[tuple[float, float, float]]] = {form: [] for form, *_ in forms}
            for _ in range(repeats):
                for form, path, flag in forms:
                    floors[form].append(
                        measure([python, "-m", "research.bench_plancmd", flag, str(path)])
                    )
                    plans[form].append(
                        measure_wall(
                            [
                                python,
                                "-m",
                                "cosample",
                                "plan",
                                str(path),
                                "-o",
                                str(work / f"plan-{n}.json"),
                                "--plan-version",
                                "1",
                            ]
                        )
                    )
            for form, runs in plans.items():
                floor_cpu = statistics.median(c for c, _ in floors[form])
                floor_mib = max(m for _, m in floors[form])
                cpu = statistics.median(c for c, _, _ in runs)
                mib = max(m for _, m, _ in runs)
                wall = statistics.median(w for _, _, w in runs)
                print(
                    f"{n:>9} {form:>5} {cpu:>11.2f} {mib:>9.0f} {floor_cpu:>12.2f} "
                    f"{floor_mib:>10.0f} {cpu / floor_cpu:>9.1f}x {wall:>11.1f} "
                    f"{os.getloadavg()[0]:>6.1f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
