"""Names unique to the process that makes them, and proof of whose a leftover is.

Two test runs on one machine, or two pytest-xdist workers of one run, must never create the same
namespace or root-namespace link: ``run_prefix(kind)`` is ``kind`` followed by this process's
*run tag* (its pid in base 36, 5 characters: unique among running processes) and a counter,
e.g. ``am03ftk0``. Interface names are limited to 15 characters, so a kind is 1-3 letters and a
role after the prefix at most 6.

A run that crashes (SIGKILL, a lost machine, a set-up that failed before its ``with`` began)
leaves namespaces, links and the daemons inside them behind. Every namespace a rig creates gets
an *owner mark* on its loopback device, every root-namespace link one on itself (the link's
``alias``): ``cosample-lab pid=P start=T``, the creating process's pid and start time. ``sweep``
removes the namespaces and links whose names start with a given prefix **and** whose mark names
a process that no longer runs (the start time guards against a reused pid), or this very process
when no live rig of it holds the name; the processes inside such a namespace are stopped first.
A name without our mark, or with a live owner's, is never touched.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from cosample.dataplane.run import run

TAG_LENGTH = 5
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_MARK = re.compile(r"^cosample-lab pid=(\d+) start=(\d+)$")

#: Names held by live rigs of this process (added when created, removed when torn down).
_held: set[str] = set()
_count = -1


def run_tag(pid: int | None = None) -> str:
    """``pid`` (default: this process's) in base 36, zero-padded to ``TAG_LENGTH`` characters."""
    value = os.getpid() if pid is None else pid
    digits = ""
    while value:
        value, digit = divmod(value, 36)
        digits = _DIGITS[digit] + digits
    return digits.rjust(TAG_LENGTH, "0")


def run_prefix(kind: str) -> str:
    """``kind``, this process's run tag and one more character counting the prefixes this
    process made (so two rigs alive in one process differ too): the start of every name a rig
    makes, e.g. ``am03ftk0``. A kind is 1-3 letters or digits; 6 characters remain for a role."""
    global _count
    if not (kind.isascii() and kind.isalnum()) or not 1 <= len(kind) <= 3:
        raise ValueError(f"rig kind {kind!r}: expected 1-3 letters or digits")
    _count += 1
    return kind + run_tag() + _DIGITS[_count % 36]


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def mark() -> str:
    """This process's owner mark."""
    return f"cosample-lab pid={os.getpid()} start={_start_time(os.getpid()) or 0}"


def hold(name: str) -> None:
    """Record that a live rig of this process created ``name`` (a namespace or a link)."""
    _held.add(name)


def release(name: str) -> None:
    _held.discard(name)


def mark_namespace(namespace: str) -> None:
    """Write this process's owner mark on ``namespace``'s loopback device."""
    run(["ip", "-n", namespace, "link", "set", "lo", "alias", mark()])


def mark_link(link: str) -> None:
    """Write this process's owner mark on a root-namespace link."""
    run(["ip", "link", "set", link, "alias", mark()])


def abandoned(owner_mark: str | None, name: str) -> bool:
    """True when ``owner_mark`` proves ``name`` a leftover: its creator no longer runs, or it is
    this process and no live rig of it holds ``name``. Anything else (no mark, a foreign alias,
    a live owner) is not ours to remove."""
    match = _MARK.match(owner_mark or "")
    if not match:
        return False
    pid, start = int(match.group(1)), int(match.group(2))
    if pid == os.getpid() and start == (_start_time(pid) or 0):
        return name not in _held
    return _start_time(pid) != start


def _alias(argv_prefix: list[str], device: str) -> str | None:
    result = run([*argv_prefix, "-j", "link", "show", device], check=False)
    if result.returncode != 0:
        return None
    try:
        (link,) = json.loads(result.stdout or "[]")
    except ValueError:
        return None
    return link.get("ifalias")


def leftovers(prefix: str) -> tuple[list[str], list[str]]:
    """(namespaces, root-namespace links) whose names start with ``prefix`` and whose owner
    marks prove them abandoned."""
    listed = run(["ip", "netns", "list"], check=False).stdout.split("\n")
    namespaces = [
        name
        for name in (line.split(" ", 1)[0] for line in listed)
        if name.startswith(prefix) and abandoned(_alias(["ip", "-n", name], "lo"), name)
    ]
    links_json = run(["ip", "-j", "link", "show"], check=False).stdout or "[]"
    try:
        links = json.loads(links_json)
    except ValueError:
        links = []
    root_links = [
        link["ifname"]
        for link in links
        if link.get("ifname", "").startswith(prefix)
        and abandoned(link.get("ifalias"), link["ifname"])
    ]
    return namespaces, root_links


def stop_processes(pids: list[int], timeout_s: float = 5.0) -> None:
    """SIGTERM ``pids``, SIGKILL whichever still runs at the deadline."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _running(pid)]
        if pids:
            time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _ovsdb_of(pid: int) -> list[int]:
    """The ovsdb-server of an ovs-vswitchd we stop: the pid in the pidfile beside the switch's
    own, when that process's command line names the same directory (a private OvsInstance)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
    pidfiles = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--pidfile=")]
    if not argv or not argv[0].endswith("ovs-vswitchd") or not pidfiles:
        return []
    directory = Path(pidfiles[0]).parent
    try:
        db_pid = int((directory / "ovsdb-server.pid").read_text().strip())
        db_argv = Path(f"/proc/{db_pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return []
    return [db_pid] if "ovsdb-server" in db_argv and str(directory) in db_argv else []


def sweep(prefix: str) -> list[str]:
    """Remove the leftovers of ``prefix`` (``leftovers``): the processes in each namespace (and a
    private ovs-vswitchd's ovsdb-server), the namespaces, the links. Returns what it removed."""
    namespaces, links = leftovers(prefix)
    removed = []
    for namespace in namespaces:
        listed = run(["ip", "netns", "pids", namespace], check=False).stdout.split()
        pids = [int(pid) for pid in listed if pid.isdigit()]
        stop_processes(pids + [db for pid in pids for db in _ovsdb_of(pid)])
        if run(["ip", "netns", "del", namespace], check=False).returncode == 0:
            removed.append(f"namespace {namespace}")
    for link in links:
        if run(["ip", "link", "del", link], check=False).returncode == 0:
            removed.append(f"link {link}")
    return removed
