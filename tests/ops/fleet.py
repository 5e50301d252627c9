"""A small fleet on loopback for the operations tests: controller, collector, one agent and a
Prometheus server, each a real process of its own, stopped by PID.

The controller serves the signed plan and its metrics; the collector reads the plan from it
and serves estimates; the agent (host s2, a private dummy-datapath OVS, no root needed) fetches
and verifies the plan from the controller. sFlow from the three servers is simulated as OVS
would send it for the plan in force (``cosample.lab.sflowstream``), paced in real time, so the
collector's estimates and intervals are those of the daemon itself.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: Packets each server's VMs send per round of simulated sFlow (two seconds).
TRUTH = {"s1": 6_000, "s2": 800, "s3": 400}
ROUND_S = 2.0


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port nobody listens on now (the kernel's pick); the daemon binds it moments later."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read()


def reachable(url: str) -> bool:
    try:
        get(url, timeout_s=2.0)
        return True
    except (urllib.error.URLError, OSError):
        return False


class Daemon:
    """One process, its output in files; ``stop`` signals its PID only, then waits."""

    def __init__(self, name: str, argv: list[str], directory: Path) -> None:
        self.name = name
        self.stderr_path = directory / f"{name}.stderr"
        with open(directory / f"{name}.stdout", "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def cosample(*args: str) -> list[str]:
    return [sys.executable, "-m", "cosample", *args]


@dataclass
class Sender:
    """Simulated sFlow for the plan the controller serves, a round every ``ROUND_S``, in a thread;
    each round also a truncated datagram and one from an agent no plan knows (two named drop
    reasons, so the loss panels and alerts have something to show)."""

    plan_url: str
    target: tuple[str, int]
    rounds: int = 0
    stop_event: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "Sender":
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        from datetime import datetime, timezone

        from cosample.errors import CosampleError
        from cosample.lab.agentsource import AgentSender
        from cosample.lab.sflowstream import simulate
        from cosample.plan.document import parse_document

        sender = AgentSender()  # each datagram from its agent's address, as the collector requires
        try:
            while not self.stop_event.is_set():
                try:  # the newest plan whose not_before has come, as agents pick it
                    now = datetime.now(timezone.utc)
                    plan = max(
                        (
                            p
                            for p in parse_document(get(self.plan_url))
                            if p.not_before is None or p.not_before <= now
                        ),
                        key=lambda p: p.version,
                    )
                except (urllib.error.URLError, OSError, ValueError, CosampleError):
                    self.stop_event.wait(0.2)
                    continue
                stream = simulate(
                    plan, TRUTH, duration_s=ROUND_S, start=time.time(), seed=self.rounds
                )
                self._send(stream.datagrams, sender)
                if stream.datagrams:
                    self._strays(stream.datagrams[0][1], sender)
                self.rounds += 1
        finally:
            sender.close()

    def _send(self, datagrams, sender) -> None:
        began, first = time.monotonic(), datagrams[0][0] if datagrams else 0.0
        for moment, data in datagrams:
            if self.stop_event.is_set():
                return
            delay = (moment - first) - (time.monotonic() - began)
            if delay > 0:
                time.sleep(delay)
            sender.send(data, self.target)
        rest = ROUND_S - (time.monotonic() - began)
        if rest > 0:
            self.stop_event.wait(rest)

    def _strays(self, datagram: bytes, sender) -> None:
        sender.send(datagram[:20], self.target)  # truncated, from its own agent
        # the same datagram from agent address 127.51.100.77, which no plan names
        sender.send(datagram[:8] + bytes([127, 51, 100, 77]) + datagram[12:], self.target)


def inventory_document(collector: str) -> dict:
    """Three servers as the controller's tests build them; s1 sends far more than the others."""
    from controller_helpers import inventory_doc

    document = inventory_doc([20_000.0, 20_000.0, 20_000.0])
    document["sflow"] = {"collector": collector}
    return document


def write_json(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path
