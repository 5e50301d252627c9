"""What a phase of the cpu method costs beyond its nominal length: switching and counting.

Every phase of a paired run switches the mechanism (sFlow: ``ovs-vsctl``, which waits for
ovs-vswitchd to reconfigure; the tc mirrors: ``tc filter replace`` / ``delete``) and reads the
counters twice (the accounting scope's CPU snapshot and the ports' packet counts). The phase is
timed from the count's start, so this time is spent on top of the run's nominal length: with P
phases a run costs ``length + per_run + P * per_phase`` seconds. This builds the one-host
testbed, offers the cpu method's load (20 kpps of 64-byte UDP) and times, per mechanism,
``--switches`` changes each way and as many counter reads. ``--against COMMIT`` also times that
commit's sFlow switching (its ``costmodel/mechanisms.py``, loaded from git into a temporary
module), alternating with today's on the same bridge, so the two are compared side by side.

    flock /tmp/cosample-ovs.lock python -m research.costmodel_toggle --against 3cb3f6b

Prints one Markdown row per mechanism (median and 90th percentile, milliseconds).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cosample.costmodel.accounting import CgroupScope, pid_from_file
from cosample.costmodel.counters import device_packets
from cosample.costmodel.iperf import IperfClient, IperfServer, client_argv
from cosample.costmodel.mechanisms import MIRROR_PRIO, SflowSampling, TcMirror
from cosample.costmodel.onehost import OneHostTestbed
from cosample.lab.sflow import SflowCollector


def timed(action, count: int) -> np.ndarray:
    """Milliseconds each of ``count`` calls of ``action`` took."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1e3)
    return np.array(times)


def cell(ms: np.ndarray) -> str:
    return f"{np.median(ms):.1f} / {np.percentile(ms, 90):.1f}"


def sflow_class_at(commit: str) -> type:
    """``SflowSampling`` as ``costmodel/mechanisms.py`` had it at ``commit``."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "-C", str(root), "show", f"{commit}:costmodel/mechanisms.py"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "mechanisms_then.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("mechanisms_then", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.SflowSampling


def start_and_stop(endpoints, argv: list[str], count: int, retry_s: float) -> str:
    """A paired run's own overhead, as the harness meets it: iperf3 started right after the
    previous run was killed, until its packets reach the receiver's port (a client the server
    refuses while it is still busy with the killed one is started again after ``retry_s``),
    then stopped."""
    first, stop, refused = [], [], 0
    for _ in range(count):
        start = time.perf_counter()
        while True:
            load = IperfClient(endpoints.sender_exec, argv, "udp", 30.0)
            initial = device_packets(endpoints.receiver_port)[1]
            while device_packets(endpoints.receiver_port)[1] <= initial + 10:
                if time.perf_counter() - start > 10 or load.process.poll() is not None:
                    break
                time.sleep(0.01)
            if load.process.poll() is None or time.perf_counter() - start > 10:
                break
            refused += 1
            time.sleep(retry_s)
        first.append((time.perf_counter() - start) * 1e3)
        stop.extend(timed(load.stop, 1))
    return (
        f"first packet {cell(np.array(first))}, stop {cell(np.array(stop))}, "
        f"{refused} of {count} starts refused at first (server still busy)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=40)
    parser.add_argument("--starts", type=int, default=20, help="iperf3 starts to time")
    parser.add_argument("--prefix", default="ccT")
    parser.add_argument(
        "--against",
        metavar="COMMIT",
        help="also time this commit's sFlow switching, alternating with today's",
    )
    parser.add_argument("--offered-pps", type=float, default=20_000.0)
    args = parser.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with (
        OneHostTestbed(args.prefix, tunnel=True) as testbed,
        SflowCollector(decode=False, receive_buffer=4 << 20) as collector,
    ):
        e = testbed.endpoints
        mechanisms = {
            "sflow": SflowSampling(testbed.ovs.vsctl, e.bridge, collector.target),
            **(
                {
                    f"sflow at {args.against}": sflow_class_at(args.against)(
                        testbed.ovs.vsctl, e.bridge, collector.target
                    )
                }
                if args.against
                else {}
            ),
            "mirror": TcMirror(e.sender_port, e.mirror_target),
            "mirror_vxlan": TcMirror(
                e.sender_port, e.tunnel_target, prio=MIRROR_PRIO + 1, name="mirror_vxlan"
            ),
        }
        scope = CgroupScope(
            f"cosample-{args.prefix}",
            pid_from_file(testbed.ovs.directory / "ovs-vswitchd.pid"),
            2.0,
        )
        seconds = 10.0 + args.switches * 0.3 * (len(mechanisms) + 1)
        argv_ = client_argv(
            e.receiver_ip,
            duration_s=seconds,
            protocol="udp",
            packet_bytes=64,
            bandwidth=str(round(args.offered_pps * 64 * 8)),
        )
        with scope, IperfServer(e.receiver_exec) as server:
            scope.adopt(server.process.pid, "receiver")
            load = IperfClient(e.sender_exec, argv_, "udp", seconds)
            scope.adopt(load.process.pid, "sender")
            try:
                time.sleep(1.0)
                reads = timed(
                    lambda: (
                        device_packets(e.sender_port),
                        scope.snapshot(),
                        device_packets(e.receiver_port),
                    ),
                    args.switches,
                )
                print(
                    "| mechanism | switch on, ms (median / 90%) | switch off | "
                    "counter read | per phase (one switch + two reads) |"
                )
                print("|---|---|---|---|---|")
                on = {name: [] for name in mechanisms}
                off = {name: [] for name in mechanisms}
                try:
                    for _ in range(args.switches):  # interleaved: all see the same host
                        for name, mechanism in mechanisms.items():
                            on[name].extend(timed(lambda: mechanism.set_rate(1.0), 1))
                            time.sleep(0.1)
                            off[name].extend(timed(lambda: mechanism.set_rate(0.0), 1))
                            time.sleep(0.1)
                finally:
                    for mechanism in mechanisms.values():
                        mechanism.clear()
                for name in mechanisms:
                    per_phase = (np.median(on[name]) + np.median(off[name])) / 2 + 2 * np.median(
                        reads
                    )
                    print(
                        f"| {name} | {cell(np.array(on[name]))} | {cell(np.array(off[name]))} | "
                        f"{cell(reads)} | {per_phase:.1f} |",
                        flush=True,
                    )
            finally:
                load.stop()
            for retry_s in (1.0, 0.1):
                print(
                    f"per run, ms (median / 90%), retry after {retry_s:g} s: "
                    f"{start_and_stop(e, argv_, args.starts, retry_s)}"
                )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
