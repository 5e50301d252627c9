"""Where the live analyser saturates: the offered frame rate raised until the kernel drops a
frame, the live path beside the replay path in one run; then the same for a receiver of
compact records (the off-site sniffer's analysis host).

Frames: real traffic recorded first (wrk against nginx's fast path and its backend, through
userspace OVS: ``cosample.lab.appmirror.MirrorRig``; tcpdump on the client's port). Then, per
step, the recording is offered at a fixed rate on one end of a veth pair (an ``AF_PACKET``
socket, paced every millisecond; each pass over the recording under a client address of its own,
so every pass is new connections) while ``cosample appmon run --interface`` (what the agents
start: the packet ring, the kernel filter) reads the other end in a namespace (pinned to a core
with ``--analyser-core``, the sender with ``--sender-core``). Two analysers, each on a veth and in
a namespace of its own, take each step in turn: ``--pure-python`` (the Python path alone) and the
default (the compiled fast path, ``appmon.fastpath``). Per step and path: frames sent, frames the
kernel's filter passed to the ring and those it dropped (the snapshots' ``kernel_frames`` and
``kernel_drops``), the analyser's CPU per frame (``/proc/PID/stat``), and ``appmon replay`` of
the same step's frames from a pcap in this process on the same path (CPU per frame), side by
side. A path's steps go up until one has drops (``--keep-going``: all of them).

Records: a receiver (``appmon run --receive-records``, key and sender address as the agents
give them) offered authenticated datagrams of 75 answered requests each at rising rates;
per step: records offered, taken, datagrams lost (the sequence gaps: the UDP receive buffer
overflowed), records refused (``records_late``, ``records_pending_full``), CPU per record.

    python -m cosample.experiments.bench_appmon_saturation [--rates 25000,50000,...]
        [--step-seconds 4] [--record-rates 50000,100000,...] [--keep-going]

Needs root, OVS, nginx, wrk, tcpdump. The machine is shared: compare within a run.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cosample.appmon.pcap import frames as read_frames
from cosample.appmon.pcap import write_pcap
from cosample.appmon.replay import replay
from cosample.experiments.bench_appmon_records import (
    SETTLE_S,
    cpu_seconds,
    pin,
    records_part,
    windows,
)
from cosample.lab.netns import Lab

PACKET_QDISC_BYPASS = 20
#: The live analyser's two paths, measured side by side: (name, ``appmon run`` options)
PATHS = (("python", ["--pure-python"]), ("compiled", []))
CLIENT = socket.inet_aton("10.77.0.1")


def record_traffic(directory: Path, seconds: float, connections: int) -> list[bytes]:
    """Frames of real traffic through OVS (client's port), in order."""
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
    return [frame for _, frame in read_frames(path)]


def client_as(frame: bytes, number: int) -> bytes:
    """``frame`` with the client's IPv4 address replaced by one of pass ``number``'s."""
    address = bytes((10, 100 + number // 65536 % 100, number // 256 % 256, number % 256))
    if frame[26:30] == CLIENT:
        return frame[:26] + address + frame[30:]
    if frame[30:34] == CLIENT:
        return frame[:30] + address + frame[34:]
    return frame


def step_frames(recording: list[bytes], count: int, first_pass: int) -> tuple[list[bytes], int]:
    """``count`` frames: passes over the recording, each under a new client address."""
    out, number = [], first_pass
    while len(out) < count:
        out += [client_as(f, number) for f in recording[: count - len(out)]]
        number += 1
    return out, number


def offer(sock: socket.socket, frames: list[bytes], rate: float) -> tuple[int, float, int]:
    """Send ``frames`` at ``rate`` per second (bursts every millisecond); (sent, seconds, send
    errors)."""
    send, clock, errors = sock.send, time.perf_counter, 0
    burst = max(1, int(rate / 1000))
    started = clock()
    for index in range(0, len(frames), burst):
        due = started + index / rate
        wait = due - clock()
        if wait > 0.0005:
            time.sleep(wait)
        for frame in frames[index : index + burst]:
            try:
                send(frame)
            except OSError:
                errors += 1
    return len(frames) - errors, clock() - started, errors


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


def replay_cpu(directory: Path, frames: list[bytes], compiled: bool) -> float:
    """CPU seconds of ``appmon replay`` (this process) over ``frames`` written as a pcap."""
    path = write_pcap(
        directory / "step.pcap", ((1.7e9 + i * 1e-5, f) for i, f in enumerate(frames))
    )
    started = time.process_time()
    for _ in replay(path, window_s=1.0, compiled=compiled):
        pass
    seconds = time.process_time() - started
    path.unlink()
    return seconds


def start_analyser(lab: Lab, path: str, options: list[str], state: Path) -> tuple:
    """``appmon run --interface`` of ``path`` in a namespace of its own, fed through a veth:
    (the process, the sending packet socket)."""
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
    )
    while b"capturing on" not in analyser.stderr.readline():
        if analyser.poll() is not None:
            sys.exit(f"bench_appmon_saturation: the live analyser ({path}) did not start")
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.setsockopt(263, PACKET_QDISC_BYPASS, 1)
    sock.bind((send_end, 0))
    return analyser, sock


def step(scratch: Path, path: str, analyser, sock, state: Path, frames, rate: float) -> dict:
    """One rate step on one path's analyser, and ``appmon replay`` of the same frames."""
    before_cpu, before = cpu_seconds(analyser.pid), windows(state)
    sent, seconds, errors = offer(sock, frames, rate)
    after = caught_up(state, len(before))
    live_cpu = cpu_seconds(analyser.pid) - before_cpu
    mine = after[len(before) :]
    analysed = after[-1]["frames"] - (before[-1]["frames"] if before else 0)
    replay_s = replay_cpu(scratch, frames, compiled=path == "compiled")
    return {
        "path": path,
        "offered": rate,
        "sent_per_s": sent / seconds,
        "send_errors": errors,
        "kernel_frames": sum(w.get("kernel_frames") or 0 for w in mine),
        "kernel_drops": sum(w.get("kernel_drops") or 0 for w in mine),
        "analysed": analysed,
        "live_us": live_cpu / max(1, analysed) * 1e6,
        # the share of one core this rate takes at this cost per frame
        "core_share": live_cpu / max(1, analysed) * sent / seconds,
        "replay_us": replay_s / len(frames) * 1e6,
    }


def frames_part(args, scratch: Path) -> list[dict]:
    """Per rate, the Python path's analyser then the compiled one's (``PATHS``), each on its
    own veth, the same frames; a path is done after its first step with drops."""
    recording = record_traffic(scratch, args.record_seconds, args.connections)
    print(
        f"recording (nginx + backend, wrk, through userspace OVS): {len(recording)} frames, "
        f"{sum(map(len, recording)) / len(recording):.0f} bytes on average",
        flush=True,
    )
    lab = Lab(prefix=f"sat{os.getpid() % 100000}")
    rows, running = [], {}
    try:
        for path, options in PATHS:
            state = scratch / path
            running[path] = (*start_analyser(lab, path, options, state), state)
            pin(running[path][0].pid, args.analyser_core)
        pin(0, args.sender_core)
        number, done = 0, set()
        for rate in args.rates:
            frames, number = step_frames(recording, int(rate * args.step_seconds), number)
            for path, (analyser, sock, state) in running.items():
                if path in done:
                    continue
                row = step(scratch, path, analyser, sock, state, frames, rate)
                rows.append(row)
                print(
                    f"{path:>9} {rate:>9,.0f} {row['sent_per_s']:>10,.0f} "
                    f"{row['kernel_frames']:>10,} {row['kernel_drops']:>8,} "
                    f"{row['analysed']:>10,} {row['live_us']:>9.2f} {row['core_share']:>7.0%} "
                    f"{row['replay_us']:>10.2f} {row['live_us'] / row['replay_us']:>8.2f}",
                    flush=True,
                )
                if row["kernel_drops"] and not args.keep_going:
                    done.add(path)
            if len(done) == len(running):
                break
    finally:
        for analyser, sock, _ in running.values():
            sock.close()
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
    parser.add_argument("--step-seconds", type=float, default=4.0, help="per step (default 4)")
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
    parser.add_argument("--keep-going", action="store_true", help="every step, even after drops")
    args = parser.parse_args(argv)
    args.rates = [float(x) for x in args.rates.split(",") if x]
    args.record_rates = [float(x) for x in args.record_rates.split(",") if x]
    if os.geteuid() != 0:
        sys.exit("bench_appmon_saturation: needs root (namespaces, packet sockets)")
    load = os.getloadavg()[0]
    print(
        f"machine: {os.cpu_count()} cores, load average {load:.1f} at the start; "
        f"analyser pinned to core {args.analyser_core}, sender to {args.sender_core} (-1: not); "
        f"{args.step_seconds:g} s per step",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-saturation-") as directory:
        scratch = Path(directory)
        print(
            f"{'path':>9} {'offered/s':>9} {'sent/s':>10} {'kernel':>10} {'drops':>8} "
            f"{'analysed':>10} "
            f"{'live µs':>9} {'core':>7} {'replay µs':>10} {'live/rep':>8}   (frames)",
            flush=True,
        )
        frame_rows = frames_part(args, scratch)
        record_rows = []
        if args.record_rates:
            print(
                f"{'offered/s':>9} {'sent/s':>10} {'datagrams':>9} {'taken':>10} {'lost':>8} "
                f"{'late':>8} {'µs/rec':>9} {'core':>7}   (records: --receive-records)",
                flush=True,
            )
            record_rows = records_part(args, scratch)
    for path, _ in PATHS:
        mine = [row for row in frame_rows if row["path"] == path]
        what = f"live analyser, {path} path (packet ring)"
        print(summary(mine, what, "kernel_drops", "frames", "live_us"))
    print(side_by_side(frame_rows))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
