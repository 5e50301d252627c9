"""CPU accounting of exactly the processes and kernel work that forward calibration traffic.

Where the CPU time of forwarding lands on Linux (checked on the kernel this was written on,
6.18 without ``CONFIG_IRQ_TIME_ACCOUNTING``): softirq work — the veth receive path, the tc
mirror's clone and ``mirred`` transmit, VXLAN encapsulation — runs on return from the system
call that raised it, in the context of the task that was running (the sender's ``sendto``, OVS's
``sendmmsg``), and is charged to that task's run time; only what overflows to ``ksoftirqd`` is
charged elsewhere. So the run time of a cgroup holding the sender, the receiver and
ovs-vswitchd is the complete cost, as precise as the scheduler's clock (nanoseconds), and blind
to other people's work on the same CPUs. The whole host's CPU time (``host_busy_ns``) and
``ksoftirqd``'s run time are read beside it to show how much escaped and how busy the host was.

Readers are pure parsers plus thin file reads; ``AccountingCgroup`` is the one effect (a cgroup
we create, fill with our PIDs, and remove).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cosample.costmodel.errors import HarnessError

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Clock ticks per second of /proc/stat and /proc/PID/stat.
TICKS = os.sysconf("SC_CLK_TCK")
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


# pure parsers ---------------------------------------------------------------------------------
def cpu_budget(requested: float | None) -> float:
    """The CPUs a server's forwarding may use: ``requested`` (``--cpu-budget``), else all of them."""
    budget = requested if requested is not None else float(os.cpu_count() or 1)
    if not 0 < budget <= 4096:
        raise HarnessError(f"--cpu-budget must be in (0, 4096] CPUs, got {budget!r}")
    return budget


def parse_schedstat(text: str) -> int:
    """Nanoseconds on CPU from ``/proc/PID/task/TID/schedstat`` (run, wait, slices)."""
    return parse_schedstat_fields(text)[0]


def parse_schedstat_fields(text: str) -> tuple[int, int, int]:
    """``(run ns, run-queue wait ns, timeslices)`` from ``/proc/PID/task/TID/schedstat``."""
    try:
        run, wait, slices = (int(v) for v in text.split()[:3])
    except ValueError:
        raise HarnessError(f"unexpected schedstat content {text[:60]!r}") from None
    return run, wait, slices


def parse_proc_stat(text: str) -> dict[str, int]:
    """The all-CPU line of ``/proc/stat`` as ticks per field, plus ``busy`` (all but idle)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = dict(zip(PROC_STAT_FIELDS, (int(v) for v in parts[1:9])))
            if len(values) < len(PROC_STAT_FIELDS):
                break
            values["busy"] = (
                sum(values.values()) - values["idle"] - values["iowait"] - values["steal"]
            )
            return values
    raise HarnessError("/proc/stat has no complete 'cpu' line")


def parse_cpu_stat_v2(text: str) -> int:
    """Nanoseconds used, from a cgroup v2 ``cpu.stat`` (``usage_usec``)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) * 1000
    raise HarnessError("cgroup cpu.stat has no usage_usec line")


# readers --------------------------------------------------------------------------------------
def thread_run_ns(pid: int) -> int:
    """Run time of every thread of ``pid`` so far (0 when the process is gone)."""
    return thread_schedstat(pid)[0]


def thread_schedstat(pid: int) -> tuple[int, int, int]:
    """``(run ns, wait ns, timeslices)`` summed over the threads of ``pid`` (zeros when gone)."""
    total = [0, 0, 0]
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0, 0
    for tid in threads:
        try:
            fields = parse_schedstat_fields(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text())
        except OSError:
            continue  # the thread ended between the listing and the read
        total = [t + f for t, f in zip(total, fields)]
    return total[0], total[1], total[2]


def kernel_thread_pids(prefix: str) -> list[int]:
    """PIDs of kernel threads whose name starts with ``prefix`` (e.g. ``ksoftirqd/``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().startswith(prefix):
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def host_ticks() -> dict[str, int]:
    return parse_proc_stat(Path("/proc/stat").read_text())


def host_busy_ns() -> int:
    """CPU time every task on the host has used so far, nanoseconds: the cgroup v1 ``cpuacct``
    root's ``cpuacct.usage`` (the scheduler's clock) where mounted, else ``/proc/stat``'s busy
    ticks. Ticks sample which task a CPU runs at each tick, and miss work that wakes and sleeps
    between ticks: a worker busy 2 ms of every 10 read 0.27 CPUs in ``/proc/stat`` and 0.59 at
    the root, and the testbed's own 20-kpps forwarding (0.32 CPUs in its cgroup) read 0.01. The
    cgroup v2 root's ``cpu.stat`` is itself summed from those ticks, so it is not used."""
    usage = CGROUP_ROOT / "cpuacct" / "cpuacct.usage"
    try:
        return int(usage.read_text())
    except (OSError, ValueError):
        return host_ticks()["busy"] * 1_000_000_000 // TICKS


def pid_from_file(path: str | os.PathLike[str]) -> int:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{path}: cannot read a PID: {exc}") from None


def started_pid(process: subprocess.Popen | None) -> int:
    """The PID of a helper process a context manager started on entry (to account it)."""
    if process is None:
        raise HarnessError("a helper process was not started")
    return process.pid


def cgroup_usage_ns(path: Path) -> int:
    """CPU time used by a cgroup directory (v1 cpuacct or v2), nanoseconds."""
    try:
        if (path / "cpuacct.usage").exists():
            return int((path / "cpuacct.usage").read_text())
        return parse_cpu_stat_v2((path / "cpu.stat").read_text())
    except (OSError, ValueError) as exc:
        raise HarnessError(f"cgroup {path}: cannot read CPU usage: {exc}") from None


def accounting_hierarchy() -> Path:
    """Where CPU usage of a new cgroup can be read: the cgroup v1 ``cpuacct`` hierarchy when
    mounted, else the cgroup v2 hierarchy (``/sys/fs/cgroup``, or ``unified`` on hybrid hosts)."""
    for candidate in (CGROUP_ROOT / "cpuacct", CGROUP_ROOT / "unified", CGROUP_ROOT):
        if (candidate / "cpuacct.usage").exists() or (
            candidate / "cgroup.subtree_control"
        ).exists():
            return candidate
    raise HarnessError(f"no cgroup hierarchy with CPU accounting under {CGROUP_ROOT}")


# the one effect -------------------------------------------------------------------------------
class AccountingCgroup:
    """A cgroup of ours whose CPU usage is the calibration's cost. Created on enter; on exit its
    remaining processes go back to the parent and the directory is removed."""

    def __init__(self, name: str, hierarchy: Path | None = None) -> None:
        if not name.replace("-", "").isalnum():
            raise HarnessError(f"cgroup name {name!r}: letters, digits and '-' only")
        self.name = name
        self.hierarchy = hierarchy
        self.path: Path | None = None

    def __enter__(self) -> "AccountingCgroup":
        hierarchy = self.hierarchy or accounting_hierarchy()
        path = hierarchy / self.name
        try:
            path.mkdir()
        except FileExistsError:
            raise HarnessError(
                f"cgroup {path} exists: another calibration with this prefix is "
                f"running, or one was killed (remove it with rmdir)"
            ) from None
        except OSError as exc:
            raise HarnessError(
                f"cannot create cgroup {path}: {exc.strerror} (needs root)"
            ) from None
        self.path = path
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads; children it starts later follow)."""
        if self.path is None:
            raise HarnessError("cgroup not created yet")
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except ProcessLookupError:
            return  # exited already: its time was spent outside, which the rows will show
        except OSError as exc:
            raise HarnessError(f"cannot move PID {pid} into {self.path}: {exc.strerror}") from None

    def usage_ns(self) -> int:
        if self.path is None:
            raise HarnessError("cgroup not created yet")
        return cgroup_usage_ns(self.path)

    def close(self) -> None:
        if self.path is None:
            return
        parent = self.path.parent / "cgroup.procs"
        for _ in range(3):
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                break
            for pid in pids:
                try:
                    parent.write_text(pid)
                except OSError:
                    continue
            try:
                self.path.rmdir()
                break
            except OSError:
                time.sleep(0.1)  # a process was exiting; try again
        self.path = None


# snapshots ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuSnapshot:
    """CPU time so far, nanoseconds: ``counted`` is the cost; the others show where time went."""

    counted: int  # the accounting cgroup (sender, receiver, ovs-vswitchd, their softirq)
    ovs: int  # ovs-vswitchd's threads (a part of ``counted``)
    ksoftirqd: int  # softirq work deferred to ksoftirqd (not in ``counted``)
    host_busy: int  # the whole host, all CPUs, everyone's work (``host_busy_ns``)
    host_softirq: int  # the whole host's softirq ticks (tick-sampled)
    #: per role (``sender``, ``receiver``: the iperf3 processes, when known) their threads'
    #: ``(run ns, run-queue wait ns, timeslices)``; ``ovs`` too, for its wait and slices
    roles: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)

    def per_second(self, before: "CpuSnapshot", seconds: float) -> dict[str, float]:
        """CPUs used over an interval (CPU-seconds per second), by source; per role also the
        CPUs' worth of time it waited to run (``wait_ROLE``) and times it ran (``slices_ROLE``,
        per second)."""
        values = {
            f"cpu_{name}": (getattr(self, name) - getattr(before, name)) / 1e9 / seconds
            for name in ("counted", "ovs", "ksoftirqd", "host_busy", "host_softirq")
        }
        for role, (run, wait, slices) in self.roles.items():
            run0, wait0, slices0 = before.roles.get(role, (run, wait, slices))
            if role != "ovs":
                values[f"cpu_{role}"] = (run - run0) / 1e9 / seconds
            values[f"wait_{role}"] = (wait - wait0) / 1e9 / seconds
            values[f"slices_{role}"] = (slices - slices0) / seconds
        return values


@dataclass
class CpuAccounting:
    """Takes ``CpuSnapshot``s: ``counted`` from ``usage`` (a cgroup's reader), ``ovs`` from the
    ovs-vswitchd PIDs given, the rest from /proc."""

    usage: Callable[[], int]
    ovs_pids: Iterable[int] = ()
    #: role -> PID of a process whose threads are read per snapshot (``sender``, ``receiver``)
    role_pids: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ovs_pids = tuple(self.ovs_pids)
        self._ksoftirqd = tuple(kernel_thread_pids("ksoftirqd/"))

    def snapshot(self) -> CpuSnapshot:
        ticks = host_ticks()
        ovs = [thread_schedstat(pid) for pid in self.ovs_pids]
        roles = {role: thread_schedstat(pid) for role, pid in self.role_pids.items()}
        if ovs:
            roles["ovs"] = tuple(sum(values) for values in zip(*ovs))
        return CpuSnapshot(
            counted=self.usage(),
            ovs=sum(run for run, _, _ in ovs),
            ksoftirqd=sum(thread_run_ns(pid) for pid in self._ksoftirqd),
            host_busy=host_busy_ns(),
            host_softirq=ticks["softirq"] * 1_000_000_000 // TICKS,
            roles=roles,
        )


class CgroupScope:
    """The testbed's scope: a cgroup of ours holding ovs-vswitchd, the iperf3 server and every
    client run; use as a context manager around the calibration."""

    def __init__(self, name: str, ovs_pid: int, budget_cpus: float) -> None:
        self.cgroup = AccountingCgroup(name)
        self.ovs_pid, self.budget_cpus = ovs_pid, budget_cpus
        self._accounting: CpuAccounting | None = None

    def __enter__(self) -> "CgroupScope":
        self.cgroup.__enter__()
        try:
            self.cgroup.add(self.ovs_pid)
        except BaseException:
            self.cgroup.close()
            raise
        self._accounting = CpuAccounting(self.cgroup.usage_ns, (self.ovs_pid,))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cgroup.close()

    def adopt(self, pid: int, role: str | None = None) -> None:
        """Count ``pid`` from now on; ``role`` (``sender``/``receiver``) also records its own
        threads' time per phase (the latest process of a role replaces the earlier one)."""
        self.cgroup.add(pid)
        if role is not None and self._accounting is not None:
            self._accounting.role_pids[role] = pid

    def snapshot(self) -> CpuSnapshot:
        if self._accounting is None:
            raise HarnessError("accounting scope not entered")
        return self._accounting.snapshot()

    def describe(self) -> dict[str, object]:
        return {
            "accounting": f"cgroup {self.cgroup.path} (ovs-vswitchd, the load's sender and "
            f"receiver: iperf3, or the flow generator and its sink; and the "
            f"softirq work run in their context)",
            "budget_cpus": self.budget_cpus,
        }


class ExistingScope:
    """A real server's scope: cgroups that already exist (e.g. ovs-vswitchd's service and the
    VMs' slice), read only; nothing is moved or created."""

    def __init__(
        self, cgroups: Iterable[str | os.PathLike[str]], ovs_pid: int | None, budget_cpus: float
    ) -> None:
        self.paths = tuple(Path(path) for path in cgroups)
        if not self.paths:
            raise HarnessError("name at least one cgroup to account (--account-cgroup)")
        for path in self.paths:
            cgroup_usage_ns(path)  # fails now, naming the path, rather than mid-run
        self.budget_cpus = budget_cpus
        self._accounting = CpuAccounting(self.usage_ns, (ovs_pid,) if ovs_pid else ())

    def __enter__(self) -> "ExistingScope":
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def adopt(self, pid: int, role: str | None = None) -> None:
        """Nothing to do: the load runs in the VMs, whose cgroups are already counted."""

    def usage_ns(self) -> int:
        return sum(cgroup_usage_ns(path) for path in self.paths)

    def snapshot(self) -> CpuSnapshot:
        return self._accounting.snapshot()

    def describe(self) -> dict[str, object]:
        return {
            "accounting": "cgroups " + ", ".join(map(str, self.paths)),
            "budget_cpus": self.budget_cpus,
        }


def cgroup_path(text: str) -> Path:
    """An ``--account-cgroup`` argument: an absolute directory, or a path relative to the
    accounting hierarchy (``system.slice/openvswitch-switch.service``)."""
    path = Path(text)
    return path if path.is_absolute() else accounting_hierarchy() / path


def cost_row(
    cpu: Mapping[str, float], forwarded_pps: float, budget_cpus: float
) -> dict[str, float]:
    """The CPU method's row values: nanoseconds per forwarded packet and the capacity they
    imply, ``budget / cost`` (the law's ``T``), from CPUs used and packets per second."""
    if forwarded_pps <= 0 or cpu["cpu_counted"] <= 0:
        raise HarnessError(
            f"no cost to measure: {forwarded_pps:g} packets/s forwarded using "
            f"{cpu['cpu_counted']:g} CPUs; did the load reach the receiver?"
        )
    cost_s = cpu["cpu_counted"] / forwarded_pps
    return {"cost_ns_per_packet": cost_s * 1e9, "throughput_pps": budget_cpus / cost_s}
