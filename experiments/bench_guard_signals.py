"""What one reading of each of the guard's headroom signals costs (agents/headroom.py).

A private OVS (``OvsInstance``: the userspace datapath as root, the dummy one otherwise) with one
bridge; ``--reads`` readings per signal, alternating between the signals so the machine's load
falls alike on each: the CPU time (user + system) of this process and its children per reading,
and the wall time. ``drops`` runs ``ovs-appctl`` (a process per reading); ``vswitchd`` reads
each of ovs-vswitchd's forwarding threads' ``schedstat``; ``host`` reads ``/proc/stat``.

    python -m cosample.experiments.bench_guard_signals --reads 200
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from cosample.agents.headroom import SIGNALS, Probe
from cosample.lab.ovs import OvsInstance


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def measure(rundir: Path, reads: int) -> dict[str, tuple[float, float]]:
    """signal -> (CPU ms per reading, wall ms per reading)."""
    probes = {signal: Probe(str(rundir), signals=(signal,)) for signal in SIGNALS}
    for probe in probes.values():
        probe.read()  # the first reading only takes the counters
    spent = {signal: [0.0, 0.0] for signal in SIGNALS}
    for _ in range(reads):
        for signal, probe in probes.items():
            cpu, wall = cpu_seconds(), time.perf_counter()
            probe.read()
            spent[signal][0] += cpu_seconds() - cpu
            spent[signal][1] += time.perf_counter() - wall
    return {signal: (1000 * c / reads, 1000 * w / reads) for signal, (c, w) in spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=200, help="readings per signal")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cosample-guard-bench-") as directory:
        dummy = os.geteuid() != 0
        with OvsInstance(Path(directory) / "ovs", dummy=dummy) as ovs:
            kind = "dummy" if dummy else "netdev"
            ovs.vsctl("add-br", "gb0", "--", "set", "bridge", "gb0", f"datapath_type={kind}")
            threads = len(Probe(str(ovs.directory))._threads())
            results = measure(ovs.directory, args.reads)
            ovs.vsctl("--if-exists", "del-br", "gb0")
    print(
        f"guard signals, {args.reads} readings each (ovs-vswitchd {kind} datapath, "
        f"{threads} forwarding threads read)"
    )
    print("| signal | CPU ms per reading | wall ms per reading |")
    print("|---|---|---|")
    for signal, (cpu, wall) in results.items():
        print(f"| {signal} | {cpu:.3f} | {wall:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
