"""The plan document's CPU with the compiled host table writer and without it, side by side.

For each size, one process plans ``bench_planner.random_datacentre(N, seed=0)`` with the exact
solver as the controller does (``solve(dc, "exact", margin=0.0)``) and then builds the document
the controller publishes (``build_plan(..., lazy_hosts=True, report=False)``, its host table kept
as bytes) ``--repeats`` times with each writer, alternating: ``hostjson.compiled`` (the C writer,
planner/_hostjson.c) and the same with ``hostjson.compiled = None`` (every column serialised in
Python). It prints the median CPU of each, their ratio, and whether the two documents' host
tables are the same bytes (they must be).

    python -m cosample.experiments.bench_hostjson --sizes 100000 1000000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from cosample.experiments.bench_planner import random_datacentre
from cosample.planner import hostjson, planfile
from cosample.planner.solvers import solve


def measure(servers: int, repeats: int) -> dict:
    """Median CPU seconds of ``build_plan`` with each writer, alternating, and their ratio."""
    dc = random_datacentre(servers, seed=0)
    solution = solve(dc, "exact", margin=0.0)
    compiled = hostjson.compiled
    seconds: dict[str, list[float]] = {"compiled": [], "python": []}
    tables: dict[str, bytes] = {}
    try:
        for _ in range(repeats):
            for label, writer in (("compiled", compiled), ("python", None)):
                hostjson.compiled = writer
                cpu = time.process_time()
                plan = planfile.build_plan(dc, solution, lazy_hosts=True, report=False)
                seconds[label].append(time.process_time() - cpu)
                tables[label] = b"".join(plan["hosts"].chunks)
    finally:
        hostjson.compiled = compiled
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    return {"servers": servers, "compiled_s": round(medians["compiled"], 3),
            "python_s": round(medians["python"], 3),
            "ratio": round(medians["python"] / medians["compiled"], 2),
            "same_bytes": tables["compiled"] == tables["python"],
            "table_mb": round(len(tables["python"]) / 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if hostjson.compiled is None:
        parser.error("the compiled writer (cosample.planner._hostjson) is not built")
    print("servers  build_plan CPU compiled  python  python/compiled  same bytes  table MB")
    for servers in args.sizes:
        row = measure(servers, args.repeats)
        print(f"{row['servers']:>7}  {row['compiled_s']:>22.3f}  {row['python_s']:>6.3f}"
              f"  {row['ratio']:>15.2f}  {str(row['same_bytes']):>10}  {row['table_mb']:>8}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
