"""A publication's slice views alone: building them (``_slices.views``), the slices around them
(``build_slices``), and freeing them, on a two-phase plan set of the controller benchmark's
instance, beside their floor and, with ``--baseline-tree``, beside another revision's code.

The plan set is made once (``bench_controller._two_plans``: the plan in force and the next,
planned for moved traffic; ``render`` joins them as the controller publishes them), and its two
host tables are written as the bytes the controller keeps (``HostTable``). Then each timing runs
in a fresh process (memory kept for reuse as ``controller run`` keeps it, garbage collector
paused as in its cycle), alternating between this tree and the baseline ``--repeats`` times:

* ``views``: ``slicebuild._compiled_views`` on the two tables (the compiled builder: every
  host's view and leaf hash), and ``views_free``: letting its result go;
* ``build``: ``build_slices`` (the views, the Merkle tree, the head), and ``build_free``;
* ``floor``: the views' bytes copied once and hashed by hashlib (this tree only);
* ``kept_mb``, ``build_peak_mb``: what the slices keep, and the build's peak, as tracemalloc
  traces them (the compiled builder allocates through Python), in a build after the timings.

Each is timed three times per process: on the plan set, ``set_first`` on a fresh heap (its page
faults), ``set_again`` on the memory the first let go, as a running controller builds each
publication's slices; then ``plan``: its second plan alone (a one-plan publication).

    python -m research.bench_views [--servers 1000000] [--repeats 3]
    python -m research.bench_views --baseline-tree DIR   # DIR: research.revision
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def make_plan_set(servers: int, folder: Path) -> int:
    """The plan set's two host tables (``t0``, ``t1``) and the rest of its plans (``heads``)
    in ``folder``; returns its hosts."""
    from cosample.controller.publish import render
    from research.bench_controller import _two_plans

    old, new, moment = _two_plans(servers, seed=1)
    rendered = render(new, 101, None, previous=old, now=moment, settle_s=120.0)
    heads = []
    for k, plan in enumerate(rendered.plans):
        (folder / f"t{k}").write_bytes(plan["hosts"].json)
        heads.append({key: value for key, value in plan.items() if key != "hosts"})
    (folder / "heads").write_bytes(json.dumps(heads, default=str).encode())
    return servers


class _Table:
    """A host table as the controller's ``HostTable`` keeps it: its bytes."""

    def __init__(self, data: bytes) -> None:
        self.json = data


def child(folder: Path) -> dict:
    """The timings in this process, with whatever ``cosample`` it imports."""
    from cosample.plan import slicebuild

    heads = json.loads((folder / "heads").read_text())
    tables = [_Table((folder / f"t{k}").read_bytes()) for k in range(len(heads))]
    plans = [{**head, "hosts": table} for head, table in zip(heads, tables)]
    cpu = time.process_time
    out: dict = {}
    rounds = (("set_first", plans), ("set_again", plans), ("plan", plans[-1:]))
    for label, chosen in rounds:
        began = cpu()
        built = slicebuild._compiled_views([plan["hosts"] for plan in chosen])
        out[f"views_{label}"] = cpu() - began
        if built is None:
            raise SystemExit("the compiled builder declined the tables (or is not built)")
        views = built[1]
        if label != "set_first" and hasattr(views, "buffer"):
            began = cpu()
            hashlib.sha256(bytes(memoryview(views.buffer))).digest()
            out[f"floor_{label}"] = cpu() - began
        out[f"{label[:4].strip('_')}_views_mb"] = (
            len(views.buffer) if hasattr(views, "buffer") else sum(map(len, views))
        ) / 1e6
        began = cpu()
        del built, views
        out[f"views_free_{label}"] = cpu() - began
        began = cpu()
        slices = slicebuild.build_slices(chosen, None)
        out[f"build_{label}"] = cpu() - began
        out["hosts"] = len(slices)
        began = cpu()
        del slices
        out[f"build_free_{label}"] = cpu() - began
    tracemalloc.start()  # after the timings: it slows every allocation
    slices = slicebuild.build_slices(plans, None)
    kept, peak = tracemalloc.get_traced_memory()  # with the slices still held
    tracemalloc.stop()
    del slices
    out["kept_mb"], out["build_peak_mb"] = kept / 1e6, peak / 1e6
    return {
        key: round(value, 3) if isinstance(value, float) else value for key, value in out.items()
    }


def _run(folder: Path, tree: Path | None) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    # this file as a script: a baseline tree has no bench_views, and imports its own cosample
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(folder)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=env,
        cwd=folder,
    )
    if done.returncode != 0:
        raise SystemExit(f"{'baseline' if tree else 'this tree'}: {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="processes per code")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="DIR",
        help="another revision laid out by research.revision (its compiled "
        "parts built in DIR/source: setup.py build_ext --inplace)",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # a process of its own: its memory kept as ``controller run`` keeps it
        from cosample.controller.memory import keep_memory

        keep_memory()
        gc.disable()  # as in the controller's cycle
        print(json.dumps(child(args.child)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-views-") as name:
        folder = Path(name)
        make_plan_set(args.servers, folder)
        codes = {
            "this tree": None,
            **({"baseline": args.baseline_tree} if args.baseline_tree else {}),
        }
        rows: dict[str, list[dict]] = {code: [] for code in codes}
        for _ in range(args.repeats):
            for code, tree in codes.items():
                rows[code].append(_run(folder, tree))
                print(code, json.dumps(rows[code][-1]), flush=True)
    keys = [
        key for key in rows["this tree"][0] if key not in ("hosts", "set_views_mb", "plan_views_mb")
    ]
    unit = {key: "MB" if key.endswith("_mb") else "s" for key in keys}
    first = rows["this tree"][0]
    print(
        f"\n{args.servers:,} servers; views: two-phase plan set (set) {first['set_views_mb']:.0f} MB,"
        f" its second plan alone (plan) {first['plan_views_mb']:.0f} MB; CPU seconds (MB where"
        f" said), median of {args.repeats} processes each:"
    )
    for key in keys:
        line = f"  {key + ' (' + unit[key] + ')':26}" + "".join(
            f" {code} {statistics.median(r[key] for r in runs if key in r):7.3f}"
            for code, runs in rows.items()
            if all(key in r for r in runs)
        )
        if len(codes) > 1 and all(key in r for r in rows["baseline"]):
            new = statistics.median(r[key] for r in rows["this tree"])
            old = statistics.median(r[key] for r in rows["baseline"])
            line += f"  (baseline/this {old / new:.2f}x)" if new > 0 else ""
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
