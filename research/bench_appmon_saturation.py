"""Where the live analyser saturates: the offered frame rate raised until the kernel drops a
frame, the live path beside the replay path in one run; then the same for a receiver of
compact records (the off-site sniffer's analysis host).

Frames: real traffic recorded first (wrk against nginx's fast path and its backend, through
userspace OVS: ``cosample.lab.appmirror.MirrorRig``; tcpdump on the client's port). Then, per
step, tcpreplay offers the recording at a fixed rate on one end of a veth pair, looped as many
whole times as come closest to ``--step-seconds`` (``research.bench_appmon_sender``), while
``cosample appmon run --interface`` (what the agents start: the packet ring, the kernel filter)
reads the other end in a namespace (pinned to a core with ``--analyser-core``, the sender with
``--sender-core``). Two analysers, each on a veth and in a namespace of its own, take each step
in turn: ``--pure-python`` (the Python path alone) and the default (the compiled fast path,
``appmon.fastpath``). Per step and path: frames sent, frames the kernel's filter passed to the
ring and those it dropped (the snapshots' ``kernel_frames`` and ``kernel_drops``), the
analyser's CPU per frame (``/proc/PID/stat``), and ``appmon replay`` of the same step's frames
from a pcap in this process on the same path (CPU per frame), side by side; the requests and
responses the live analyser counted against replay's and the recording's times the loops (a
step without drops that counted otherwise makes the exit status 1); the load average. A path's
steps go up until one has drops (``--keep-going``: all of them). The packet ring holds 64 MiB
(about 2 s of this traffic at 100,000 frames/s): a step must be longer than that for "no
drops" to mean the analyser kept up, not that the ring absorbed its lag; ``core`` (CPU per frame
times the rate sent) says the same from the cost side.

Records: a receiver (``appmon run --receive-records``, key and sender address as the agents
give them) offered authenticated datagrams of 75 answered requests each at rising rates;
per step: records offered, taken, datagrams lost (the sequence gaps: the UDP receive buffer
overflowed), records refused (``records_late``, ``records_pending_full``), CPU per record.

    python -m research.bench_appmon_saturation [--rates 25000,50000,...]
        [--step-seconds 10] [--record-rates 50000,100000,...] [--keep-going]

Needs root, OVS, nginx, wrk, tcpdump, tcpreplay. The machine is shared: compare within a run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from cosample.appmon.pcap import frames as read_frames
from cosample.appmon.pcap import write_pcap
from cosample.appmon.replay import replay
from cosample.lab.netns import Lab
from research.bench_appmon_records import (
    SETTLE_S,
    cpu_seconds,
    favour,
    pin,
    records_part,
    windows,
)
from research.bench_appmon_sender import SENDER, loops_for, offer, sender_missing

#: The live analyser's two paths, measured side by side: (name, ``appmon run`` options)
PATHS = (("python", ["--pure-python"]), ("compiled", []))


class Recording(NamedTuple):
    """The recorded traffic: its pcap, its frames, and the (requests, responses) ``appmon
    replay`` counts in it."""

    path: Path
    frames: list[bytes]
    counts: tuple[int, int]


def record_traffic(directory: Path, seconds: float, connections: int) -> Path:
    """A pcap of real traffic through OVS (client's port)."""
    from cosample.lab.appmirror import MirrorRig, rig_unavailable

    reason = rig_unavailable()
    if reason:
        sys.exit(f"bench_appmon_saturation: {reason}")
    path = directory / "web.pcap"
    with MirrorRig(directory / "rig", seed=5) as rig:
        capture = rig.tcpdump(path)
        half = max(1, round(seconds / 2))  # wrk takes whole seconds
        rig.load(rig.url("/fast"), duration_s=half, connections=connections)
        rig.load(rig.url(mean_ms=1, error=0.1, size=2000), duration_s=half, connections=connections)
        time.sleep(0.5)
        rig.stop(capture)
    return path


def caught_up(state: Path, known: int, timeout_s: float = 60.0) -> list[dict]:
    """The windows once the analyser has read everything the kernel passed it (a closed window
    in which nothing arrived and nothing was read): a step's CPU and frames include the backlog
    it left in the ring."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S / 2)
        got = windows(state)
        new = got[known:]
        if (
            len(new) >= 2
            and not new[-1].get("kernel_frames")
            and new[-1]["frames"] == new[-2]["frames"]
            and any(w.get("kernel_frames") for w in new)
        ):
            return got
    sys.exit("bench_appmon_saturation: the analyser did not catch up within 60 s")


def counts(snapshots) -> tuple[int, int]:
    """(requests, responses) over windows: snapshots, or their JSON lines as dicts."""
    services = [
        (s["requests"], s["responses"]) if isinstance(s, dict) else (s.requests, s.responses)
        for w in snapshots
        for s in (w["services"] if isinstance(w, dict) else w.services)
    ]
    return sum(r for r, _ in services), sum(r for _, r in services)


def replayed(directory: Path, frames: list[bytes], compiled: bool) -> tuple[float, tuple]:
    """CPU seconds of ``appmon replay`` (this process) over ``frames`` written as a pcap, and
    the (requests, responses) it counted."""
    path = write_pcap(
        directory / "step.pcap", ((1.7e9 + i * 1e-5, f) for i, f in enumerate(frames))
    )
    started = time.process_time()
    snapshots = list(replay(path, window_s=1.0, compiled=compiled))
    seconds = time.process_time() - started
    path.unlink()
    return seconds, counts(snapshots)


def start_analyser(lab: Lab, path: str, options: list[str], state: Path) -> tuple:
    """``appmon run --interface`` of ``path`` in a namespace of its own, fed through a veth:
    (the process, the sender's end of the veth)."""
    receive = lab.namespace(path[0])
    send_end = lab.veth(f"{lab.prefix}{path[0]}", namespace=receive, peer="eth0")
    for argv in (
        ["ip", "link", "set", send_end, "mtu", "65535"],
        ["ip", "-n", receive, "link", "set", "eth0", "mtu", "65535"],
    ):
        subprocess.run(argv, check=True, timeout=30)
    argv = [sys.executable, "-m", "cosample", "appmon", "run", "--interface", "eth0"]
    argv += ["--window", "1s", "--state-dir", str(state), "--name", f"saturation-{path}"]
    analyser = subprocess.Popen(
        lab.exec_argv(receive, [*argv, *options]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a scheduling group of its own (``favour``)
    )
    while b"capturing on" not in analyser.stderr.readline():
        if analyser.poll() is not None:
            sys.exit(f"bench_appmon_saturation: the live analyser ({path}) did not start")
    return analyser, send_end


def step(
    scratch: Path, running: tuple, recording: Recording, rate: float, loops: int, nice: int = 0
) -> dict:
    """One rate step on one path's analyser (``loops`` passes over the recording), and
    ``appmon replay`` of the same frames; the counts each made, against the recording's."""
    path, analyser, send_end, state = running
    before_cpu, before = cpu_seconds(analyser.pid), windows(state)
    sent, seconds, refused = offer(
        send_end, recording.path, rate, loops, len(recording.frames), nice
    )
    after = caught_up(state, len(before))
    live_cpu = cpu_seconds(analyser.pid) - before_cpu
    mine = after[len(before) :]
    analysed = after[-1]["frames"] - (before[-1]["frames"] if before else 0)
    replay_s, replay_counts = replayed(scratch, recording.frames * loops, path == "compiled")
    expected = (recording.counts[0] * loops, recording.counts[1] * loops)
    live_counts = counts(mine)
    return {
        "path": path,
        "offered": rate,
        "loops": loops,
        "sent": sent,
        "sent_per_s": sent / seconds,
        "send_errors": refused,
        "kernel_frames": sum(w.get("kernel_frames") or 0 for w in mine),
        "kernel_drops": sum(w.get("kernel_drops") or 0 for w in mine),
        "analysed": analysed,
        "requests": live_counts[0],
        "responses": live_counts[1],
        "expected_responses": expected[1],
        "counts_right": counts_right(live_counts, replay_counts, expected),
        "live_us": live_cpu / max(1, analysed) * 1e6,
        # the share of one core this rate takes at this cost per frame
        "core_share": live_cpu / max(1, analysed) * sent / seconds,
        "replay_us": replay_s / (len(recording.frames) * loops) * 1e6,
        "load": os.getloadavg()[0],
    }


def counts_right(live: tuple, replayed_counts: tuple, expected: tuple) -> bool:
    """The live analyser counted the requests and responses ``appmon replay`` counted in the
    same frames, and those are the recording's times the loops."""
    return live == replayed_counts == expected


def frames_part(args, scratch: Path) -> list[dict]:
    """Per rate, the Python path's analyser then the compiled one's (``PATHS``), each on its
    own veth, the same frames; a path is done after its first step with drops."""
    path = record_traffic(scratch, args.record_seconds, args.connections)
    frames = [frame for _, frame in read_frames(path)]
    recording = Recording(path, frames, counts(replay(path, window_s=1.0)))
    print(
        f"recording (nginx + backend, wrk, through userspace OVS): {len(frames)} frames, "
        f"{sum(map(len, frames)) / len(frames):.0f} bytes on average, "
        f"{recording.counts[0]:,} requests, {recording.counts[1]:,} responses; "
        f"sender: {SENDER}, the recording looped",
        flush=True,
    )
    print(
        f"{'path':>9} {'offered/s':>9} {'sent/s':>10} {'kernel':>10} {'drops':>8} "
        f"{'analysed':>10} {'live µs':>9} {'core':>7} {'replay µs':>10} {'live/rep':>8} "
        f"{'responses':>10} {'counts':>6} {'load':>5}   (frames)",
        flush=True,
    )
    lab = Lab(prefix=f"sat{os.getpid() % 100000}")
    rows, running = [], {}
    try:
        for path, options in PATHS:
            state = scratch / path
            running[path] = (path, *start_analyser(lab, path, options, state), state)
            pin(running[path][1].pid, args.analyser_core)
            favour(running[path][1].pid, args.analyser_nice)
        pin(0, args.sender_core)
        done = set()
        for rate in args.rates:
            loops = loops_for(rate, args.step_seconds, len(frames))
            for path, one in running.items():
                if path in done:
                    continue
                row = step(scratch, one, recording, rate, loops, args.sender_nice)
                rows.append(row)
                print(
                    f"{path:>9} {rate:>9,.0f} {row['sent_per_s']:>10,.0f} "
                    f"{row['kernel_frames']:>10,} {row['kernel_drops']:>8,} "
                    f"{row['analysed']:>10,} {row['live_us']:>9.2f} {row['core_share']:>7.0%} "
                    f"{row['replay_us']:>10.2f} {row['live_us'] / row['replay_us']:>8.2f} "
                    f"{row['responses']:>10,} {verdict(row):>6} "
                    f"{row['load']:>5.1f}",
                    flush=True,
                )
                if row["kernel_drops"] and not args.keep_going:
                    done.add(path)
            if len(done) == len(running):
                break
    finally:
        for _, analyser, _, _ in running.values():
            if analyser.poll() is None:
                analyser.terminate()
                analyser.wait(timeout=30)
        problems = lab.teardown()
        if problems:
            print("bench_appmon_saturation: " + "; ".join(problems), file=sys.stderr)
    return rows


def summary(rows: list[dict], what: str, drops: str, unit: str, cost: str) -> str:
    clean = [r for r in rows if not r[drops]]
    first = next((r for r in rows if r[drops]), None)
    text = f"{what}: "
    text += (
        f"first {drops} at {first['sent_per_s']:,.0f} {unit}/s sent ({first['offered']:,.0f} offered)"
        if first
        else f"no {drops} up to {rows[-1]['sent_per_s']:,.0f} {unit}/s sent"
    )
    if clean:
        top = clean[-1]
        text += (
            f"; highest rate without: {top['sent_per_s']:,.0f} {unit}/s sent, "
            f"{top[cost]:.2f} µs CPU per {unit[:-1] if unit.endswith('s') else unit} there "
            f"({top['core_share']:.0%} of a core)"
        )
    return text


def verdict(row: dict) -> str:
    """The counts column: ``right``; ``lower`` (the step dropped frames: its counts are lower
    bounds); ``WRONG`` (no drops, yet not what replay counted in the same frames)."""
    return "right" if row["counts_right"] else "lower" if row["kernel_drops"] else "WRONG"


def counts_wrong(rows: list[dict]) -> str | None:
    """None when every step without drops counted what it should (``counts_right``), else a
    line naming the steps that did not."""
    wrong = [r for r in rows if not r["kernel_drops"] and not r["counts_right"]]
    if not wrong:
        return None
    return (
        "bench_appmon_saturation: counts differ from replay's or the recording's in "
        + ", ".join(
            f"{r['path']} at {r['offered']:,.0f}/s ({r['responses']:,} responses, "
            f"{r['expected_responses']:,} expected)"
            for r in wrong
        )
    )


def side_by_side(rows: list[dict]) -> str:
    """The compiled path's CPU per frame against the Python path's at the same offered rates
    (steps where neither dropped: the same frames analysed)."""
    python = {r["offered"]: r for r in rows if r["path"] == "python" and not r["kernel_drops"]}
    ratios = [
        python[r["offered"]]["live_us"] / r["live_us"]
        for r in rows
        if r["path"] == "compiled" and not r["kernel_drops"] and r["offered"] in python
    ]
    if not ratios:
        return "python / compiled CPU per frame: no step where both took every frame"
    return (
        f"python / compiled CPU per frame, live, at the same rates: "
        f"{min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} steps"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates",
        default="25000,50000,75000,100000,125000,150000,200000,250000",
        help="offered frames per second, one step each (default up to 250,000)",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=10.0,
        help="per step (default 10: longer than the packet ring holds at 100,000 frames/s)",
    )
    parser.add_argument(
        "--record-rates",
        default="50000,100000,200000,400000,800000",
        help="offered records per second for the records receiver ('': skip it)",
    )
    parser.add_argument("--record-seconds", type=float, default=4.0, help="traffic recorded")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections")
    parser.add_argument(
        "--analyser-core", type=int, default=-1, help="pin the analyser to this core (-1: no)"
    )
    parser.add_argument(
        "--sender-core", type=int, default=-1, help="pin the sender to this core (-1: no)"
    )
    parser.add_argument(
        "--analyser-nice",
        type=int,
        default=0,
        help="the analysers' nice value and their sessions' (e.g. -10: most of their core on a "
        "busy machine; default 0: as they come)",
    )
    parser.add_argument(
        "--sender-nice",
        type=int,
        default=0,
        help="the sender's nice value and its session's (as --analyser-nice)",
    )
    parser.add_argument("--keep-going", action="store_true", help="every step, even after drops")
    args = parser.parse_args(argv)
    args.rates = [float(x) for x in args.rates.split(",") if x]
    args.record_rates = [float(x) for x in args.record_rates.split(",") if x]
    if os.geteuid() != 0:
        sys.exit("bench_appmon_saturation: needs root (namespaces, packet sockets)")
    if args.rates and sender_missing():
        sys.exit(f"bench_appmon_saturation: {sender_missing()}")
    load = os.getloadavg()[0]
    print(
        f"machine: {os.cpu_count()} cores, load average {load:.1f} at the start; "
        f"analyser pinned to core {args.analyser_core}, sender to {args.sender_core} (-1: not), "
        f"nice: analyser {args.analyser_nice}, sender {args.sender_nice}; "
        f"{args.step_seconds:g} s per step",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-saturation-") as directory:
        scratch = Path(directory)
        frame_rows = frames_part(args, scratch) if args.rates else []
        record_rows = []
        if args.record_rates:
            print(
                f"{'offered/s':>9} {'sent/s':>10} {'datagrams':>9} {'taken':>10} {'lost':>8} "
                f"{'late':>8} {'µs/rec':>9} {'core':>7} {'load':>5}   (records: --receive-records)",
                flush=True,
            )
            record_rows = records_part(args, scratch)
    for path, _ in PATHS:
        mine = [row for row in frame_rows if row["path"] == path]
        what = f"live analyser, {path} path (packet ring)"
        if mine:
            print(summary(mine, what, "kernel_drops", "frames", "live_us"))
    wrong = counts_wrong(frame_rows)
    if frame_rows:
        print(side_by_side(frame_rows))
        print(wrong or "counts: in every step without drops, live = replay = recording x loops")
    if record_rows:
        print(
            summary(
                record_rows,
                "records receiver",
                "losses",
                "records",
                "us_per_record",
            )
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
