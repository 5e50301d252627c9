"""Where a controller cycle's CPU goes, by function: ``bench_controller``'s three cycles (publish,
keep, publish two phases after the traffic moved) in this process, with the functions below
timed (CPU seconds, summed over the cycles) and printed after the cycles' own step timings.

The functions are the publishing cycle's parts that its step timings do not split: the plan's
host table (``planfile._host_table``, and in it ``hostjson``'s rows and lists), the plan set's
phase 1 (``plan_set``, timed as ``publish.plan_set`` where the controller calls it), the slices (``slicebuild._compiled_views``, the HTTP
target's ``publish``), hashing and signing the publication (``signed``), the state's copy and
the report. A function called inside another is counted in both. The wrappers cost a call
each, nothing per host. Then each cycle beside its floor, as ``bench_controller`` measures it in
a process of its own on the same files (the snapshot read into its arrays, the exact solver
alone, the publication signed and written once: a two-phase cycle's, the plan set of cycle 3).

    python -m research.cycle_timers [--servers 1000000] [--directory] [--again N]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

#: (module, attribute path): what is timed.
TIMED = (
    ("cosample.controller.loop", "Controller._publish"),
    ("cosample.controller.loop", "Controller._record_report"),
    ("cosample.controller.publish", "HttpTarget.publish"),
    ("cosample.controller.publish", "DirectoryTarget.publish"),
    ("cosample.controller.publish", "compact_json"),
    ("cosample.controller.publish", "signed"),
    ("cosample.controller.store", "Store.record"),
    ("cosample.controller.store", "Store.record_report"),
    # looked up where the controller calls it (publish.py imports it at its top)
    ("cosample.controller.publish", "plan_set"),
    ("cosample.controller.publish", "build_slices"),
    ("cosample.plan.slicebuild", "_compiled_views"),
    ("cosample.planner.planfile", "_host_table"),
    ("cosample.controller.replan", "host_report"),
    ("cosample.planner.hostjson", "table"),
    ("cosample.planner.hostlists", "grouped"),
)


def install(timed: tuple[tuple[str, str], ...] = TIMED) -> dict[str, float]:
    """Wrap each function of ``timed`` where it is looked up; their CPU seconds accumulate in
    the returned dict (by ``module.attribute``)."""
    totals: dict[str, float] = defaultdict(float)
    for module_name, path in timed:
        owner: Any = importlib.import_module(module_name)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(
            owner,
            name,
            _timed(getattr(owner, name), f"{module_name.rsplit('.', 1)[-1]}.{path}", totals),
        )
    return totals


def _timed(function: Callable, label: str, totals: dict[str, float]) -> Callable:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            totals[label] += time.process_time() - started

    return wrapper


def run(servers: int, serve: bool = True, again: int = 0) -> tuple[list[dict], dict[str, float]]:
    """The three cycles on a fresh snapshot of ``servers``, in this process (memory kept as
    ``controller run`` keeps it), and ``again`` more two-phase publications
    (``bench_controller.again_snapshots``): their rows, each with its floors, and the timed
    functions' totals."""
    from cosample.controller.memory import keep_memory
    from research import bench_controller

    keep_memory()
    totals = install()
    folder = Path(tempfile.mkdtemp(prefix="cycle-timers-"))
    try:
        bench_controller.write_snapshot(
            servers, folder / "snap.json", datetime.now(timezone.utc).replace(microsecond=0)
        )
        rows = bench_controller.measure(servers, folder, "binary", True, serve, again)["rows"]
        floors = bench_controller._child(servers, folder, ".", None, "binary", "--floor")
        if floors is None:
            raise RuntimeError("the floor's process failed (its error above)")
        for row in rows:
            row.update(floors[0])
            if row["two_phase"]:  # every two-phase publication is a plan set like cycle 3's
                row[f"publish_floor_cpu_{row['cycle']}"] = floors[0]["publish_floor_cpu_3"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows, dict(totals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=1_000_000)
    parser.add_argument(
        "--directory",
        action="store_true",
        help="the folder target (a file per host's slice) instead of --serve's",
    )
    parser.add_argument(
        "--again",
        type=int,
        default=0,
        metavar="N",
        help="N more cycles after the three, each publishing two phases as the "
        "traffic moves back and forth (a running controller's heap)",
    )
    args = parser.parse_args(argv)
    if args.servers < 10:
        parser.error("--servers: at least 10")
    if args.again < 0:
        parser.error("--again: not negative")
    from research import bench_controller

    rows, totals = run(args.servers, serve=not args.directory, again=args.again)
    for row in rows:
        steps = " ".join(
            f"{key[:-4]} {row[key]:.3f}"
            for key in row
            if key.endswith("_cpu") and "_floor" not in key
        )
        print(
            f"cycle {row['cycle']} ({row['result']}{', two phases' if row['two_phase'] else ''})"
            f": CPU {row['cpu_seconds']:.3f} s: {steps}"
        )
    print("beside the floor:")
    print(bench_controller._beside_floors(rows))
    print("functions, CPU seconds over the cycles:")
    for label, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"  {seconds:8.3f}  {label}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
