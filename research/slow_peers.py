"""The daemons against endless and slow peers (issue 41, item 6): peak memory and service, this
tree beside another revision's, on loopback.

    python -m research.revision f06a9e9 /tmp/cosample-f06a9e9
    python -m research.slow_peers --baseline-tree /tmp/cosample-f06a9e9

Each daemon runs as ``python -m cosample`` in a scratch working directory: this tree's through
the installed package, the baseline's with its tree first on ``PYTHONPATH``. The peers are the
same for both (``cosample.lab.slowpeers``):

- ``controller-endless-snapshot``: ``controller run`` whose collector answers ``/snapshot`` with
  a body that never ends (its limit: 512 MiB), for ``--seconds``;
- ``collector-endless-plan``: ``collector run`` whose plan URL answers a body that never ends
  (``--max-plan-mib``, default the collector's 1024), for ``--seconds``;
- ``collector-drip``: ``collector run`` while ``--drippers`` connections each send one byte of a
  request head every 5 s, ``/snapshot`` fetched every second for ``--seconds``.

Prints one Markdown row per scenario and tree: the process's peak resident memory (``VmHWM``,
MB of 10^6 bytes) and, for the drip, how many ``/snapshot`` fetches were answered.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from cosample.controller import inventory
from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.lab.slowpeers import Drippers, Endless, peak_mb

INVENTORY = {
    "format": inventory.FORMAT,
    "format_version": 1,
    "name": "slow-peers",
    "cost": {"alpha": PAPER_ALPHA, "beta": PAPER_BETA},
    "servers": [{"name": f"s{k}", "capacity_pps": 3000} for k in (1, 2, 3)],
    "sflow": {"collector": "192.0.2.100:6343"},
}


def daemon(argv: list[str], tree: Path | None, scratch: Path) -> subprocess.Popen:
    """``python -m cosample ARGV`` from ``tree`` (None: this one), its stderr kept."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return subprocess.Popen(
        [sys.executable, "-m", "cosample", *argv],
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def watch(process: subprocess.Popen, seconds: float) -> float:
    """The peak resident memory after ``seconds`` (or when it exited)."""
    peak, end = 0.0, time.monotonic() + seconds
    while time.monotonic() < end and process.poll() is None:
        peak = max(peak, peak_mb(process.pid))
        time.sleep(0.5)
    return peak


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def controller_endless(tree: Path | None, scratch: Path, args: argparse.Namespace) -> str:
    (scratch / "dc.json").write_text(json.dumps(INVENTORY))
    with Endless() as endless:
        process = daemon(
            ["controller", "run", "--inventory", "dc.json", "--collector",
             f"{endless.url}/snapshot", "--publish", "pub", "--insecure-unsigned",
             "--insecure-unsigned-snapshots", "--state-dir", "state", "--interval", "5s",
             "--tau", "5s"],
            tree, scratch,
        )  # fmt: skip
        try:
            peak = watch(process, args.seconds)
        finally:
            stop(process)
    return f"{peak:,.0f} MB"


def collector_endless(tree: Path | None, scratch: Path, args: argparse.Namespace) -> str:
    with Endless() as endless:
        process = daemon(
            ["collector", "run", "--plan", f"{endless.url}/plan.json", "--listen",
             "127.0.0.1:0", "--insecure-unsigned", "--plan-interval", "2", "--plan-timeout",
             "10", "--max-plan-mib", str(args.max_plan_mib)],
            tree, scratch,
        )  # fmt: skip
        try:
            peak = watch(process, args.seconds)
        finally:
            stop(process)
    return f"{peak:,.0f} MB"


def collector_drip(tree: Path | None, scratch: Path, args: argparse.Namespace) -> str:
    process = daemon(
        ["collector", "run", "--plan", "none.json", "--listen", "127.0.0.1:0",
         "--insecure-unsigned", "--metrics-port", "0", "--export-interval", "0.2"],
        tree, scratch,
    )  # fmt: skip
    try:
        address = _http_address(process)
        url = "http://{}:{}/snapshot".format(*address)
        time.sleep(1.0)
        answered = tried = 0
        with Drippers(address, args.drippers, every_s=5.0):
            time.sleep(1.0)
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                tried += 1
                try:
                    urllib.request.urlopen(url, timeout=3).read()
                    answered += 1
                except OSError:
                    pass
                time.sleep(1.0)
        peak = peak_mb(process.pid)
    finally:
        stop(process)
    return f"{peak:,.0f} MB, /snapshot answered {answered} of {tried}"


SCENARIOS = {
    "controller-endless-snapshot": controller_endless,
    "collector-endless-plan": collector_endless,
    "collector-drip": collector_drip,
}


def _http_address(process: subprocess.Popen) -> tuple[str, int]:
    for line in process.stderr:
        match = re.search(r"HTTP on ([\d.]+):(\d+)", line)
        if match:
            threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
            return match[1], int(match[2])
    raise SystemExit("collector did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.slow_peers", description=__doc__)
    parser.add_argument(
        "--baseline-tree", type=Path, help="a revision laid out by research.revision"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="per scenario (default 30)")
    parser.add_argument("--max-plan-mib", type=int, default=1024, help="the collector's limit")
    parser.add_argument("--drippers", type=int, default=64)
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    args = parser.parse_args(argv)
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline_tree is not None:
        if not (args.baseline_tree / "cosample" / "__init__.py").is_file():
            raise SystemExit(f"{args.baseline_tree}: no cosample/ (python -m research.revision)")
        trees.insert(0, (f"baseline {args.baseline_tree.name}", args.baseline_tree.resolve()))
    print("| scenario | tree | peak RSS |")
    print("|---|---|---|")
    for name in args.only or SCENARIOS:
        for label, tree in trees:
            with tempfile.TemporaryDirectory(prefix="slow-peers-") as scratch:
                row = SCENARIOS[name](tree, Path(scratch), args)
            print(f"| {name} | {label} | {row} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
