"""``collector run --ipfix``: IPFIX messages from a sample host's address reach the estimate
through the daemon's second socket; another source's are dropped before any template is kept;
garbage never stops it. On loopback with messages shaped as OVS sends them
(``ipfix_messages``); the real OVS: test_ipfix_ovs.py."""

from __future__ import annotations

import json
import socket

from collector_daemon import Daemon, counter
from ipfix_messages import record_message, sample_plan, template_message
from waiting import wait_for

from cosample.collector.snapshot import parse_snapshot

P, DOMAIN = 13107, 11  # 0.2: weight 5, OVS's factor 5


def write_sample_plan(tmp_path):
    plan = sample_plan(P, DOMAIN, others={"s2": (16, {})})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.raw))
    return path


def test_ipfix_through_the_daemon(tmp_path):
    daemon = Daemon(write_sample_plan(tmp_path), "--insecure-unsigned", "--ipfix", "127.0.0.1:0")
    try:
        assert daemon.ipfix is not None and daemon.ipfix != daemon.listen
        host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        host.bind(("127.29.0.1", 0))  # s1's agent address: its exporter
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.bind(("127.29.0.9", 0))
        stranger.sendto(template_message(DOMAIN), daemon.ipfix)
        stranger.sendto(record_message(DOMAIN, 0, 50, P), daemon.ipfix)
        host.sendto(b"\0\x0a\0\xffgarbage", daemon.ipfix)
        host.sendto(template_message(DOMAIN), daemon.ipfix)
        for sequence in range(20):
            host.sendto(record_message(DOMAIN, sequence, 3, P), daemon.ipfix)

        def counted():
            status = json.loads(daemon.get("/status"))
            return status if status["ipfix_records"] == 20 else None

        wait_for(counted, timeout_s=20)
        wait_for(lambda: daemon.samples_of("s1") == 60, timeout_s=20)
        snapshot = parse_snapshot(daemon.get("/snapshot"))
        s1 = snapshot.servers["s1"]
        assert s1.packets_per_s * snapshot.window_s == 60 * 65535 / P
        assert snapshot.dropped["ipfix_unplanned_exporter"] == 2
        assert snapshot.dropped["ipfix_truncated"] == 1
        metrics = daemon.metrics()
        assert counter(metrics, "cosample_collector_ipfix_records_total") == 20
        assert counter(metrics, "cosample_collector_ipfix_messages_total") == 21
        assert daemon.process.poll() is None
    finally:
        log = daemon.stop()
    assert "IPFIX on 127.0.0.1:" in log


def test_a_sample_host_without_ipfix_is_logged(tmp_path):
    daemon = Daemon(write_sample_plan(tmp_path), "--insecure-unsigned")
    log = daemon.stop()
    assert daemon.ipfix is None
    assert "s1 take their local share with OVS's sample action" in log
