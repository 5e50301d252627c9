"""Per-host plan slices: what the publisher pays to build them, what an agent downloads.

For each size a fresh process plans the controller benchmark's instance (``bench_controller``:
every server sends to itself and three random others; the exact solver; the controller's own
plan document with its host table kept as bytes) and then, in one run, side by side:

* **publisher CPU**: ``render`` (the whole plan as compact JSON, signed: what every
  publication costs without slices) beside building every host's slice (``Rendered.slices``:
  each host's view cut from the host tables, hashed into a Merkle tree, the head signed once),
  beside its floor (the views' bytes copied once and hashed by hashlib: writing and hashing
  that many bytes, with no cutting at all), beside the Python builder (``slicebuild``'s fallback
  without the compiled one, at sizes up to ``--python-up-to``), and
  beside putting every slice document together once (what ``DirectoryTarget`` writes, or what
  the HTTP target sends if every agent asks once), and beside what signing every slice on its
  own would cost instead of one head (2,000 signatures timed). ``--two-phase`` does the same for a
  two-phase plan set (the second plan for traffic scaled by a random factor per entry), at
  sizes up to ``--two-phase-up-to`` (10^5: the 10^6 plan set takes 11 GB before any slice);
* **files**: ``DirectoryTarget.publish`` of the plan alone and with every slice as a file
  (sizes up to ``--directory-up-to``);
* **memory**: the process's peak resident set before and after the slices were built, and the
  build's own as tracemalloc traces it (the compiled builder allocates through Python too): its
  peak and what the slices keep;
* **an agent's bytes**, through a byte-counting relay in front of the controller's own HTTP
  target, for three hosts (the one with the most peers, a seeded random one, the first): the
  first poll of its slice, an unchanged poll (304), and the poll after the next publication,
  each beside the whole plan's bytes; and the agent's CPU to verify and read its slice;
* **slice sizes** over every host: median, 99th percentile and largest.

    python -m research.bench_slices --sizes 10000 100000 1000000 [--two-phase]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from research import ROOT

SIZES = (10_000, 100_000, 1_000_000)


def _plans(servers: int, folder: Path, two_phase: bool) -> tuple[dict, dict | None, datetime]:
    """The controller's plan document for the instance (and one for moved traffic)."""
    from dataclasses import replace

    from cosample.controller.estimate import measure
    from cosample.controller.replan import replan
    from cosample.controller.smoothing import update
    from cosample.controller.source import parse
    from research.bench_controller import _inventory, write_snapshot

    snapshot = folder / "snap.json"
    moment = datetime.now(timezone.utc).replace(microsecond=0)
    write_snapshot(servers, snapshot, moment)
    inventory = _inventory(servers, folder)
    smoothed = update(
        None, measure(parse(snapshot.read_bytes(), str(snapshot)), inventory), 0.0, 0.0
    )
    valid = timedelta(hours=1)
    plan = replan(inventory, smoothed, 0.15).document(moment, valid)
    moved = None
    if two_phase:
        rng = np.random.default_rng(1)
        scaled = replace(smoothed, pps=smoothed.pps * rng.uniform(0.6, 1.4, smoothed.pps.size))
        moved = replan(inventory, scaled, 0.15).document(moment, valid)
    return plan, moved, moment


def _cpu(work):
    began = time.process_time()
    result = work()
    return result, time.process_time() - began


def _signing_each(key: Path, sizes: list[int], count: int = 2000) -> float:
    """CPU to sign every slice on its own instead (the alternative to one signed head):
    ``count`` signatures of a median-sized document timed, times the number of hosts."""
    from cosample.plan.signing import load_private_key

    private = load_private_key(key)
    document = b"x" * int(statistics.median(sizes))
    began = time.process_time()
    for _ in range(count):
        private.sign(document)
    return (time.process_time() - began) / count * len(sizes)


def _directory(rendered, folder: Path) -> dict:
    """``DirectoryTarget.publish`` with and without slices (wall and CPU seconds; the slices
    themselves are already built): what writing 10^5 small files costs."""
    from cosample.controller.publish import DirectoryTarget

    out = {}
    for label, slices in (("whole", False), ("with_slices", True)):
        target = DirectoryTarget(folder / label, slices=slices)
        began, cpu = time.perf_counter(), time.process_time()
        target.publish(rendered)
        out[f"directory_{label}_s"] = round(time.perf_counter() - began, 3)
        out[f"directory_{label}_cpu_s"] = round(time.process_time() - cpu, 3)
    return out


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _traced_mb(work) -> tuple[float, float]:
    """Memory that ``work`` allocates through Python's allocators (the compiled builder's too),
    traced by tracemalloc: its peak and what its result keeps, in MB. The resident set cannot
    tell: the planning before it freed more than the build takes, and the build reuses that."""
    import tracemalloc

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = work()
        kept, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return round((peak - base) / 1e6, 1), round((kept - base) / 1e6, 1)


def _agent_bytes(rendered, next_rendered, hosts: list[str], public: Path) -> list[dict]:
    """Bytes through a relay for each host's polls of its slice, and its CPU to read it."""
    from cosample.controller.publish import HttpTarget
    from cosample.plan.slices import read_slice, slice_location
    from cosample.plan.source import fetch
    from research.bench_fetch import _Relay

    target = HttpTarget("127.0.0.1", 0, dict, lambda: b"")
    rows = []
    try:
        target.publish(rendered)
        relay = _Relay(target.address)
        plan_url = f"http://127.0.0.1:{relay.port}/plan.json"
        previous: dict = {}
        for stage in ("first poll", "unchanged poll", "next publication"):
            if stage == "next publication":
                target.publish(next_rendered)
            for host in hosts:
                url = slice_location(plan_url, host)
                before, began = relay.down, time.process_time()
                fetched = fetch(url, timeout_s=30, previous=previous.get(host))
                plans = read_slice(fetched.data, host, str(public), source=url)
                cpu = time.process_time() - began
                time.sleep(0.1)  # the relay's threads finish counting
                previous[host] = fetched
                rows.append(
                    {
                        "stage": stage,
                        "host": host,
                        "bytes": relay.down - before,
                        "agent_cpu_ms": round(cpu * 1e3, 2),
                        "versions": [plan.version for plan in plans],
                    }
                )
    finally:
        target.close()
    return rows


def _python_slices(plans) -> None:
    """The views and leaf hashes as the Python builder makes them (``slicebuild``'s fallback
    when the compiled one is not built), from the same plans (parsed, as it parses them)."""
    from cosample.plan.slicebuild import _python_views, _table

    _python_views([_table(plan.get("hosts")) for plan in plans])


def measure(
    servers: int, two_phase: bool, directory_up_to: int = 100_000, python_up_to: int = 100_000
) -> dict:
    """One size, in a process of its own."""
    from cosample.controller.publish import render
    from cosample.gcpause import gc_paused
    from cosample.plan.signing import generate_keypair
    from cosample.plan.slicebuild import build_slices

    with tempfile.TemporaryDirectory(prefix="bench-slices-") as name:
        folder = Path(name)
        plan, moved, moment = _plans(servers, folder, two_phase)
        key, public = folder / "key.pem", folder / "key.pub"
        generate_keypair(key, public)
        out: dict = {"servers": servers}
        cases = [("plan", plan, None)] + ([("plan set", moved, plan)] if moved else [])
        for label, document, previous in cases:
            old = render(previous, 100, None).final if previous is not None else None
            peak_before = _peak_mb()
            with gc_paused():  # as in the controller's cycle
                rendered, render_cpu = _cpu(
                    lambda: render(document, 101, str(key), old, moment, 120.0)
                )
                plans = rendered.plans  # let go by the build
                slices, slices_cpu = _cpu(lambda: rendered.slices)
                peak_after = _peak_mb()  # before the floor and the Python builder
                build_mb = _traced_mb(lambda: build_slices(plans, str(key)))  # built again
                floor_cpu = _cpu(
                    lambda: hashlib.sha256(bytes(memoryview(slices.views.buffer))).digest()
                )[1]
                python_cpu = (
                    _cpu(lambda: _python_slices(plans))[1] if servers <= python_up_to else None
                )
                sizes, all_cpu = _cpu(lambda: [len(doc) for _, doc in slices.items()])
            row = {
                "render_cpu_s": round(render_cpu, 3),
                "slices_cpu_s": round(slices_cpu, 3),
                "floor_cpu_s": round(floor_cpu, 3),
                "python_cpu_s": None if python_cpu is None else round(python_cpu, 3),
                "signing_each_cpu_s": round(_signing_each(key, sizes), 3),
                "all_documents_cpu_s": round(all_cpu, 3),
                "plan_bytes": len(rendered.data),
                "hosts": len(slices),
                "slice_bytes_median": int(statistics.median(sizes)),
                "slice_bytes_p99": int(np.percentile(sizes, 99)),
                "slice_bytes_max": max(sizes),
                "tree_mb": round(sum(map(len, slices.tree.levels)) / 1e6, 1),
                "views_mb": round(len(slices.views.buffer) / 1e6, 1),
                "peak_rss_mb_before": peak_before,
                "peak_rss_mb_after": peak_after,
                "build_traced_mb": build_mb,
            }
            if label == "plan" and servers <= directory_up_to:
                row.update(_directory(rendered, folder / "pub"))
            if label == "plan":
                busiest = slices.names[int(np.argmax(sizes))]
                rng = np.random.default_rng(0)
                picked = [busiest, slices.names[int(rng.integers(len(slices)))], slices.names[0]]
                again = render(document, 102, str(key), None, moment, 120.0)
                row["agent"] = _agent_bytes(rendered, again, picked, public)
            out[label] = row
        return out


def _print(result: dict) -> None:
    servers = result["servers"]
    for label in ("plan", "plan set"):
        row = result.get(label)
        if row is None:
            continue
        print(
            f"{servers:>9,} servers, {label}: {row['hosts']:,} slices; whole plan "
            f"{row['plan_bytes']:,} bytes"
        )
        python = (
            "not run"
            if row.get("python_cpu_s") is None
            else f"{row['python_cpu_s']:.3f} s "
            f"({row['python_cpu_s'] / max(row['slices_cpu_s'], 1e-3):.1f}x the compiled)"
        )
        print(
            f"  publisher CPU: render {row['render_cpu_s']:.3f} s, slices "
            f"{row['slices_cpu_s']:.3f} s "
            f"({row['slices_cpu_s'] / max(row['render_cpu_s'], 1e-3):.1f}x render; "
            f"{row['slices_cpu_s'] / max(row['floor_cpu_s'], 1e-3):.1f}x the floor: the views' "
            f"{row['views_mb']} MB copied once and hashed by hashlib, "
            f"{row['floor_cpu_s']:.3f} s); in Python {python}"
        )
        print(
            f"  every slice document once {row['all_documents_cpu_s']:.3f} s; "
            f"a signature per slice instead would cost {row['signing_each_cpu_s']:.3f} s"
        )
        print(
            f"  slice bytes: median {row['slice_bytes_median']:,}, p99 "
            f"{row['slice_bytes_p99']:,}, max {row['slice_bytes_max']:,}; kept: views "
            f"{row['views_mb']} MB, tree {row['tree_mb']} MB; peak RSS "
            f"{row['peak_rss_mb_before']:,} -> {row['peak_rss_mb_after']:,} MB"
        )
        peak, kept = row["build_traced_mb"]
        print(
            f"  memory of the build (tracemalloc, a second build): peak {peak:,} MB, kept "
            f"{kept:,} MB (views, tree, names)"
        )
        if "directory_whole_s" in row:
            print(
                f"  DirectoryTarget.publish: whole plan alone {row['directory_whole_s']:.3f} s "
                f"({row['directory_whole_cpu_s']:.3f} s CPU), with every slice as a file "
                f"{row['directory_with_slices_s']:.3f} s ({row['directory_with_slices_cpu_s']:.3f}"
                f" s CPU)"
            )
        for poll in row.get("agent", ()):
            print(
                f"  agent {poll['host']:>8s} {poll['stage']:17s} {poll['bytes']:>7,} bytes "
                f"({row['plan_bytes'] / max(poll['bytes'], 1):,.0f}x fewer than the whole "
                f"plan), {poll['agent_cpu_ms']:6.2f} ms CPU, versions {poll['versions']}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument(
        "--two-phase",
        action="store_true",
        help="also publish a two-phase plan set (at sizes up to --two-phase-up-to)",
    )
    parser.add_argument(
        "--two-phase-up-to",
        type=int,
        default=100_000,
        help="largest size with a plan set (10^6: 11 GB before the slices)",
    )
    parser.add_argument(
        "--directory-up-to",
        type=int,
        default=100_000,
        help="largest size whose slices are also written as files",
    )
    parser.add_argument(
        "--python-up-to",
        type=int,
        default=100_000,
        help="largest size whose slices are also built by the Python builder (10^6: about 20 s)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(
            json.dumps(measure(args.child, args.two_phase, args.directory_up_to, args.python_up_to))
        )
        return 0
    results = []
    for servers in args.sizes:
        command = [
            sys.executable,
            "-m",
            "research.bench_slices",
            "--child",
            str(servers),
            "--directory-up-to",
            str(args.directory_up_to),
            "--python-up-to",
            str(args.python_up_to),
        ] + (["--two-phase"] if args.two_phase and servers <= args.two_phase_up_to else [])
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        result = json.loads(done.stdout.splitlines()[-1])
        results.append(result)
        _print(result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
