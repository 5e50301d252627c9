"""A real collector daemon hears a host's guard: the report the agent's own sender sends from
the host's agent address lands in the snapshot and the metrics; the same report from another
host's address is refused and counted."""

from __future__ import annotations

import json
import time

import pytest
from collector_daemon import Daemon, counter
from collector_plans import FOUR, plan_document
from waiting import wait_for

from cosample.agents.guarding import send_datagram
from cosample.dataplane.guardwire import GuardReport, encode

LOOPBACK = "127.29.0"
GUARD = {"floor_sampling": 1024, "floor_mirror_share": 0.0, "limit": 0.9}


@pytest.fixture
def daemon(tmp_path):
    document = plan_document(FOUR, agents=LOOPBACK)
    document["hosts"]["s1"]["guard"] = GUARD
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    running = Daemon(path, "--insecure-unsigned")
    yield running, document["version"]
    running.stop()


def test_the_report_reaches_the_snapshot_from_the_hosts_address_only(daemon):
    running, version = daemon
    wait_for(running.snapshot)
    to = f"{running.listen[0]}:{running.listen[1]}"
    # s1's ladder: mirrors at 1, 1/2, 1/4, 1/8, 0, then 1-in-128, 256, 512, 1024
    report = GuardReport("s1", version, 5, 128, 0.0, time.time(), 0.97)
    send_datagram(encode(report), f"{LOOPBACK}.2", to)  # from s2's address: refused
    assert wait_for(lambda: running.dropped().get("guard_source_mismatch") == 1)
    send_datagram(encode(report), f"{LOOPBACK}.1", to)  # from s1's own
    snapshot = wait_for(lambda: (s := running.snapshot()) and "s1" in s.guard and s)
    entry = snapshot.guard["s1"]
    assert (entry.rung, entry.sflow_sampling, entry.mirror_scale) == (5, 128, 0.0)
    assert entry.busy == pytest.approx(0.97)
    metrics = running.metrics()
    assert counter(metrics, "cosample_collector_guard_rung", server="s1") == 5
    assert counter(metrics, "cosample_collector_guard_reports_total") == 1
    assert "bad_version" not in snapshot.dropped  # never taken for sFlow
    back = report._replace(rung=0, sflow_sampling=64, mirror_scale=1.0, time=time.time())
    send_datagram(encode(back), f"{LOOPBACK}.1", to)
    assert wait_for(lambda: (s := running.snapshot()) and s.guard == {})
