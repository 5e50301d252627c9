"""Controller cycle benchmark: read a snapshot, estimate, plan, decide, sign, write, at 10^4..10^6.

For each size a synthetic collector snapshot is written first (every server sends to itself and
to three random others, the planner benchmark's instance, ``bench_planner.random_datacentre``),
then a fresh process runs two controller cycles on it, as ``cosample controller run`` would:

1. the first cycle publishes (no plan in force yet): read and validate the snapshot, estimate,
   smooth, plan with the exact solver, judge, version, sign with ed25519, write atomically;
2. the second cycle reads a newer snapshot of the same traffic and judges the plan in force
   against the new candidate (no publication: nothing changed).

Each cycle's wall-clock time is split by step (the controller's own ``timings``), and so is its
CPU time (``<step>_cpu``: the machine is shared, wall-clock time includes waiting for a core); peak memory is the
process's peak resident set (``VmHWM``) with the size after imports beside it.
One process per size, so peaks do not carry over. ``--baseline-tree DIR`` runs the code of another
revision laid out in DIR (``python -m research.revision REV DIR`` from a clone) on the same
snapshot, alternating with the working tree's ``--repeats`` times, and prints their CPU-time
ratios: old and new side by side in one run, under the same load.

    python -m cosample.experiments.bench_controller [--sizes 10000 100000 1000000] [--csv FILE]
    python -m cosample.experiments.bench_controller --sizes 100000 --baseline-tree DIR --repeats 5
    python -m cosample.experiments.bench_controller --two-phase 100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.times import format_time
from cosample.collector.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION
from cosample.experiments.errors import ExperimentError
from cosample.experiments.othertree import checked

SIZES = (10_000, 100_000, 1_000_000)
REPOSITORY = Path(__file__).resolve().parents[1]
TARGET_SERVERS, TARGET_SECONDS = 100_000, 2.0
CHECK_UP_TO = 100_000  # the agents' reader on the published plan (10^6: minutes and gigabytes)


def write_snapshot(servers: int, path: Path, moment: datetime, seed: int = 0) -> None:
    """The planner benchmark's instance as a collector snapshot (columnar JSON) at ``path``."""
    from cosample.experiments.bench_planner import random_datacentre

    dc = random_datacentre(servers, seed=seed)
    own = np.round(dc.own_pps, 3)
    n = dc.size
    keys = dc.traffic_src.astype(np.int64) * n + dc.traffic_dst  # one entry per pair, as the
    order = np.argsort(keys, kind="stable")                       # collector writes them
    keys, values = keys[order], np.round(dc.traffic_pps[order], 3)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    pps = np.add.reduceat(values, starts)
    pairs = keys[starts]
    table = {"name": list(dc.names), "packets_per_s": own.tolist(),
             "packets_per_s_ci95_low": (own * 0.97).tolist(),
             "packets_per_s_ci95_high": (own * 1.03).tolist(),
             "bytes_per_s": (own * 800).tolist(), "bytes_per_s_ci95_low": (own * 770).tolist(),
             "bytes_per_s_ci95_high": (own * 830).tolist(), "samples": [300] * n,
             "samples_per_s": [10.0] * n, "local_samples": [300] * n, "mirrored_samples": [0] * n,
             "coverage": [0.5] * n, "last_sample_age_s": [0.0] * n}
    document = {"format": SNAPSHOT_FORMAT, "format_version": SNAPSHOT_VERSION, "collector": "bench",
                "time": format_time(moment), "window_s": 30.0, "plan": None,
                "servers": table,
                "traffic_pps": {"names": list(dc.names), "src": (pairs // n).tolist(),
                                "dst": (pairs % n).tolist(), "pps": pps.tolist()},
                "dropped": {}}
    path.write_text(json.dumps(document))
    capacity = {"capacity": dc.capacity_pps.tolist()}
    path.with_suffix(".capacity.json").write_text(json.dumps(capacity))


def measure(servers: int, folder: Path) -> dict:
    """Two cycles on the snapshot in ``folder`` (run in a process of its own)."""
    from cosample.plan.signing import generate_keypair
    from cosample.controller.loop import Controller, Settings
    from cosample.controller.publish import DirectoryTarget

    rss_imports = _rss_mb()
    inventory = _inventory(servers, folder)
    generate_keypair(folder / "key.pem", folder / "key.pub")
    snapshot = folder / "snap.json"
    started = datetime.fromisoformat(_snapshot_time(snapshot))
    clock = [started]
    settings = Settings((str(snapshot),), interval_s=30.0, tau_s=0.0, max_age_s=3600.0,
                        key=str(folder / "key.pem"))
    controller = Controller(inventory, settings, DirectoryTarget(folder / "pub"),
                            folder / "state", clock=lambda: clock[0])
    rows = []
    for cycle in (1, 2):
        if cycle == 2:  # a newer snapshot of the same traffic
            text = snapshot.read_text()
            old = format_time(started)
            clock[0] = started + timedelta(seconds=30)
            snapshot.write_text(text.replace(old, format_time(clock[0])))
        began, cpu = time.perf_counter(), time.process_time()
        status = controller.cycle()
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
        if status.result not in ("published", "kept"):
            raise RuntimeError(f"cycle {cycle}: {status.result}: {status.problems}")
        rows.append({"servers": servers, "cycle": cycle, "result": status.result,
                     "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3), **{k: round(v, 3) for k, v in
                                                      status.timings.items()}})
    plan_bytes = (folder / "pub" / "plan.json").stat().st_size
    peak = _rss_mb()  # before the agents' reader below
    accepted = _agents_accept(folder / "pub" / "plan.json") if servers <= CHECK_UP_TO else None
    from cosample.planner import planfile

    for row in rows:
        row.update(plan_mb=round(plan_bytes / 1e6, 1), code_path=planfile.__file__,
                   snapshot_mb=round(snapshot.stat().st_size / 1e6, 1),
                   rss_imports_mb=rss_imports, peak_rss_mb=peak, agents_accept=accepted,
                   load_average=round(os.getloadavg()[0], 1))
    return {"rows": rows}


def two_phase(servers: int, seed: int = 1) -> dict:
    """Time one two-phase publication (``render`` with the plan in force as ``previous``: the
    agents' transition) between two plans of the benchmark's instance, the second planned for
    traffic scaled by a random factor in [0.6, 1.4] per matrix entry. The plans' host tables
    are the controller's (``HostTable``): parsing them for the transition is part of the time."""
    from dataclasses import replace

    from cosample.controller.estimate import measure
    from cosample.controller.publish import render
    from cosample.controller.replan import replan
    from cosample.controller.smoothing import update
    from cosample.controller.source import parse

    with tempfile.TemporaryDirectory(prefix="bench-two-phase-") as folder:
        snapshot = Path(folder) / "snap.json"
        moment = datetime.now(timezone.utc).replace(microsecond=0)
        write_snapshot(servers, snapshot, moment)
        inventory = _inventory(servers, Path(folder))
        smoothed = update(None, measure(parse(snapshot.read_bytes(), str(snapshot)), inventory),
                          0.0, 0.0)
    valid = timedelta(hours=1)
    old = render(replan(inventory, smoothed, 0.15).document(moment, valid), 100, None).final
    rng = np.random.default_rng(seed)
    moved = replace(smoothed, pps=smoothed.pps * rng.uniform(0.6, 1.4, smoothed.pps.size))
    new = replan(inventory, moved, 0.15).document(moment, valid)
    from cosample.gcpause import gc_paused

    began, cpu = time.perf_counter(), time.process_time()
    with gc_paused():  # as in the controller's cycle
        rendered = render(new, 101, None, previous=old, now=moment, settle_s=120.0)
    return {"servers": servers, "two_phase_seconds": round(time.perf_counter() - began, 3),
            "two_phase_cpu_seconds": round(time.process_time() - cpu, 3),
            "plan_set_mb": round(len(rendered.data) / 1e6, 1), "versions": list(rendered.versions)}


def _inventory(servers: int, folder: Path):
    from cosample.controller.inventory import Inventory

    capacity = np.asarray(json.loads((folder / "snap.capacity.json").read_text())["capacity"])
    names = tuple(f"s{i}" for i in range(servers))
    extras = {name: {"bridge": "br-int", "tunnel_ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"}
              for i, name in enumerate(names)}
    return Inventory(f"bench-{servers}", names, capacity, np.full(servers, PAPER_ALPHA),
                     np.full(servers, PAPER_BETA), extras)


def _agents_accept(path: Path) -> bool | str:
    """Whether the agents' own reader accepts the published plan (after the timed cycles)."""
    from cosample.plan.document import parse_document
    from cosample.errors import CosampleError

    try:
        parse_document(path.read_bytes(), str(path.name))
    except CosampleError as exc:
        return str(exc)[:200]
    return True


def _snapshot_time(path: Path) -> str:
    with path.open() as handle:
        head = handle.read(400)
    start = head.index('"time": "') + 9
    return head[start:head.index('"', start)].replace("Z", "+00:00")


def _rss_mb() -> float:
    """The process's peak resident set (``VmHWM``): unlike ``ru_maxrss``, not inherited from the
    parent that wrote the snapshot (Linux carries the peak across fork and exec)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--csv", metavar="FILE", help="also write the rows as CSV")
    parser.add_argument("--baseline-tree", metavar="DIR",
                        help="also run the code laid out in DIR (`python -m research.revision "
                             "REV DIR`), alternating with this tree's")
    parser.add_argument("--repeats", type=int, default=1, help="runs per size (and code)")
    parser.add_argument("--two-phase", type=int, metavar="SERVERS",
                        help="time one two-phase publication at SERVERS instead")
    parser.add_argument("--child", nargs=2, metavar=("SERVERS", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.two_phase:
        print(json.dumps(two_phase(args.two_phase)))
        return 0
    if args.child:
        print(json.dumps(measure(int(args.child[0]), Path(args.child[1]))))
        return 0
    trees = {"new": None}
    if args.baseline_tree:
        try:
            trees = {"old": checked(args.baseline_tree), "new": None}
        except ExperimentError as exc:
            parser.error(str(exc))
    rows = []
    for servers in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-controller-") as folder:
            moment = datetime.now(timezone.utc).replace(microsecond=0)
            write_snapshot(servers, Path(folder) / "snap.json", moment)
            for repeat in range(args.repeats):
                for code, tree in trees.items():
                    measured = _child(servers, Path(folder), f"{code}-{repeat}", tree)
                    if measured is None:
                        return 1
                    for row in measured:
                        row.update(code=code, repeat=repeat)
                    rows += measured
                    print(_table(measured), flush=True)
    if args.csv:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.csv, index=False)
    if args.baseline_tree:
        print(_comparison(rows, Path(args.baseline_tree).name))
    at_target = [r for r in rows if r["servers"] == TARGET_SERVERS and r["code"] == "new"]
    for row in at_target:
        verdict = "meets" if row["seconds"] < TARGET_SECONDS else "misses"
        print(f"cycle {row['cycle']} at {TARGET_SERVERS:,} servers: {row['seconds']:.2f} s "
              f"({row['cpu_seconds']:.2f} s CPU), {verdict} the {TARGET_SECONDS:g} s goal")
    return 0


def _child(servers: int, folder: Path, name: str, tree: Path | None) -> list[dict] | None:
    """Both cycles in a fresh process and a fresh sub-folder ``name`` (no plan in force yet)
    on the snapshot in ``folder``, with the code of ``tree`` (None: this one)."""
    run = folder / name
    run.mkdir()
    for snapshot in folder.glob("snap*.json"):
        shutil.copyfile(snapshot, run / snapshot.name)
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "cosample.experiments.bench_controller",
                           "--child", str(servers), str(run)], capture_output=True,
                          text=True, timeout=1800, check=False, env=env, cwd=run)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["rows"]


def _comparison(rows: list[dict], baseline: str) -> str:
    """Per size and cycle: old and new CPU and wall seconds (median, range) and peak RSS, and
    the ratio of the medians."""
    lines = [f"old = {baseline}, new = this tree; median [min-max] of the runs"]
    for servers in dict.fromkeys(r["servers"] for r in rows):
        for cycle in (1, 2):
            cells = []
            medians = {}
            for code in ("old", "new"):
                mine = [r for r in rows if (r["servers"], r["cycle"], r["code"]) ==
                        (servers, cycle, code)]
                cpu = [r["cpu_seconds"] for r in mine]
                wall = [r["seconds"] for r in mine]
                medians[code] = statistics.median(cpu)
                cells.append(f"{code} CPU {medians[code]:.2f} [{min(cpu):.2f}-{max(cpu):.2f}] s, "
                             f"wall {statistics.median(wall):.2f} [{min(wall):.2f}-"
                             f"{max(wall):.2f}] s, peak RSS {max(r['peak_rss_mb'] for r in mine):.0f} MB")
            lines.append(f"{servers:>9,} cycle {cycle} ({mine[0]['result']}): " + "; ".join(cells)
                         + f"; new/old CPU {medians['new'] / medians['old']:.2f}")
    return "\n".join(lines)


def _table(rows: list[dict]) -> str:
    steps = ("read", "estimate", "plan", "decide", "document", "publish")
    keys = ("code", "servers", "cycle", "result", "seconds", "cpu_seconds", *steps,
            *(f"{step}_cpu" for step in steps), "plan_mb", "snapshot_mb", "rss_imports_mb",
            "peak_rss_mb", "agents_accept", "load_average")
    return "\n".join(" ".join(f"{k}={row.get(k, '-')}" for k in keys) for row in rows)


if __name__ == "__main__":
    sys.exit(main())
