"""``cosample collector run`` as a real process on loopback, for the attack and fault tests."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_READY = re.compile(r"sFlow on (\S+):(\d+), HTTP on (\S+):(\d+)(?:, IPFIX on (\S+):(\d+))?")


class Daemon:
    """Starts the collector with ``--listen 127.0.0.1:0 --metrics-port 0`` (the ports it
    printed are ``listen`` and ``http``, and ``ipfix`` with ``--ipfix``); its stderr is kept in
    ``lines``. ``preexec`` runs in the child before exec (``RLIMIT_NOFILE`` there); ``prefix``
    goes before the command (``ip netns exec NS``)."""

    def __init__(
        self,
        plan: str | Path,
        *options: str,
        preexec: Callable[[], None] | None = None,
        timeout_s: float = 60.0,
        prefix: tuple[str, ...] = (),
    ) -> None:
        argv = [
            *prefix,
            sys.executable,
            "-m",
            "cosample",
            "collector",
            "run",
            "--plan",
            str(plan),
            "--listen",
            "127.0.0.1:0",
            "--metrics-port",
            "0",
            "--name",
            "c1",
            "--window",
            "600",
            "--export-interval",
            "0.2",
            "--plan-interval",
            "0.2",
            *options,
        ]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=preexec
        )
        self.lines: list[str] = []
        ready = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(ready,), daemon=True)
        self._reader.start()
        if not ready.wait(timeout_s) or self.process.poll() is not None:
            self.stop()
            raise AssertionError("collector did not start:\n" + "".join(self.lines))

    def _read(self, ready: threading.Event) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            match = _READY.search(line)
            if match:
                self.listen = (match[1], int(match[2]))
                self.http = (match[3], int(match[4]))
                self.ipfix = (match[5], int(match[6])) if match[5] else None
                ready.set()
        ready.set()  # exited: the caller sees it

    def get(self, path: str, timeout_s: float = 5.0) -> bytes:
        with urllib.request.urlopen(
            f"http://{self.http[0]}:{self.http[1]}{path}", timeout=timeout_s
        ) as response:
            return response.read()

    def snapshot(self):
        """The daemon's snapshot, or None before its first export (``served_snapshot``)."""
        return served_snapshot(self.get)

    def samples_of(self, server: str) -> int | None:
        """``server``'s samples in the snapshot; None before the first export."""
        snapshot = self.snapshot()
        return None if snapshot is None else snapshot.servers[server].samples

    def dropped(self) -> dict[str, int]:
        snapshot = self.snapshot()
        return {} if snapshot is None else dict(snapshot.dropped)

    def metrics(self) -> dict[str, dict[tuple, float]]:
        """name -> {labels (sorted items): value} from one scrape of ``/metrics``."""
        out: dict[str, dict[tuple, float]] = {}
        for family in text_string_to_metric_families(self.get("/metrics").decode()):
            for sample in family.samples:
                out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
        return out

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        return "".join(self.lines)


def counter(metrics: dict, name: str, **labels: str) -> float:
    return metrics.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def steady(send_one: Callable[[int], None], rate_per_s: float, seconds: float) -> int:
    """Call ``send_one(k)`` at ``rate_per_s`` for ``seconds`` (bounded, self-stopping); the
    number of calls."""
    start, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < seconds:
        while sent < rate_per_s * elapsed:
            send_one(sent)
            sent += 1
        time.sleep(0.002)
    return sent


def served_snapshot(get: Callable[[str], bytes]):
    """The snapshot ``get("/snapshot")`` serves, or None before the collector's first export
    (503 "no snapshot yet"): a test that polls must not read that as a failure."""
    from cosample.collector.snapshot import parse_snapshot

    try:
        return parse_snapshot(get("/snapshot"))
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return None
        raise
