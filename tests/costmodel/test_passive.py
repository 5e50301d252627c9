"""Passive capacity: the estimate on given numbers, the dpctl parser on recorded output, the
monitor on fake packet counts, and the command's checks. The real testbed with a CPU hog is in
test_cpu_integration.py."""

from __future__ import annotations

import json

import pytest

from cosample.cli import main
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.passive import (
    PassiveMonitor,
    calibrated_cost_s,
    capacity_document,
    estimate_capacity,
    parse_dpctl_lookups,
)

DPCTL = """netdev@ovs-netdev:
  lookups: hit:1200 missed:30 lost:2
  flows: 3
  port 0: ovs-netdev (tap)
system@ovs-system:
  lookups: hit:100 missed:0 lost:0
"""


def test_dpctl_lookups_sum_every_datapath():
    assert parse_dpctl_lookups(DPCTL) == 1232 + 100
    with pytest.raises(HarnessError, match="lookups"):
        parse_dpctl_lookups("ovs-appctl: cannot connect")


def test_capacity_is_the_cpu_others_leave_over_the_cost_per_packet():
    # 20 kpps forwarded with 0.4 CPU (20 us/packet); 1.1 CPUs busy in all, 2 CPUs budget
    quiet = estimate_capacity(
        packets=20_000 * 5, forwarding_s=0.4 * 5, busy_s=1.1 * 5, interval_s=5, budget_cpus=2
    )
    assert quiet.cost_source == "measured" and quiet.cost_ns_per_packet == pytest.approx(20_000)
    assert quiet.available_cpus == pytest.approx(2 - 0.7)
    assert quiet.capacity_pps == pytest.approx(1.3 / 20e-6)
    # a hog takes one more CPU: capacity falls by what it took
    hog = estimate_capacity(
        packets=20_000 * 5, forwarding_s=0.4 * 5, busy_s=2.0 * 5, interval_s=5, budget_cpus=2
    )
    assert hog.capacity_pps == pytest.approx(0.4 / 20e-6)
    assert hog.capacity_pps < quiet.capacity_pps
    # a calibrated cost is preferred (also when idle); without one and idle, a clear error
    idle = estimate_capacity(
        packets=10,
        forwarding_s=0.01,
        busy_s=0.5,
        interval_s=1,
        budget_cpus=2,
        calibrated_cost=10e-6,
    )
    assert idle.cost_source == "calibration" and idle.capacity_pps == pytest.approx(
        (2 - 0.49) / 10e-6
    )
    calibrated = estimate_capacity(
        packets=20_000 * 5,
        forwarding_s=0.4 * 5,
        busy_s=1.1 * 5,
        interval_s=5,
        budget_cpus=2,
        calibrated_cost=10e-6,
    )
    assert calibrated.cost_source == "calibration" and calibrated.capacity_pps == pytest.approx(
        1.3 / 10e-6
    )
    with pytest.raises(HarnessError, match="too little traffic"):
        estimate_capacity(packets=10, forwarding_s=0.01, busy_s=0.5, interval_s=1, budget_cpus=2)
    # others using more than the budget leave nothing, never a negative capacity
    assert estimate_capacity(100_000, 1, 9, 1, 2).capacity_pps == 0


def test_calibrated_cost_comes_only_from_a_cpu_method_calibration():
    document = {"capacity_pps": 100_000.0, "metadata": {"method": "cpu", "budget_cpus": 2.0}}
    assert calibrated_cost_s(document) == pytest.approx(20e-6)
    with pytest.raises(HarnessError, match="not a cpu-method calibration"):
        calibrated_cost_s(
            {"capacity_pps": 80_000.0, "metadata": {"method": "throughput"}}, where="old.json"
        )


def test_monitor_estimates_each_interval_from_its_counters():
    packets = iter(range(0, 10**9, 50_000))
    monitor = PassiveMonitor(
        lambda: next(packets), ovs_pids=(), budget_cpus=2.0, calibrated_cost=20e-6
    )
    seen = []
    last = monitor.watch(0.2, 2, seen.append)
    assert len(seen) == 2 and last is seen[-1]
    assert last.forwarded_pps == pytest.approx(50_000 / last.interval_s)
    # no forwarding CPU counted here: the calibrated cost is used even with packets flowing
    assert last.cost_source == "calibration"
    assert last.capacity_pps == pytest.approx(last.available_cpus / 20e-6)  # host load varies
    document = capacity_document(last, "host1", "2000-01-01T00:00:00Z")
    assert document["capacity_pps"] == pytest.approx(last.capacity_pps, rel=1e-6)
    json.dumps(document, allow_nan=False)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--interval", "0.01"], "--interval"),
        (["--count", "-1"], "--count"),
        (["--ovs-pidfile", "/nonexistent/ovs.pid"], "cannot read a PID"),
    ],
)
def test_passive_command_refuses_bad_requests(argv, message, capsys):
    assert main(["calibrate", "--passive", *argv]) == 2
    assert message in capsys.readouterr().err


def test_max_time_without_a_target_is_refused(tmp_path, capsys):
    assert main(["calibrate", "--testbed", "--max-time", "60", "-d", str(tmp_path / "m.csv")]) == 2
    assert "--target-ci" in capsys.readouterr().err
    assert not (tmp_path / "m.csv").exists()
