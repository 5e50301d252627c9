"""Collector memory under a flood of datagrams from agents nobody planned (issue 23).

Starts ``cosample collector run`` with a small plan, sends it ``--datagrams`` real sFlow
datagrams (tests/data/sflow/data-1140.pcap: five flow samples) over loopback, each with a
random 127.0.0.0/8 agent address in its header and sent from that address (so it passes the
source check and meets the next rule: an agent nobody planned, ``unplanned_agent``), paced at
``--rate``, and reads the daemon's resident memory (``VmRSS``) after every tenth of them, once
the daemon has processed what was sent (datagrams counted or dropped stop moving). Before
issue 23, 300,000 such datagrams took the daemon from 84 MB to 477 MB, never freed. The daemon
is stopped on any exit (and dies with this process: ``PR_SET_PDEATHSIG``).

    python -m research.collector_flood [--datagrams 1000000] [--rate 20000]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from cosample.collector.pcap import udp_payloads
from cosample.experiments.bench_replay import die_with_parent
from cosample.lab.agentsource import AgentSender

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "sflow" / "data-1140.pcap"


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Daemon:
    """``cosample collector run`` on loopback, stopped by ``stop`` (or with this process)."""

    def __init__(self, plan: Path) -> None:
        self.port, self.http = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cosample",
                "collector",
                "run",
                "--plan",
                str(plan),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--metrics-port",
                str(self.http),
                "--name",
                "flood",
                "--window",
                "30",
                "--insecure-unsigned",
            ],  # its own unsigned plan
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 60
        while self.received() is None:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("collector_flood: the collector did not start")
            time.sleep(0.2)

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def received(self) -> float | None:
        """Datagrams the daemon took in: ingested, or refused by the source check."""
        counts = [
            self.metric(name)
            for name in (
                "cosample_collector_datagrams_total",
                'cosample_collector_dropped_total{reason="unplanned_agent"}',
                'cosample_collector_dropped_total{reason="source_mismatch"}',
            )
        ]
        return None if counts[0] is None else sum(c or 0.0 for c in counts)

    def settle(self, quiet_s: float = 2.5) -> float:
        last, since = self.received(), time.monotonic()
        while time.monotonic() - since < quiet_s:
            time.sleep(0.5)
            now = self.received()
            if now != last:
                last, since = now, time.monotonic()
        return last or 0.0

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def plan_document() -> dict:
    from cosample.experiments.bench_collector import plan_document as bench_plan

    return bench_plan(4)


def flood(total: int, rate: float, steps: int = 10, seed: int = 0, log=print) -> list[dict]:
    """Rows (datagrams sent, processed, RSS MB) at 0 and after every ``total / steps``."""
    template = bytearray(next(udp_payloads(CAPTURE))[1])
    rng = random.Random(seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cosample-flood-") as tmp:
        plan = Path(tmp) / "plan.json"
        plan.write_text(json.dumps(plan_document()))
        daemon = Daemon(plan)
        sender = AgentSender()
        try:
            rows.append({"sent": 0, "processed": daemon.settle(), "rss_mb": daemon.rss_mb()})
            log(f"0 datagrams: {rows[-1]['rss_mb']:.1f} MB")
            sent, step = 0, total // steps
            target = ("127.0.0.1", daemon.port)
            while sent < total:
                start, batch = time.monotonic(), 0
                for _ in range(step):
                    template[8:12] = bytes(
                        (127, rng.randrange(1, 255), rng.randrange(256), rng.randrange(1, 255))
                    )
                    sender.send(bytes(template), target)
                    sent += 1
                    batch += 1
                    if batch % 500 == 0:
                        ahead = batch / rate - (time.monotonic() - start)
                        if ahead > 0:
                            time.sleep(ahead)
                rows.append({"sent": sent, "processed": daemon.settle(), "rss_mb": daemon.rss_mb()})
                log(
                    f"{sent} datagrams sent, {rows[-1]['processed']:.0f} processed: "
                    f"{rows[-1]['rss_mb']:.1f} MB"
                )
            rows[-1]["unplanned_agent_datagrams"] = daemon.metric(
                'cosample_collector_dropped_total{reason="unplanned_agent"}'
            )
        finally:
            sender.close()
            daemon.stop()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datagrams", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=20_000, help="datagrams/s (default 20000)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally-blocks stop the daemon
    rows = flood(args.datagrams, args.rate)
    first, last = rows[0], rows[-1]
    peak = max(row["rss_mb"] for row in rows)
    print(
        f"RSS: {first['rss_mb']:.1f} MB before, {last['rss_mb']:.1f} MB after "
        f"{last['sent']} datagrams from random agents ({last['processed']:.0f} processed), "
        f"peak {peak:.1f} MB; growth from the first tenth to the end "
        f"{last['rss_mb'] - rows[1]['rss_mb']:+.1f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
