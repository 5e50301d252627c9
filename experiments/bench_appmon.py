"""Application-monitor benchmark: the analyser beside tshark on one capture, in one run.

A capture of real HTTP traffic (nginx, its Python backend and wrk in namespaces:
``cosample.lab.web``; or any pcap given with ``--capture``) is analysed by both, each computing
the service time of every response (request first byte to status line) and the status:

- the analyser: ``Analyser.ingest`` over the frames already read into memory (the analyser's
  own cost), and the whole ``replay`` path from the file (reading included);
- tshark: ``tshark -r CAPTURE -Y http.response -T fields -e http.time -e http.response.code``
  with body reassembly off, so that, like the analyser, it times the response's first segment.

Both are measured in CPU seconds (the analyser's process time, tshark's from ``wait4``), so
packets per CPU second is what one core sustains whatever else the shared machine runs; best of
``--rounds``. The results of both are printed side by side (responses, mean and p95 service
time) so that the ratio compares the same work.

    python -m cosample.experiments.bench_appmon [--capture FILE] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cosample.appmon.analyser import Analyser
from cosample.appmon.pcap import frames, read_link
from cosample.appmon.replay import replay


def make_capture(directory: Path, seconds: float, connections: int) -> Path:
    """Record real traffic: wrk against nginx's fast path, then against the backend."""
    from cosample.lab.web import WebRig, web_available
    reason = web_available()
    if reason:
        sys.exit(f"bench_appmon: cannot record a capture here ({reason}); pass --capture FILE")
    path = directory / "web.pcap"
    with WebRig(directory / "web", seed=5) as rig:
        capture = rig.tcpdump(path)
        rig.load(rig.url("/fast"), duration_s=seconds / 2, connections=connections)
        rig.load(rig.url(mean_ms=2, error=0.1, size=2000), duration_s=seconds / 2,
                 connections=connections)
        time.sleep(0.5)
        rig.stop(capture)
    return path


def analyser_run(data: list[tuple[float, bytes]], link: int) -> tuple[float, Analyser]:
    analyser = Analyser(3600.0, link=link)
    ingest = analyser.ingest
    started = time.process_time()
    for when, frame in data:
        ingest(frame, when)
    analyser.finish()
    return time.process_time() - started, analyser


def replay_run(path: Path) -> tuple[float, list]:
    started = time.process_time()
    snaps = list(replay(path, window_s=3600.0))
    return time.process_time() - started, snaps


def tshark_run(path: Path) -> tuple[float, np.ndarray, list[int]]:
    """tshark's service times and statuses, and its CPU seconds (user + system)."""
    argv = ["tshark", "-n", "-r", str(path), "-o", "http.desegment_body:FALSE",
            "-Y", "http.response", "-T", "fields", "-e", "http.time", "-e", "http.response.code"]
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL,
                                   stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            sys.exit(f"bench_appmon: tshark exited {process.returncode}")
        out.seek(0)
        lines = out.read().decode().splitlines()
    times, codes = [], []
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 2 and parts[1]:
            codes.append(int(parts[1].split(",")[0]))
            if parts[0]:
                times.append(float(parts[0].split(",")[0]))
    return usage.ru_utime + usage.ru_stime, np.array(times), codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, help="pcap to analyse (default: record one)")
    parser.add_argument("--seconds", type=float, default=6.0, help="load recorded (default 6)")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="best of (default 3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-appmon-") as scratch:
        path = args.capture or make_capture(Path(scratch), args.seconds, args.connections)
        link = read_link(path)
        data = list(frames(path))
        print(f"capture {path if args.capture else '(recorded: nginx + backend, wrk)'}: "
              f"{len(data)} frames, {sum(len(f) for _, f in data) / 1e6:.1f} MB")
        best = {"analyser": np.inf, "replay": np.inf, "tshark": np.inf}
        for _ in range(args.rounds):
            seconds, analyser = analyser_run(data, link)
            best["analyser"] = min(best["analyser"], seconds)
            best["replay"] = min(best["replay"], replay_run(path)[0])
            seconds, tshark_times, tshark_codes = tshark_run(path)
            best["tshark"] = min(best["tshark"], seconds)
    stats = [s for s in analyser.totals.values()]
    matched = sum(s.matched for s in stats)
    responses = sum(s.responses for s in stats)
    mean = sum(s.total_s for s in stats) / matched if matched else float("nan")
    p95 = stats[0].quantile(0.95) if len(stats) == 1 else float("nan")
    print(f"{'':<34}{'responses':>10}{'5xx':>7}{'mean ms':>10}{'p95 ms':>9}"
          f"{'CPU s':>8}{'frames/CPU s':>14}")
    rows = (("analyser (frames in memory)", responses, sum(s.statuses[4] for s in stats), mean,
             p95, best["analyser"]),
            ("analyser replay (file read too)", responses, sum(s.statuses[4] for s in stats),
             mean, p95, best["replay"]),
            ("tshark -z fields http.time", len(tshark_codes),
             sum(500 <= c < 600 for c in tshark_codes),
             float(tshark_times.mean()) if len(tshark_times) else float("nan"),
             float(np.quantile(tshark_times, 0.95)) if len(tshark_times) else float("nan"),
             best["tshark"]))
    for name, count, errors, mean_s, p95_s, cpu in rows:
        print(f"{name:<34}{count:>10}{errors:>7}{mean_s * 1e3:>10.3f}{p95_s * 1e3:>9.3f}"
              f"{cpu:>8.2f}{len(data) / cpu:>14,.0f}")
    print(f"analyser / tshark, frames per CPU second: {best['tshark'] / best['analyser']:.1f}x "
          f"(replay from the file: {best['tshark'] / best['replay']:.1f}x); "
          f"analyser dropped {analyser.dropped() or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
