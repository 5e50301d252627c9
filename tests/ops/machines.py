"""Machines on one computer, for running the docs' commands exactly as written.

A ``Machine`` is what a command typed as root on a fresh host sees, on this one computer:

- its own network namespace, with the address the docs give it (``192.0.2.10`` ...; namespaces
  are private, so documentation addresses and well-known ports clash with nothing), on a link
  to the other machines, and every machine's name in its ``/etc/hosts``;
- its own mount namespace, kept between commands, whose root is an overlay on this computer's
  file system: what the commands write anywhere lands in the machine's own layer (in memory,
  ``LAYER_BYTES`` at most), never in the computer's; ``/proc``, ``/sys`` (its own links),
  ``/dev``, an empty ``/run`` and ``/tmp`` mounted as a running system has them; this checkout
  at ``/opt/cosample`` (read only; its ``.venv`` is the virtualenv the tests run in);
- its own host name (UTS namespace);
- ``systemctl`` and ``journalctl`` that run the unit files installed under
  ``/etc/systemd/system`` (``tests/ops/unitrunner.py``: systemd is not PID 1 here), each
  daemon's PID and log kept in the machine's directory.

``stop`` stops every unit (``ExecStop`` included), kills by PID what is left, removes the
namespaces and the mounts: what the machines leave is their directories. Names of namespaces and
links carry a tag unique to the run. Needs root, ``unshare``, ``nsenter`` and overlayfs.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cosample.dataplane.run import run

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("unitrunner.py")
#: root's login PATH on Debian, and a clean environment like a login shell's
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The size of a machine's changes to its file system (they are kept in memory).
LAYER_BYTES = 1 << 30
#: where the runner keeps PIDs and logs, inside a machine (a folder of its directory)
UNITS_INSIDE = "/run/unit-runner"


def machines_available() -> str | None:
    """None when machines can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network and mount namespaces)"
    for program in ("ip", "unshare", "nsenter", "mount"):
        if shutil.which(program) is None:
            return f"{program} not installed"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "no overlayfs in this kernel"
    if not (ROOT / ".venv" / "bin" / "cosample").exists():
        return f"no virtualenv at {ROOT / '.venv'} (bin/bootstrap.sh makes it)"
    return None


@dataclass
class Done:
    """A finished command: its exit status and output."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class Machine:
    name: str
    address: str
    directory: Path
    netns: str
    started: bool = False

    @property
    def units(self) -> Path:
        """The runner's PIDs and logs (``UNITS_INSIDE`` in the machine)."""
        return self.directory / "units"

    def enter(self) -> list[str]:
        """The argv prefix that runs a program inside this machine."""
        ns = self.directory / "ns"
        return [
            "nsenter",
            f"--net=/run/netns/{self.netns}",
            f"--mount={ns / 'mnt'}",
            f"--uts={ns / 'uts'}",
            "--wdns=/root",
        ]

    def shell(self, script: str, timeout_s: float = 120.0, stdin: str | None = None) -> Done:
        """``script`` run by bash as root logged in on this machine (``-e``: the first failing
        command ends it), ``stdin`` its input. A command still running after ``timeout_s`` is
        killed, with its process group."""
        argv = [
            *self.enter(),
            "env",
            "-i",
            f"PATH={PATH}",
            "HOME=/root",
            "LANG=C.UTF-8",
            "USER=root",
            "LOGNAME=root",
            "SHELL=/bin/bash",
            "bash",
            "-e",
            "-c",
            script,
        ]
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\n(killed after {timeout_s:g} s)"
            return Done(-9, out, err)
        return Done(process.returncode, out, err)

    def logs(self) -> str:
        """The tail of every unit's log (what ``journalctl -u`` shows)."""
        return "\n".join(
            f"--- {self.name}: {log.stem}\n{log.read_text(errors='replace')[-4000:]}"
            for log in sorted(self.units.glob("*.log"))
        )

    def pids(self) -> dict[str, int]:
        """The unit runner's daemons on this machine that still run, by unit."""
        out = {}
        for path in self.units.glob("*.pid"):
            try:
                pid = int(path.read_text())
            except (OSError, ValueError):
                continue
            if _alive(pid):
                out[path.stem] = pid
        return out


@dataclass
class Network:
    """Machines on one link, named and addressed as the docs do; a context manager."""

    directory: Path
    tag: str
    hosts: dict[str, str]  # name -> address, e.g. {"controller.example": "192.0.2.10"}
    aliases: dict[str, list[str]] = field(default_factory=dict)  # name -> other names
    #: folders of this computer shown inside a machine: {name: {path inside: path outside}}
    binds: dict[str, dict[str, Path]] = field(default_factory=dict)
    machines: dict[str, Machine] = field(default_factory=dict)
    _namespaces: list[str] = field(default_factory=list)

    def __enter__(self) -> "Network":
        try:
            self._build()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _build(self) -> None:
        hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + "".join(
            f"{address}\t{' '.join([name, *self.aliases.get(name, [])])}\n"
            for name, address in self.hosts.items()
        )
        bridge = f"{self.tag}br"
        run(["ip", "netns", "add", bridge])
        self._namespaces.append(bridge)
        run(["ip", "-n", bridge, "link", "add", "sw", "type", "bridge"])
        run(["ip", "-n", bridge, "link", "set", "sw", "up"])
        for k, (name, address) in enumerate(self.hosts.items()):
            netns = f"{self.tag}m{k}"
            run(["ip", "netns", "add", netns])
            self._namespaces.append(netns)
            machine = Machine(name, address, self.directory / name, netns)
            self.machines[name] = machine
            run(["ip", "-n", netns, "link", "set", "lo", "up"])
            # the machine's eth0, its other end a port of the link's bridge
            run(["ip", "-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{k}"])
            run(["ip", "-n", netns, "link", "set", f"p{k}", "netns", bridge])
            run(["ip", "-n", bridge, "link", "set", f"p{k}", "master", "sw", "up"])
            run(["ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0"])
            run(["ip", "-n", netns, "link", "set", "eth0", "up"])
            self._mount(machine, hosts, self.binds.get(name, {}))

    def _mount(self, machine: Machine, hosts: str, binds: dict[str, Path]) -> None:
        d = machine.directory
        for part in ("ns", "sbin", "units", "layer", "root"):
            (d / part).mkdir(parents=True, exist_ok=True)
        for tool in ("systemctl", "journalctl"):
            shim = d / "sbin" / tool
            shim.write_text(
                f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {tool!r}\n"
                f"runpy.run_path({str(RUNNER)!r}, run_name='__main__')\n"
            )
            shim.chmod(0o755)
        # a private mount point holding the namespaces' files (unshare needs one)
        run(["mount", "--bind", str(d / "ns"), str(d / "ns")])
        run(["mount", "--make-private", str(d / "ns")])
        (d / "ns" / "mnt").touch()
        (d / "ns" / "uts").touch()
        machine.started = True
        new = f"{d}/root"
        binds = {
            "/opt/cosample": ROOT,
            str(ROOT): ROOT,  # the virtualenv's scripts name their interpreter by this path
            "/usr/local/sbin": d / "sbin",
            UNITS_INSIDE: d / "units",
            **binds,
        }
        mounts = "\n".join(
            f"mkdir -p {shlex.quote(new + inside)}\n"
            f"mount --bind {shlex.quote(str(outside))} {shlex.quote(new + inside)}"
            + (f"\nmount -o remount,bind,ro {shlex.quote(new + inside)}" if outside == ROOT else "")
            for inside, outside in binds.items()
        )
        # the whole file system an overlay on this computer's, its changes in memory; then
        # what a running system mounts, the folders above, and that overlay made the root
        setup = f"""set -e
mount -t tmpfs -o size={LAYER_BYTES},mode=0755 layer {d}/layer
mkdir {d}/layer/upper {d}/layer/work
mount -t overlay overlay -o lowerdir=/,upperdir={d}/layer/upper,workdir={d}/layer/work {new}
mount -t proc proc {new}/proc
mount -t sysfs sysfs {new}/sys
mount --rbind /dev {new}/dev
mount -t tmpfs -o mode=0755 run {new}/run
mount -t tmpfs -o mode=1777 tmp {new}/tmp
{mounts}
printf %s {shlex.quote(hosts)} > {new}/etc/hosts
echo {shlex.quote(machine.name)} > {new}/etc/hostname
hostname {shlex.quote(machine.name)}
cd {new}
mkdir -p .old-root
pivot_root . .old-root
umount -l /.old-root
rmdir /.old-root
"""
        run(
            [
                "nsenter",
                f"--net=/run/netns/{machine.netns}",
                "unshare",
                f"--mount={d / 'ns' / 'mnt'}",
                f"--uts={d / 'ns' / 'uts'}",
                "--propagation",
                "private",
                "sh",
                "-c",
                setup,
            ],
            timeout=30,
        )

    def stop(self) -> list[str]:
        """Stop every machine's units and daemons, remove namespaces and mounts; returns the
        problems met (empty when everything went)."""
        problems = []
        for machine in self.machines.values():
            if not machine.started:
                continue
            if machine.pids():
                done = machine.shell("systemctl stop " + " ".join(machine.pids()), timeout_s=120)
                if done.returncode != 0:
                    problems.append(f"{machine.name}: {done.stderr.strip()[-500:]}")
            for unit, pid in machine.pids().items():
                problems.append(f"{machine.name}: {unit} (pid {pid}) still ran; killed")
                _kill(pid)
            ns = machine.directory / "ns"
            for name in ("mnt", "uts"):
                run(["umount", str(ns / name)], check=False)
            run(["umount", str(ns)], check=False)
            machine.started = False
        for netns in reversed(self._namespaces):
            result = run(["ip", "netns", "del", netns], check=False)
            if result.returncode != 0 and "No such file" not in result.stderr:
                problems.append(f"namespace {netns}: {result.stderr.strip()}")
        self._namespaces.clear()
        return problems


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
