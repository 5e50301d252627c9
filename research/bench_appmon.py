"""Application-monitor benchmark: the analyser beside tshark on one capture, in one run.

A capture of real HTTP traffic (nginx, its Python backend and wrk in namespaces:
``cosample.lab.web``; or any pcap given with ``--capture``) is analysed by both, each computing
the service time of every response (request first byte to status line) and the status:

- the analyser: ``Analyser.ingest`` over the frames already read into memory (the analyser's
  own cost), and the whole ``replay`` path from the file (reading included);
- the live analyser (``cosample appmon run`` on the link while the capture is recorded): its
  frames and CPU seconds over the whole recording, kernel receive and filter included;
- tshark: ``tshark -n -r CAPTURE -Y http.response -T fields -e http.time -e http.response.code``
  with its default reassembly (with body reassembly off it loses the responses whose body spans
  segments: 20098 of 21412 on one capture). Its ``http.time`` runs from the frame that completes
  the request to the one that completes the response, the analyser's from the request's first
  byte to the status line: equal for one-segment messages, a little longer in tshark for
  multi-segment responses.

Both are measured in CPU seconds (the analyser's process time, tshark's from ``wait4``), so
packets per CPU second is what one core sustains whatever else the shared machine runs; best of
``--rounds``. The results of both are printed side by side (responses, mean and p95 service
time) so that the ratio compares the same work.

    python -m research.bench_appmon [--capture FILE] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
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


def make_capture(directory: Path, seconds: float, connections: int) -> tuple[Path, dict]:
    """Record real traffic (wrk against nginx's fast path, then against the backend) with
    tcpdump, while ``cosample appmon run`` analyses the same link live; the capture, and the live
    analyser's frames, kernel drops and CPU seconds."""
    from cosample.lab.web import WebRig, web_available

    reason = web_available()
    if reason:
        sys.exit(f"bench_appmon: cannot record a capture here ({reason}); pass --capture FILE")
    path, state = directory / "web.pcap", directory / "live"
    with WebRig(directory / "web", seed=5) as rig:
        live = rig._spawn(
            rig.client,
            [
                sys.executable,
                "-m",
                "cosample",
                "appmon",
                "run",
                "--interface",
                rig.link,
                "--window",
                "1h",
                "--state-dir",
                str(state),
                "--name",
                "live",
            ],
        )
        while b"capturing on" not in live.stderr.readline():
            if live.poll() is not None:
                sys.exit("bench_appmon: the live analyser did not start")
        capture = rig.tcpdump(path)
        rig.load(rig.url("/fast"), duration_s=seconds / 2, connections=connections)
        rig.load(
            rig.url(mean_ms=2, error=0.1, size=2000),
            duration_s=seconds / 2,
            connections=connections,
        )
        time.sleep(0.5)
        cpu = _cpu_seconds(live.pid)
        rig.stop(capture)
        rig.stop(live)
    snap = json.loads((state / "snapshot.json").read_text())
    return path, {
        "frames": snap["frames"],
        "cpu": cpu,
        "kernel_drops": snap["dropped"].get("kernel_drops", 0),
        "responses": sum(s["responses"] for s in snap["services"]),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    argv = [
        "tshark",
        "-n",
        "-r",
        str(path),
        "-Y",
        "http.response",
        "-T",
        "fields",
        "-e",
        "http.time",
        "-e",
        "http.response.code",
    ]
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
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
        live = None
        path = args.capture
        if path is None:
            path, live = make_capture(Path(scratch), args.seconds, args.connections)
        link = read_link(path)
        data = list(frames(path))
        print(
            f"capture {path if args.capture else '(recorded: nginx + backend, wrk)'}: "
            f"{len(data)} frames, {sum(len(f) for _, f in data) / 1e6:.1f} MB"
        )
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
    print(
        f"{'':<34}{'responses':>10}{'5xx':>7}{'mean ms':>10}{'p95 ms':>9}"
        f"{'CPU s':>8}{'frames/CPU s':>14}"
    )
    rows = (
        (
            "analyser (frames in memory)",
            responses,
            sum(s.statuses[4] for s in stats),
            mean,
            p95,
            best["analyser"],
        ),
        (
            "analyser replay (file read too)",
            responses,
            sum(s.statuses[4] for s in stats),
            mean,
            p95,
            best["replay"],
        ),
        (
            "tshark, fields http.time",
            len(tshark_codes),
            sum(500 <= c < 600 for c in tshark_codes),
            float(tshark_times.mean()) if len(tshark_times) else float("nan"),
            float(np.quantile(tshark_times, 0.95)) if len(tshark_times) else float("nan"),
            best["tshark"],
        ),
    )
    for name, count, errors, mean_s, p95_s, cpu in rows:
        print(
            f"{name:<34}{count:>10}{errors:>7}{mean_s * 1e3:>10.3f}{p95_s * 1e3:>9.3f}"
            f"{cpu:>8.2f}{len(data) / cpu:>14,.0f}"
        )
    if live is not None:
        print(
            f"{'analyser live (AF_PACKET, whole run)':<34}{live['responses']:>10}{'':>7}"
            f"{'':>10}{'':>9}{live['cpu']:>8.2f}{live['frames'] / live['cpu']:>14,.0f}"
            f"  (kernel drops {live['kernel_drops']}, includes idle waits)"
        )
    print(
        f"analyser / tshark, frames per CPU second: {best['tshark'] / best['analyser']:.1f}x "
        f"(replay from the file: {best['tshark'] / best['replay']:.1f}x); "
        f"analyser dropped {analyser.dropped() or 'nothing'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
