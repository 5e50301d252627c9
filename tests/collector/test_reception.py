"""Issue 30, item 3: the collector never blocks reception, and the kernel's drops are a metric.

A plan server on loopback that trickles its answer (headers and body, seconds per read) held the
old receive loop, which fetched the plan itself: 40-65 % of the datagrams were lost. Against a
real daemon with a small receive buffer (so a stalled loop would overflow it within a fraction
of a read), datagrams sent at a steady rate while the plan server trickles are all counted.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from collector_daemon import Daemon, counter, steady
from collector_plans import FOUR, plan_document
from waiting import wait_for

from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import simulate
from cosample.plan.document import parse_plan

LOOPBACK = "127.29.0"
TRUTH = {"s1": 20_000, "s2": 1_000, "s3": 2_000, "s4": 8_000}
SMALL_BUFFER = 256 * 1024  # bytes: ~100 datagrams of the stream's size


class TrickleServer:
    """Serves ``body`` at /plan.json: the first answer at once, every later one trickled,
    status line, headers and body, over about ``trickle_s`` seconds. ``reads`` holds each
    request's (start, end) on the monotonic clock."""

    def __init__(self, body: bytes, trickle_s: float) -> None:
        self.body, self.trickle_s, self.reads = body, trickle_s, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                began = time.monotonic()
                parts = [
                    b"HTTP/1.0 200 OK\r\n",
                    b"Content-Type: application/json\r\n",
                    f"Content-Length: {len(owner.body)}\r\n".encode(),
                    b"\r\n",
                ]
                chunk = max(1, len(owner.body) // 8)
                parts += [owner.body[k : k + chunk] for k in range(0, len(owner.body), chunk)]
                pause = owner.trickle_s / len(parts) if owner.reads else 0.0
                try:
                    for part in parts:
                        self.wfile.write(part)
                        self.wfile.flush()
                        time.sleep(pause)
                except OSError:
                    pass
                owner.reads.append((began, time.monotonic()))

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/plan.json"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def plan():
    return plan_document(FOUR, agents=LOOPBACK)


def test_a_trickling_plan_server_loses_no_datagram(plan):
    server = TrickleServer(json.dumps(plan).encode(), trickle_s=2.0)
    daemon = Daemon(
        server.url,
        "--insecure-unsigned",
        "--plan-timeout",
        "4",
        "--receive-buffer",
        str(SMALL_BUFFER),
    )
    stream = simulate(parse_plan(json.dumps(plan).encode()), TRUTH, duration_s=3.0, seed=31)
    datagrams = [data for _, data in stream.datagrams]
    try:
        wait_for(
            lambda: (
                len(server.reads) >= 1
                and counter(daemon.metrics(), "cosample_collector_plan_version") == plan["version"]
            )
        )
        with AgentSender() as sender:
            began = time.monotonic()
            sent = steady(
                lambda k: sender.send(datagrams[k % len(datagrams)], daemon.listen),
                rate_per_s=1000,
                seconds=6.0,
            )
            ended = time.monotonic()
        metrics = wait_for(
            lambda: (
                (m := daemon.metrics())
                and m["cosample_collector_datagrams_total"][()] >= sent
                and m
            )
        )
    finally:
        log = daemon.stop()
        server.close()
    slow = [(a, b) for a, b in server.reads[1:] if b - a >= 1.0 and b > began and a < ended]
    assert len(slow) >= 2, (server.reads, log)  # the sending overlapped trickled reads
    assert metrics["cosample_collector_datagrams_total"][()] == sent
    assert counter(metrics, "cosample_collector_kernel_receive_drops_total") == 0
    assert counter(metrics, "cosample_collector_plan_errors_total") == 0


def _family(pid: int) -> list[int]:
    """``pid`` and its children (the daemon's receive process)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            pass
    return [pid, *children]


def test_kernel_drops_are_counted(tmp_path, plan):
    """A stopped daemon (and its receive process) cannot drain its small buffer: every
    datagram sent is either counted or in the kernel's drop counter, and some are dropped."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    daemon = Daemon(path, "--insecure-unsigned", "--receive-buffer", str(SMALL_BUFFER))
    stream = simulate(parse_plan(path.read_bytes()), TRUTH, duration_s=3.0, seed=32)
    datagrams = [data for _, data in stream.datagrams]
    try:
        wait_for(lambda: counter(daemon.metrics(), "cosample_collector_plan_version") == 7)
        stopped = _family(daemon.process.pid)
        assert len(stopped) == 2  # the daemon and its receive process
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            with AgentSender() as sender:
                for k in range(2000):
                    sender.send(datagrams[k % len(datagrams)], daemon.listen)
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)

        def settled():
            m = daemon.metrics()
            counted = m["cosample_collector_datagrams_total"][()]
            dropped = counter(m, "cosample_collector_kernel_receive_drops_total")
            return counted + dropped == 2000 and (counted, dropped)

        counted, dropped = wait_for(settled)
    finally:
        daemon.stop()
    assert dropped > 0 and counted > 0


def test_the_receive_process_reads_while_the_daemon_cannot(tmp_path, plan):
    """The daemon itself stopped for 3 s (as when a C call holds its interpreter lock): its
    receive process goes on draining the socket, so 6,000 datagrams at 2,000/s (13 times what
    the small buffer holds) are all counted once it continues, none dropped. Then the receive
    process is killed: the daemon says so and reads the socket itself."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    daemon = Daemon(path, "--insecure-unsigned", "--receive-buffer", str(SMALL_BUFFER))
    stream = simulate(parse_plan(path.read_bytes()), TRUTH, duration_s=3.0, seed=34)
    datagrams = [data for _, data in stream.datagrams]
    try:
        wait_for(lambda: counter(daemon.metrics(), "cosample_collector_plan_version") == 7)
        _, relay = _family(daemon.process.pid)
        os.kill(daemon.process.pid, signal.SIGSTOP)
        try:
            with AgentSender() as sender:
                sent = steady(
                    lambda k: sender.send(datagrams[k % len(datagrams)], daemon.listen),
                    rate_per_s=2000,
                    seconds=3.0,
                )
        finally:
            os.kill(daemon.process.pid, signal.SIGCONT)
        metrics = wait_for(
            lambda: (
                (m := daemon.metrics())
                and m["cosample_collector_datagrams_total"][()] == sent
                and m
            )
        )
        assert counter(metrics, "cosample_collector_kernel_receive_drops_total") == 0
        os.kill(relay, signal.SIGKILL)
        wait_for(lambda: any("receive process ended" in line for line in daemon.lines))
        with AgentSender() as sender:
            for data in datagrams[:100]:
                sender.send(data, daemon.listen)
        wait_for(lambda: daemon.metrics()["cosample_collector_datagrams_total"][()] == sent + 100)
    finally:
        log = daemon.stop()
    assert "receiving in this process" in log
