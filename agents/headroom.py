"""How much forwarding headroom the host has: the guard's ``Reading`` once per tick.

Signals (``guard_signals`` in the agent's configuration; docs/agents.md, "The guard"):

- ``vswitchd`` (default): the busiest forwarding thread of ovs-vswitchd (the main thread, which
  polls the userspace datapath's non-PMD ports, ``pmd*`` and the ``handler*`` threads that take
  the kernel datapath's upcalls, sFlow samples among them): the share of the tick it ran *or
  waited to run* (``/proc/PID/task/TID/schedstat``: run time, run-queue wait). A thread that
  never sleeps has no headroom left, whether its own load grew (a burst) or others took its CPU
  (a hog): the wait shows the second, which its CPU time alone would not. Not for DPDK PMD
  threads, which poll and so never sleep (their cycle counters would be the signal; not built);
- ``host``: the host's CPUs busy (``/proc/stat``: 1 - idle - iowait), for the kernel datapath,
  whose forwarding runs in softirq, charged to no thread of ovs-vswitchd;
- ``drops``: packets lost on the way in, from one ``ovs-appctl dpctl/show -s``: the datapath's
  lost upcalls (``lookups: ... lost:N``, the kernel datapath drops sFlow's upcalls when the
  handlers fall behind) and, per VM port, packets the kernel received on it that OVS did not
  (the userspace datapath reads ports through sockets that drop when it falls behind). One
  process per tick (about 3-20 ms of the host's CPU, results.md), so it is off by default.

``Probe`` keeps the last counters; its first call only takes them (no reading). Parsers are pure.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cosample.agents.errors import HostError
from cosample.agents.guard import Reading
from cosample.dataplane.run import CommandError, run

SIGNALS = ("vswitchd", "host", "drops")
#: ovs-vswitchd's threads that forward or take upcalls (``comm`` names, by prefix)
FORWARDING_THREADS = ("ovs-vswitchd", "pmd", "handler")


# parsers (pure) ------------------------------------------------------------------------------
def parse_schedstat(text: str) -> tuple[int, int]:
    """``/proc/.../schedstat``: (ns run on a CPU, ns waited on a run queue)."""
    fields = text.split()
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        raise ValueError(f"not a schedstat line: {text[:40]!r}")
    return int(fields[0]), int(fields[1])


def parse_proc_stat(text: str) -> tuple[int, int]:
    """``/proc/stat``'s first line: (all ticks, idle + iowait ticks)."""
    first = text.split("\n", 1)[0].split()
    if not first or first[0] != "cpu" or len(first) < 6:
        raise ValueError("/proc/stat: no 'cpu' line first")
    ticks = [int(value) for value in first[1:]]
    return sum(ticks[:8]), ticks[3] + ticks[4]


_LOST = re.compile(r"lookups: hit:\d+ missed:\d+ lost:(\d+)")
_PORT = re.compile(r"port \d+: (\S+)(?: \([^)]*\))?\n\s+RX packets:(\d+)")


def parse_dpctl(text: str) -> tuple[int, dict[str, int]]:
    """``ovs-appctl dpctl/show -s``: (upcalls lost, summed over datapaths; RX packets per port)."""
    lost = sum(int(m) for m in _LOST.findall(text))
    return lost, {name: int(packets) for name, packets in _PORT.findall(text)}


def busy_share(
    before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]], seconds: float
) -> float:
    """The busiest thread's share of ``seconds`` spent running or waiting to run (threads in
    both readings; 0 with none)."""
    if seconds <= 0:
        return 0.0
    shares = [
        ((run1 - before[tid][0]) + (wait1 - before[tid][1])) / 1e9 / seconds
        for tid, (run1, wait1) in after.items()
        if tid in before
    ]
    return max(shares, default=0.0)


# the effect ----------------------------------------------------------------------------------
@dataclass
class _Counters:
    at: float
    threads: dict[str, tuple[int, int]]
    host: tuple[int, int] | None
    lost: int | None
    backlog: dict[str, int]  # per port: kernel received - datapath received


class Probe:
    """Reads the host's counters; ``read()`` gives the ``Reading`` since the last call."""

    def __init__(
        self,
        rundir: str,
        signals: Sequence[str] = ("vswitchd",),
        vm_ports: Callable[[], Sequence[str]] = tuple,
        *,
        timeout_s: float = 2.0,
        proc: str = "/proc",
        sysfs: str = "/sys/class/net",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = set(signals) - set(SIGNALS)
        if unknown:
            raise ValueError(f"unknown guard signals {sorted(unknown)} (known: {SIGNALS})")
        self.rundir, self.signals, self.vm_ports = Path(rundir), tuple(signals), vm_ports
        self.timeout_s, self.proc, self.sysfs, self.clock = (
            timeout_s,
            Path(proc),
            Path(sysfs),
            clock,
        )
        self._last: _Counters | None = None

    def read(self) -> Reading | None:
        """The host's headroom since the last call; None on the first (counters taken)."""
        now = self._counters()
        last, self._last = self._last, now
        if last is None:
            return None
        seconds = now.at - last.at
        busy = 0.0
        if "vswitchd" in self.signals:
            busy = busy_share(last.threads, now.threads, seconds)
        if now.host is not None and last.host is not None:
            total, idle = now.host[0] - last.host[0], now.host[1] - last.host[1]
            busy = max(busy, 1.0 - idle / total if total > 0 else 0.0)
        drops = 0
        if now.lost is not None and last.lost is not None:
            drops = max(0, now.lost - last.lost) + sum(
                max(0, now.backlog[port] - last.backlog[port])
                for port in now.backlog
                if port in last.backlog
            )
        return Reading(busy=busy, drops=drops)

    # pieces ------------------------------------------------------------------------------------
    def _counters(self) -> _Counters:
        threads = self._threads() if "vswitchd" in self.signals else {}
        host = None
        if "host" in self.signals:
            host = parse_proc_stat(self._text(self.proc / "stat"))
        lost, backlog = None, {}
        if "drops" in self.signals:
            lost, datapath = parse_dpctl(self._appctl("dpctl/show", "-s"))
            for port in self.vm_ports():
                received = self._int(Path(self.sysfs) / port / "statistics" / "rx_packets")
                if received is not None and port in datapath:
                    backlog[port] = received - datapath[port]
        return _Counters(self.clock(), threads, host, lost, backlog)

    def _pid(self) -> int:
        text = self._text(self.rundir / "ovs-vswitchd.pid").strip()
        if not text.isdigit():
            raise HostError(f"{self.rundir}/ovs-vswitchd.pid: not a process id ({text[:20]!r})")
        return int(text)

    def _threads(self) -> dict[str, tuple[int, int]]:
        tasks = self.proc / str(self._pid()) / "task"
        out = {}
        try:
            names = os.listdir(tasks)
        except OSError as exc:
            raise HostError(
                f"{tasks}: cannot list ovs-vswitchd's threads ({exc.strerror})"
            ) from None
        for tid in names:
            try:
                comm = (tasks / tid / "comm").read_text().strip()
                if comm.startswith(FORWARDING_THREADS):
                    out[tid] = parse_schedstat((tasks / tid / "schedstat").read_text())
            except (OSError, ValueError):
                continue  # a thread that just exited
        return out

    def _appctl(self, *command: str) -> str:
        target = self.rundir / "ovs-vswitchd.ctl"
        if not target.exists():
            target = self.rundir / f"ovs-vswitchd.{self._pid()}.ctl"
        try:
            return run(["ovs-appctl", "-t", str(target), *command], timeout=self.timeout_s).stdout
        except CommandError as exc:
            raise HostError(str(exc)) from None

    @staticmethod
    def _text(path: Path) -> str:
        try:
            return path.read_text()
        except OSError as exc:
            raise HostError(f"{path}: cannot read ({exc.strerror})") from None

    @staticmethod
    def _int(path: Path) -> int | None:
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            return None
