"""Issue 30, item 5: bounded, expiring state, and an HTTP server that outlives descriptor
exhaustion.

Port-counter rows never expired: 100k counters took the snapshot from 956 B to 5 MB. Now rows
are capped per agent and expire after a window without counters.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from pathlib import Path

import pytest
from collector_daemon import Daemon, counter
from collector_plans import FOUR, plan_document
from waiting import wait_for

from cosample.collector import attribution
from cosample.collector.encode import counter_sample, datagram
from cosample.collector.estimate import Estimator
from cosample.collector.ports import MAX_PORTS_PER_AGENT
from cosample.collector.snapshot import parse_snapshot
from cosample.errors import CosampleError
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import simulate
from cosample.plan.document import parse_plan

PORTS = 100_000


def test_port_rows_are_capped_and_expire(four_plan):
    estimator = Estimator(attribution.build(four_plan), window_s=30.0, name="c1")
    baseline = len(estimator.snapshot(0.0).to_json())
    for when in (1.0, 2.0):  # two rounds: a row needs two counter samples for its rates
        for first in range(0, PORTS, 50):
            estimator.ingest(
                datagram(
                    "172.29.0.1",
                    first // 50 + int(when) * PORTS,
                    0,
                    [
                        counter_sample(1, port, 1000 * int(when), 500 * int(when))
                        for port in range(first, first + 50)
                    ],
                ),
                when,
            )
    full = estimator.snapshot(2.0)
    rows = full.estimates()["s1"].interfaces
    assert len(rows) == MAX_PORTS_PER_AGENT
    assert full.dropped["port_limit"] == 2 * (PORTS - MAX_PORTS_PER_AGENT)
    size = len(full.to_json())
    print(
        f"snapshot: {baseline} B empty, {size} B after {2 * PORTS} counter samples of "
        f"{PORTS} ports ({MAX_PORTS_PER_AGENT} rows kept)"
    )
    assert size < baseline + 100 * MAX_PORTS_PER_AGENT  # bounded by the cap, not by PORTS
    estimator.ingest(datagram("172.29.0.2", 1, 0, [counter_sample(1, 7, 10, 5)]), 40.0)
    later = estimator.snapshot(40.0)  # a window later: s1's rows expired, s2's new one kept
    assert later.estimates()["s1"].interfaces is None
    assert len(later.to_json()) < baseline + 200
    assert estimator.ports.per_agent["172.29.0.1"] == 0 and len(estimator.ports.rows) == 1


LOOPBACK = "127.29.0"
IDLE_CONNECTIONS = 1_100
FILE_LIMIT = 1_024


def _limit_files() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _connect_idle(address, count: int) -> list[socket.socket]:
    """``count`` connections that send nothing (each connect completed, or given up after 3 s:
    the daemon may be refusing by then)."""
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(3.0)
        sock.connect_ex(address)
        held.append(sock)
    return held


@pytest.mark.parametrize("limit", [None, "2000"], ids=["connection-limit", "descriptors-run-out"])
def test_idle_connections_neither_kill_nor_spin_the_daemon(tmp_path, limit):
    """Issue 30's scenario: 1,100 idle connections at a 1,024-descriptor limit made the daemon
    exit (state dir) or spin two cores with HTTP dead. With the default connection limit each
    one past it shuts the oldest idle one, and the idle ones time out: HTTP answers while they
    are still held. With a limit above the descriptors (``descriptors-run-out``, idle timeout
    30 s) the descriptors run out: plan reads and state writes fail (counted), the daemon sheds
    connections, keeps receiving, and recovers when the connections go."""
    hosts = plan_document(FOUR, agents=LOOPBACK)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(hosts))
    options = [
        "--insecure-unsigned",
        "--state-dir",
        str(tmp_path / "state"),
        "--http-idle-timeout",
        "30" if limit else "5",
    ] + (["--http-max-connections", limit] if limit else [])
    daemon = Daemon(path, *options, preexec=_limit_files)
    stream = simulate(
        parse_plan(path.read_bytes()), {"s1": 20_000, "s4": 8_000}, duration_s=3.0, seed=33
    )
    held: list[socket.socket] = []
    try:
        wait_for(lambda: counter(daemon.metrics(), "cosample_collector_plan_version") == 7)
        held = _connect_idle(daemon.http, IDLE_CONNECTIONS)
        cpu, began = _cpu_s(daemon.process.pid), time.monotonic()
        with AgentSender() as sender:
            for _, data in stream.datagrams:
                sender.send(data, daemon.listen)
        time.sleep(1.5)
        busy = (_cpu_s(daemon.process.pid) - cpu) / (time.monotonic() - began)
        alive = daemon.process.poll() is None
        if limit:  # the attacker leaves
            for sock in held:
                sock.close()
        metrics = wait_for(
            lambda: (
                (m := _scrape(daemon))
                and m["cosample_collector_samples_total"][()] == stream.samples
                and m
            ),
            timeout_s=30.0,
        )
        written = wait_for(lambda: _state(tmp_path) == stream.samples, timeout_s=30.0)
    finally:
        for sock in held:
            sock.close()
        log = daemon.stop()
    assert alive and daemon.process.returncode in (0, -15), log  # stopped by us only
    assert busy < 0.5, log  # a spinning accept loop would be ~1.0 (a core)
    refused = {
        reason: counter(metrics, "cosample_collector_http_refused_total", reason=reason)
        for reason in ("busy", "descriptors")
    }
    if limit is None:  # each newcomer past the limit shut the oldest idle one
        evicted = counter(metrics, "cosample_collector_http_evicted_total", reason="idle")
        assert evicted >= IDLE_CONNECTIONS - 64 - 128  # minus served and still queued
    else:
        assert refused["descriptors"] > 0
        assert counter(metrics, "cosample_collector_state_write_errors_total") > 0
        assert "cannot write" in log and "still receiving" in log
    assert written


def _scrape(daemon: Daemon) -> dict | None:
    try:
        return daemon.metrics()
    except OSError:
        return None


def _state(tmp_path: Path) -> int | None:
    try:
        snapshot = parse_snapshot((tmp_path / "state" / "snapshot.json").read_bytes())
    except (OSError, CosampleError):
        return None
    return sum(e.samples for e in snapshot.servers.values())
