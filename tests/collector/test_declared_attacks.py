"""Issue 41, items 1 and 2, replayed against a real daemon on loopback from the victims' own
addresses (what anyone who can send on the management network can set).

- sFlow (s4 samples 1-in-16): one sample declaring 1-in-(2^32-1) took s1 from 4,071 to 621
  million pps in the report; rates rising 3.5x per step walked a plan; a frame of any length
  was weighed (2.26e11 bytes/s). Each is now dropped by name (``unplanned_sampling_rate``,
  ``oversized_frame``) and s4's estimate does not move; the control, the same samples at the
  plan's 1-in-16 and an ordinary frame, is counted.
- IPFIX (s1 samples with OVS's action at P = 26214): packetDeltaCount 5e9 gave 5,000,000,300
  packets, about 2^64 gave 1.8e19, observationPointId 1 weighed 65,535, and counts past 2^63
  froze ``/snapshot.bin`` and the state files. Each is now dropped by name
  (``ipfix_implausible_count``, ``ipfix_unplanned_probability``, ``ipfix_oversized_frame``);
  s1 counts only the real records, and the exports go on (``/snapshot.bin`` decodes, the
  state files are rewritten).
- A guarded host (issue 47: s4, 1-in-16, may step to 1-in-256 between plans): the rates its
  guard may run (16, 32, 64, 128, 256) are counted, each weighed by what it declares; from its
  address, a value between two rungs, past the floor or 2^32-1 is still dropped.
"""

from __future__ import annotations

import json
import socket

from collector_daemon import Daemon, counter
from collector_plans import FOUR, plan_document
from ipfix_messages import record_message, sample_plan, template_message
from waiting import wait_for

from cosample.collector import snapshotbin
from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import frame, simulate, vm_address
from cosample.plan.document import parse_plan

LOOPBACK = "127.29.0"
TRUTH = {"s1": 5_000, "s2": 1_000, "s3": 2_000, "s4": 8_000}
P, DOMAIN = 26214, 7  # OVS's factor 2


def sample(sequence: int, rate: int, length: int = 1000) -> bytes:
    header, _ = frame(vm_address(3), vm_address(1, 2), 1000)
    return flow_sample(SampleSpec(sequence, rate, rate * sequence, header, length, source_index=9))


def test_forged_sflow_declarations_weigh_nothing(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_document(FOUR, agents=LOOPBACK)))
    daemon = Daemon(path, "--insecure-unsigned")
    agent = f"{LOOPBACK}.4"
    number = 0

    def forge(*samples: bytes) -> None:
        nonlocal number
        number += 1
        sender.send(
            datagram(agent, number, 1000 * number, list(samples), sub_agent=3), daemon.listen
        )

    try:
        stream = simulate(parse_plan(path.read_bytes()), TRUTH, duration_s=3.0, seed=41)
        with AgentSender() as sender:
            for _, data in stream.datagrams:
                sender.send(data, daemon.listen)
            before = wait_for(
                lambda: (
                    (s := daemon.snapshot())
                    and sum(e.samples for e in s.servers.values()) == stream.samples
                    and s
                )
            )
            forge(sample(1, 2**32 - 1))  # the report's one sample
            for step in range(8):  # the report's walk: 3.5x per step from the plan's 1-in-16
                forge(sample(2 + step, round(16 * 3.5 ** (step + 1))))
            forge(sample(10, 16, 2**32 - 1), sample(11, 16, 65_558))  # no interface's frames
            after = wait_for(
                lambda: (
                    (s := daemon.snapshot())
                    and s.dropped.get("unplanned_sampling_rate") == 9
                    and s.dropped.get("oversized_frame") == 2
                    and s
                )
            )
            forge(sample(12, 16), sample(13, 16, 65_557))  # the control: as the plan says
            control = wait_for(
                lambda: (
                    (s := daemon.snapshot())
                    and s.servers["s4"].samples == before.servers["s4"].samples + 2
                    and s
                )
            )
        metrics = daemon.metrics()
    finally:
        daemon.stop()
    s4_before, s4 = before.servers["s4"], after.servers["s4"]
    assert s4.samples == s4_before.samples
    assert s4.packets_per_s <= s4_before.packets_per_s  # the same samples, a longer window
    assert s4.bytes_per_s <= s4_before.bytes_per_s
    for server in TRUTH:
        assert after.servers[server].samples == before.servers[server].samples, server
    assert counter(metrics, "cosample_collector_dropped_total", reason="oversized_frame") == 2
    reason = "unplanned_sampling_rate"
    assert counter(metrics, "cosample_collector_dropped_total", reason=reason) == 9
    # the control's two samples weigh 16 each: about 32 packets more in the window
    assert control.servers["s4"].packets_per_s > s4.packets_per_s
    assert control.servers["s4"].bytes_per_s < 100 * s4_before.bytes_per_s


def test_a_guarded_host_may_declare_its_guards_rates_and_no_other(tmp_path):
    document = plan_document(FOUR, agents=LOOPBACK)
    document["hosts"]["s4"]["guard"] = {"floor_sampling": 256}  # 16, 32, 64, 128, 256
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    daemon = Daemon(path, "--insecure-unsigned")
    agent = f"{LOOPBACK}.4"
    try:
        with AgentSender() as sender:
            rates = [16, 32, 48, 128, 512, 256, 2**32 - 1, 16]  # the guard's steps and forgeries
            for number, rate in enumerate(rates, start=1):
                sender.send(
                    datagram(agent, number, 1000 * number, [sample(number, rate)], sub_agent=3),
                    daemon.listen,
                )
            seen = wait_for(
                lambda: (
                    (s := daemon.snapshot())
                    and s.dropped.get("unplanned_sampling_rate") == 3
                    and s.servers["s4"].samples == 5
                    and s
                )
            )
        metrics = daemon.metrics()
    finally:
        daemon.stop()
    reason = "unplanned_sampling_rate"
    assert counter(metrics, "cosample_collector_dropped_total", reason=reason) == 3
    weighed = seen.servers["s4"].packets_per_s * seen.window_s  # 16 + 32 + 128 + 256 + 16
    assert 448 * 0.99 <= weighed <= 448 * 1.01


def test_forged_ipfix_records_weigh_nothing_and_exports_go_on(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(sample_plan(P, DOMAIN, others={"s2": (16, {})}).raw))
    state = tmp_path / "state"
    daemon = Daemon(
        path, "--insecure-unsigned", "--ipfix", "127.0.0.1:0", "--state-dir", str(state)
    )
    try:
        host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        host.bind(("127.29.0.1", 0))  # s1's agent address: its exporter
        host.sendto(template_message(DOMAIN), daemon.ipfix)
        for sequence in range(10):  # the real records: 3 sampled packets each
            host.sendto(record_message(DOMAIN, sequence, 3, P), daemon.ipfix)
        real = wait_for(lambda: (s := daemon.snapshot()) and s.servers["s1"].samples == 30 and s)
        written = (state / "snapshot.bin").stat().st_mtime_ns
        forged = [
            record_message(DOMAIN, 10, 0, P, counted=5_000_000_000),  # 2.5e9 sampled, in 1 s
            record_message(DOMAIN, 11, 0, P, counted=2**64 - 2),  # about 2^64
            record_message(DOMAIN, 12, 3, 1),  # observationPointId 1: weight 65,535
            record_message(DOMAIN, 13, 3, P, octets=3 * 2 * 70_000),  # 70 kB frames
        ]
        for message in forged:
            host.sendto(message, daemon.ipfix)
        after = wait_for(
            lambda: (
                (s := daemon.snapshot())
                and s.dropped.get("ipfix_implausible_count") == 2
                and s.dropped.get("ipfix_unplanned_probability") == 1
                and s.dropped.get("ipfix_oversized_frame") == 1
                and s
            )
        )
        wait_for(lambda: (state / "snapshot.bin").stat().st_mtime_ns > written)
        binary = snapshotbin.decode(daemon.get("/snapshot.bin"), where="/snapshot.bin")
        on_disk = snapshotbin.decode((state / "snapshot.bin").read_bytes(), where="state")
        metrics = daemon.metrics()
        assert daemon.process.poll() is None
    finally:
        daemon.stop()
    assert after.servers["s1"].samples == 30
    assert after.servers["s1"].packets_per_s <= real.servers["s1"].packets_per_s
    assert binary.servers["s1"].samples == on_disk.servers["s1"].samples == 30
    assert counter(metrics, "cosample_collector_ipfix_records_total") == 10
    reason = "ipfix_implausible_count"
    assert counter(metrics, "cosample_collector_dropped_total", reason=reason) == 2
