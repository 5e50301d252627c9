"""Issue 41, item 6, against the real collector daemon on loopback: slow and endless peers.

64 connections that each sent one byte every 5 s made the collector refuse every ``/snapshot``
while they were held (each held one of its 64 connection slots, forever: socket timeouts count
silence, and they were never silent for 10 s); an endless plan body took its peak memory to
2,862 MB against its 1,024 MiB plan limit. Now heads are read by one loop with a deadline
counted from their first byte, the connection that has waited longest without a whole request
makes room for a newcomer (``cosample.httpserver``), and a body is read into full blocks and
refused past the limit while streaming (``cosample.fetch``).
"""

from __future__ import annotations

import json
import time
import urllib.error

import pytest
from collector_daemon import Daemon, counter, served_snapshot
from collector_plans import FOUR, plan_document
from waiting import wait_for

from cosample.lab.slowpeers import Drippers, Endless, peak_mb

HOLD_S = 12.0  # two rounds of drips and past the head's 10 s deadline


@pytest.fixture
def plan(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_document(FOUR, agents="127.29.1")))
    return path


@pytest.mark.parametrize("count", [64, 300])
def test_dripping_connections_never_stop_snapshot_being_served(plan, count):
    daemon = Daemon(plan, "--insecure-unsigned")
    answered, refused = 0, []
    try:
        wait_for(lambda: served_snapshot(daemon.get) is not None)
        with Drippers(daemon.http, count, every_s=5.0) as drippers:
            time.sleep(1.0)  # every dripper connected and has sent its first byte
            began = time.monotonic()
            while time.monotonic() - began < HOLD_S:
                try:
                    served_snapshot(daemon.get)
                    answered += 1
                except (OSError, urllib.error.URLError) as exc:
                    refused.append(repr(exc))
                time.sleep(1.0)
            metrics = daemon.metrics()
    finally:
        log = daemon.stop()
    assert refused == [] and answered >= 8, (refused, log)
    # what made the room: drippers shut down (their heads past 10 s, or the longest waiting
    # when the limit was reached), each coming back as a new connection
    assert counter(metrics, "cosample_collector_http_evicted_total", reason="slow") >= 1
    assert drippers.replaced >= 1


def test_an_endless_plan_body_costs_at_most_the_plan_limit(plan):
    """Side by side: one daemon reading a good plan file (its baseline), one whose plan URL
    answers an endless body, polled every 0.2 s for 10 s. The second's peak stays within the
    first's plus the plan limit (``--max-plan-mib 64``): before, every poll's bytes stayed
    alive (in the error's traceback) until the garbage collector ran."""
    limit_mb = 64 * 2**20 / 1e6
    with Endless() as endless:
        baseline = Daemon(plan, "--insecure-unsigned", "--max-plan-mib", "64")
        attacked = Daemon(f"{endless.url}/plan.json", "--insecure-unsigned", "--max-plan-mib", "64")
        try:
            wait_for(lambda: endless.served >= 20, timeout_s=60.0)
            peaks = [peak_mb(daemon.process.pid) for daemon in (baseline, attacked)]
            alive = attacked.process.poll() is None
            snapshot = served_snapshot(attacked.get)
        finally:
            baseline.stop()
            log = attacked.stop()
    assert alive and snapshot is not None, log
    assert "larger than 67108864 bytes; keeping the last good plan" in log
    assert peaks[1] < peaks[0] + 1.25 * limit_mb, (peaks, log)
