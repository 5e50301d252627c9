"""The plan document's CPU with the compiled host table writer and without it, side by side.

For each size, one process plans ``bench_planner.random_datacentre(N, seed=0)``, with the
inventory's extras of the controller benchmark (``bridge``, one value throughout, and
``tunnel_ip``, one per server: ``bench_controller._inventory``), with the exact solver as the
controller does (``solve(dc, "exact", margin=0.0)``) and then builds the document
the controller publishes (``build_plan(..., lazy_hosts=True, report=False)``, its host table kept
as bytes) ``--repeats`` times with each writer, alternating: ``jsonpieces.compiled`` (the C writer,
planner/_hostjson.c) and the same with ``jsonpieces.compiled = None`` (every column serialised in
Python). It prints the median CPU of each, their ratio, and whether the two documents' host
tables are the same bytes (they must be). ``--baseline REV`` times a third writer in the same
rounds: ``planner/planfile.py`` and ``planner/hostjson.py`` as they are at the git revision REV
(read with ``git show`` from this checkout; the rest of the package as it is here).

    python -m research.bench_hostjson --sizes 100000 1000000 --repeats 5 \
        --baseline 0a1f3a2
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

from cosample.experiments.bench_planner import random_datacentre
from cosample.planner import jsonpieces, planfile
from cosample.planner.extras import ExtraColumns
from cosample.planner.solvers import solve


def baseline(revision: str) -> types.ModuleType:
    """``planfile`` as it is at ``revision``, with that revision's ``hostjson``."""
    root = Path(__file__).resolve().parents[1]

    def load(name: str, path: str) -> types.ModuleType:
        source = subprocess.run(
            ["git", "show", f"{revision}:{path}"],
            cwd=root,
            check=True,
            capture_output=True,
            timeout=60,
        ).stdout
        module = types.ModuleType(name)
        module.__file__ = f"{revision}:{path}"
        sys.modules[name] = module  # dataclasses and typing look their module up
        try:
            exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the revision's own source
        finally:
            del sys.modules[name]
        return module

    package = sys.modules["cosample.planner"]
    old_hostjson = load("cosample.planner.hostjson_baseline", "planner/hostjson.py")
    current = package.hostjson
    package.hostjson = old_hostjson  # what ``from cosample.planner import hostjson`` finds
    try:
        return load("cosample.planner.planfile_baseline", "planner/planfile.py")
    finally:
        package.hostjson = current


def measure(servers: int, repeats: int, revision: str | None = None) -> dict:
    """Median CPU seconds of ``build_plan`` with each writer, alternating, and their ratio."""
    dc = random_datacentre(servers, seed=0)
    dc = dataclasses.replace(
        dc,
        server_extras=ExtraColumns(
            dc.names,
            {
                "bridge": ["br-int"] * servers,
                "tunnel_ip": [
                    f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(servers)
                ],
            },
        ),
    )
    solution = solve(dc, "exact", margin=0.0)
    compiled = jsonpieces.compiled
    writers = [("compiled", compiled, planfile), ("python", None, planfile)]
    if revision is not None:
        writers.append(("baseline", compiled, baseline(revision)))
    seconds: dict[str, list[float]] = {label: [] for label, _, _ in writers}
    tables: dict[str, bytes] = {}
    try:
        for _ in range(repeats):
            for label, writer, module in writers:
                jsonpieces.compiled = writer
                cpu = time.process_time()
                plan = module.build_plan(dc, solution, lazy_hosts=True, report=False)
                seconds[label].append(time.process_time() - cpu)
                tables[label] = b"".join(plan["hosts"].chunks)
    finally:
        jsonpieces.compiled = compiled
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    row = {
        "servers": servers,
        "compiled_s": round(medians["compiled"], 3),
        "python_s": round(medians["python"], 3),
        "ratio": round(medians["python"] / medians["compiled"], 2),
        "same_bytes": len(set(tables.values())) == 1,
        "table_mb": round(len(tables["python"]) / 1e6, 1),
    }
    if revision is not None:
        row["baseline_s"] = round(medians["baseline"], 3)
        row["baseline_ratio"] = round(medians["baseline"] / medians["compiled"], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also time planfile.py and hostjson.py of this git revision",
    )
    args = parser.parse_args(argv)
    if jsonpieces.compiled is None:
        parser.error("the compiled writer (cosample.planner._hostjson) is not built")
    print(
        "servers  build_plan CPU compiled  python  python/compiled"
        + ("  baseline  baseline/compiled" if args.baseline else "")
        + "  same bytes  table MB"
    )
    for servers in args.sizes:
        row = measure(servers, args.repeats, args.baseline)
        extra = (
            f"  {row['baseline_s']:>8.3f}  {row['baseline_ratio']:>17.2f}" if args.baseline else ""
        )
        print(
            f"{row['servers']:>7}  {row['compiled_s']:>22.3f}  {row['python_s']:>6.3f}"
            f"  {row['ratio']:>15.2f}{extra}  {str(row['same_bytes']):>10}"
            f"  {row['table_mb']:>8}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
