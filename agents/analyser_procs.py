"""The analysers as the agent's child processes: start, stop by PID, restart (the effects
around ``analysers.supervise``).

``ProcessTable`` is the one interface to processes (the real one here, a fake in the unit
tests): spawn an argument list (never a shell), poll, signal, and find an analyser a previous
agent left running. Each child writes its output to ``analyser.log`` and its PID and argument
list to ``pid.json`` in its own state directory (0700, inside the agent's): an agent killed
without stopping its children finds them again by PID when it restarts (the PID's command line
must still be the argument list, so a reused PID is never taken for an analyser) instead of
starting a second copy. A stop sends SIGTERM, waits ``stop_s``, then sends SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from cosample.agents.analysers import (
    ANALYSERS_DIR,
    RECORD_KEY_FILE,
    Child,
    StartAnalyser,
    StopAnalyser,
    WantedAnalyser,
    describe,
    exited,
    supervise,
    wanted_analysers,
)
from cosample.agents.ledger import private_dir
from cosample.agents.state import short_hash
from cosample.dataplane.recordkeys import read_key
from cosample.files import write_bytes_atomic

PID_FILE, LOG_FILE = "pid.json", "analyser.log"
#: A child's log is started afresh when it is larger than this at a (re)start.
MAX_LOG_BYTES = 1 << 20
#: After SIGKILL, how long to wait for the process to be gone.
KILL_WAIT_S = 2.0
log = logging.getLogger("cosample.agents")


def wanted_for(appmon, config) -> dict[str, WantedAnalyser]:
    """The analysers a host's desired appmon state (None: none) asks, with the agent's
    settings (its record secret read here, when records are asked)."""
    spec = appmon.spec if appmon is not None else ()
    secret = None
    if config.record_secret and any(
        item.get("send_records") or item.get("receive_records") for item in spec
    ):
        try:
            secret = read_key(config.record_secret, "record_secret")
        except ValueError as exc:  # the analysers then refuse to start; the log says why
            log.error("analysers: %s", exc)
    return wanted_analysers(
        spec,
        host=config.host,
        state_dir=config.state_dir,
        window_s=config.analyser_window_s,
        snapshot_key=config.analyser_key,
        record_secret=secret,
        insecure_records=config.insecure_records,
    )


class ProcessTable(Protocol):
    def spawn(self, argv: tuple[str, ...], log: Path) -> int: ...
    def poll(self, pid: int) -> tuple[bool, int | None]:
        """(exited, exit code if known)."""

    def signal(self, pid: int, number: int) -> None: ...
    def find(self, argv: tuple[str, ...], pid: int) -> bool:
        """Whether ``pid`` is a live process running exactly ``argv`` (adoption)."""


class RealProcesses:
    """Processes of this machine: ``subprocess.Popen`` for our children, ``/proc`` for adopted
    ones (not our children: their exit code is unknown)."""

    def __init__(self) -> None:
        self.children: dict[int, subprocess.Popen] = {}

    def spawn(self, argv: tuple[str, ...], log: Path) -> int:
        if log.exists() and log.stat().st_size > MAX_LOG_BYTES:
            log.unlink()
        with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                close_fds=True,
                start_new_session=True,
            )
        self.children[process.pid] = process
        return process.pid

    def poll(self, pid: int) -> tuple[bool, int | None]:
        process = self.children.get(pid)
        if process is not None:
            code = process.poll()
            if code is None:
                return False, None
            del self.children[pid]
            return True, code
        try:  # not our child: gone, or a zombie whose parent has not reaped it yet
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True, None
        return state in ("Z", "X"), None

    def signal(self, pid: int, number: int) -> None:
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass

    def find(self, argv: tuple[str, ...], pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return cmdline.split(b"\0")[:-1] == [a.encode() for a in argv]


class Supervisor:
    """This host's analysers: ``step(wanted)`` once per agent cycle."""

    def __init__(
        self,
        processes: ProcessTable,
        state_dir: str | Path,
        *,
        stop_s: float = 5.0,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.processes, self.root = processes, Path(state_dir) / ANALYSERS_DIR
        self.stop_s, self.backoff_s, self.backoff_max_s = stop_s, backoff_s, backoff_max_s
        self.clock, self.sleep = clock, sleep
        self.children: dict[str, Child] = {}
        self.wanted: dict[str, WantedAnalyser] = {}
        self.adopted = False

    @classmethod
    def from_config(cls, config) -> "Supervisor":
        """The agent's: real processes, timings from its configuration."""
        return cls(
            RealProcesses(),
            config.state_dir,
            stop_s=config.analyser_stop_s,
            backoff_s=config.analyser_backoff_s,
            backoff_max_s=config.analyser_backoff_max_s,
        )

    def step(self, wanted: dict[str, WantedAnalyser]) -> tuple[list[str], list[str]]:
        """Converge the children to ``wanted``: (what was done, what failed)."""
        self.wanted = wanted
        if not self.adopted:
            self._adopt()
        now = self.clock()
        self._reap(now)
        done: list[str] = []
        failed: list[str] = []
        for command in supervise(wanted, self.children, now):
            try:
                if isinstance(command, StopAnalyser):
                    self._stop(command.name)
                else:
                    self._start(command, now)
                done.append(command.describe())
                log.info("analysers: %s", done[-1])
            except OSError as exc:  # a start that cannot exec: retried after its back-off
                failed.append(f"{command.describe()}: {exc}")
                if isinstance(command, StartAnalyser):
                    a = command.analyser
                    before = self.children.get(a.name)
                    self.children[a.name] = exited(
                        Child(
                            a.name,
                            a.argv,
                            a.state_dir,
                            None,
                            now,
                            failures=before.failures if before else 0,
                            restarts=before.restarts if before else 0,
                        ),
                        None,
                        now,
                        self.backoff_s,
                        self.backoff_max_s,
                    )
        return done, failed

    def stop_all(self) -> list[str]:
        return self.step({})[0]

    def status(self) -> list[dict]:
        return describe(self.children, self.wanted, self.clock())

    # pieces --------------------------------------------------------------------------------------
    def _reap(self, now: float) -> None:
        for name, child in list(self.children.items()):
            if child.pid is not None:
                gone, code = self.processes.poll(child.pid)
                if gone:
                    self.children[name] = exited(
                        child, code, now, self.backoff_s, self.backoff_max_s
                    )
            elif name not in self.wanted:
                del self.children[name]

    def _start(self, command: StartAnalyser, now: float) -> None:
        analyser = command.analyser
        directory = private_dir(analyser.state_dir)
        private_dir(self.root)
        if analyser.record_key is not None:  # the pair's key, for the child's --record-key
            for old in directory.glob(RECORD_KEY_FILE.format("*")):
                old.unlink()
            name = RECORD_KEY_FILE.format(short_hash(analyser.record_key.hex()))
            write_bytes_atomic(directory / name, analyser.record_key.hex().encode(), mode=0o600)
        pid = self.processes.spawn(analyser.argv, directory / LOG_FILE)
        before = self.children.get(analyser.name)
        self.children[analyser.name] = Child(
            analyser.name,
            analyser.argv,
            analyser.state_dir,
            pid,
            now,
            failures=before.failures if before else 0,
            restarts=(before.restarts + 1) if before and command.restart else 0,
        )
        text = json.dumps({"pid": pid, "argv": list(analyser.argv)}) + "\n"
        write_bytes_atomic(directory / PID_FILE, text.encode(), mode=0o600)

    def _stop(self, name: str) -> None:
        child = self.children[name]
        pid = child.pid
        assert pid is not None
        self.processes.signal(pid, signal.SIGTERM)
        code = self._wait(pid, self.stop_s)
        if code is False:
            self.processes.signal(pid, signal.SIGKILL)
            code = self._wait(pid, KILL_WAIT_S)
        (Path(child.state_dir) / PID_FILE).unlink(missing_ok=True)
        del self.children[name]

    def _wait(self, pid: int, seconds: float) -> int | None | bool:
        """The exit code (None: unknown) once ``pid`` exited, False if it did not in time."""
        deadline = self.clock() + seconds
        while True:
            gone, code = self.processes.poll(pid)
            if gone:
                return code
            if self.clock() >= deadline:
                return False
            self.sleep(0.05)

    def _adopt(self) -> None:
        """Children a previous agent left running (their ``pid.json`` and command line)."""
        self.adopted = True
        if not self.root.is_dir():
            return
        now = self.clock()
        for directory in sorted(self.root.iterdir()):
            try:
                record = json.loads((directory / PID_FILE).read_text())
                pid, argv = int(record["pid"]), tuple(str(a) for a in record["argv"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if directory.name not in self.children and self.processes.find(argv, pid):
                self.children[directory.name] = Child(
                    directory.name, argv, str(directory), pid, now
                )
