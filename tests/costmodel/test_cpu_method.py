"""The cpu method and adaptive stopping on a clocked fake host whose CPU cost per packet follows
``c(s) = c0 (1 + a s)``: the harness must turn CPU time and packets into the law's capacity and
recover ``a``; the adaptive run must stop when intervals are narrow, or when time runs out.

The real thing runs in test_cpu_integration.py (root): real cgroup, OVS, iperf3.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosample.costmodel.accounting import CpuSnapshot
from cosample.costmodel.adaptive import AdaptiveRun, Target, interval_of, target_report
from cosample.costmodel.errors import FitError, HarnessError
from cosample.costmodel.fit import CostModelFit, quick_interval
from cosample.costmodel.harness import Calibrator
from cosample.costmodel.iperf import IperfResult
from cosample.costmodel.model import throughput
from cosample.costmodel.trials import CalibrationSettings

C0_S = 20e-6  # CPU seconds per packet without sampling


class CpuHost:
    """Forwards the offered load exactly; spends ``c0 (1 + a s) (1 + noise)`` CPU per packet,
    the noise drawn per elapsed step from a seeded generator."""

    def __init__(self, offered_pps, coefficients, noise=0.0, seed=0):
        self.now, self.offered, self.coefficients = 0.0, offered_pps, coefficients
        self.rates = {m: 0.0 for m in coefficients}
        self.tx = self.rx = 0.0
        self.cpu_ns = 0.0
        self.noise, self.rng = noise, np.random.default_rng(seed)

    def clock(self):
        return self.now

    def advance(self, seconds):
        cost = sum(self.coefficients[m] * r for m, r in self.rates.items())
        packets = self.offered * seconds
        jitter = max(1 + self.noise * self.rng.standard_normal(), 0.2) if self.noise else 1.0
        self.cpu_ns += packets * C0_S * (1 + cost) * jitter * 1e9
        self.tx += packets
        self.rx += packets
        self.now += seconds

    def port_stats(self, port):
        return (int(self.rx), 0) if port == "in" else (0, int(self.tx))

    def snapshot(self):
        return CpuSnapshot(
            counted=int(self.cpu_ns),
            ovs=int(self.cpu_ns / 2),
            ksoftirqd=0,
            host_busy=int(self.cpu_ns * 3),
            host_softirq=0,
        )


class Run:
    stopped = False

    def wait(self):
        return IperfResult("udp", 1.0, 1e6, packets=10, lost_packets=0)

    def stop(self):
        self.stopped = True


def calibrator(host, monkeypatch, mechanisms=("sflow", "mirror"), **overrides):
    from cosample.costmodel import harness

    monkeypatch.setattr(harness.time, "sleep", host.advance)

    class Mechanism:
        def __init__(self, name):
            self.name, self.cleared = name, False

        def set_rate(self, rate):
            host.rates[self.name] = rate
            return rate

        def clear(self):
            host.rates[self.name], self.cleared = 0.0, True

    options = dict(
        mechanisms=mechanisms,
        rates=(0, 0.5, 1),
        repetitions=2,
        duration_s=4.0,
        warmup_s=0,
        phases=8,
        guard_s=0.05,
        method="cpu",
        offered_pps=20_000,
    )
    options.update(overrides)
    settings = CalibrationSettings(**options)
    return Calibrator(
        settings,
        {m: Mechanism(m) for m in mechanisms},
        host.port_stats,
        {},
        lambda argv, duration: Run(),
        "10.0.0.2",
        "in",
        "out",
        clock=host.clock,
        accounting=host.snapshot,
        budget_cpus=2.0,
    )


def test_cpu_rows_turn_cpu_time_per_packet_into_the_laws_capacity(monkeypatch):
    host = CpuHost(20_000, {"sflow": 0.3, "mirror": 0.1})
    data = calibrator(host, monkeypatch).run(show_progress=False)
    assert (data["method"] == "cpu").all() and (data["offered_pps"] == 20_000).all()
    zero = data[data["rate"] == 0]
    assert zero["cost_ns_per_packet"].to_numpy() == pytest.approx(C0_S * 1e9, rel=1e-3)
    assert zero["throughput_pps"].to_numpy() == pytest.approx(2.0 / C0_S, rel=1e-3)  # budget/c0
    full = data[(data["rate"] == 1) & (data["mechanism"] == "sflow")]
    assert full["cost_ns_per_packet"].to_numpy() == pytest.approx(C0_S * 1.3e9, rel=1e-3)
    assert data["cpu_counted"].to_numpy() == pytest.approx(2 * data["cpu_ovs"].to_numpy())
    model = CostModelFit(n_bootstrap=100).fit(data)
    assert model.results_["sflow"].coefficient == pytest.approx(0.3, abs=1e-3)
    assert model.results_["mirror"].coefficient == pytest.approx(0.1, abs=1e-3)
    assert model.capacity_pps_ == pytest.approx(2.0 / C0_S, rel=1e-3)


def test_cpu_method_offers_a_fixed_packet_rate():
    udp = CalibrationSettings(method="cpu", offered_pps=20_000, packet_bytes=64)
    assert udp.load_bandwidth == str(20_000 * 64 * 8)
    assert "-b" in udp.client_argv("10.0.0.2") and str(20_000 * 64 * 8) in udp.client_argv(
        "10.0.0.2"
    )
    assert CalibrationSettings(method="throughput").load_bandwidth == "0"
    with pytest.raises(HarnessError, match="offered load"):
        CalibrationSettings(method="cpu", offered_pps=5)
    bursts = CalibrationSettings(method="cpu", offered_pps=20_000, burst=32)
    assert bursts.client_argv("10.0.0.2")[-2:] == ["-b", f"{20_000 * 64 * 8}/32"]
    for bad in (-1, 1001, 2.5):
        with pytest.raises(HarnessError, match="burst must be 0..1000"):
            CalibrationSettings(method="cpu", burst=bad)
    with pytest.raises(HarnessError, match="method"):
        CalibrationSettings(method="guess")


def test_parallel_streams_share_the_offered_rate():
    flows = CalibrationSettings(method="cpu", offered_pps=20_000, streams=64)
    argv = flows.client_argv("10.0.0.2")
    assert argv[-2:] == ["-P", "64"] and argv[argv.index("-b") + 1] == str(20_000 * 64 * 8 // 64)
    assert "-P" not in CalibrationSettings(method="cpu").client_argv("10.0.0.2")
    for bad in (0, 129, 2.5):
        with pytest.raises(HarnessError, match="streams must be 1..128"):
            CalibrationSettings(method="cpu", streams=bad)


def test_a_phase_without_packets_is_an_error_not_a_free_packet():
    from cosample.costmodel.accounting import cost_row

    with pytest.raises(HarnessError, match="no cost to measure"):
        cost_row({"cpu_counted": 0.5}, 0.0, 2.0)
    assert cost_row({"cpu_counted": 0.5}, 25_000.0, 2.0) == pytest.approx(
        {"cost_ns_per_packet": 20_000.0, "throughput_pps": 100_000.0}
    )


def test_quick_interval_covers_the_truth_and_narrows_with_data():
    rng = np.random.default_rng(4)

    def sample(blocks):
        rate = np.tile([0, 1, 0, 0.5] * 3, blocks)
        block = np.repeat(np.arange(blocks), 12)
        drift = rng.uniform(0.7, 1.3, blocks)[block]
        y = throughput(rate, 1e5, 0.2) * drift * (1 + 0.05 * rng.standard_normal(len(rate)))
        return rate, y, block

    a, half = quick_interval(*sample(4))
    a_more, half_more = quick_interval(*sample(36))
    assert abs(a - 0.2) < half and abs(a_more - 0.2) < half_more
    assert half_more < half / 2
    with pytest.raises(FitError):
        quick_interval(np.array([0.0, 1.0]), np.array([1.0, 1.0]), np.array([0, 0]))


def test_target_is_relative_with_an_absolute_floor():
    target = Target(relative=0.1, absolute=0.02)
    assert target.allowed(0.5) == pytest.approx(0.05) and target.allowed(0.05) == 0.02
    assert target.met(0.5, 0.049) and not target.met(0.5, 0.051)
    assert not target.met(math.nan, 0.01) and not target.met(0.5, math.inf)
    for bad in ({"relative": 0}, {"max_time_s": 1}, {"min_rounds": 0}):
        with pytest.raises(HarnessError):
            Target(**bad)


def test_adaptive_run_stops_once_every_interval_is_narrow(monkeypatch):
    host = CpuHost(20_000, {"sflow": 0.3, "mirror": 0.1}, noise=0.01, seed=1)
    run = AdaptiveRun(
        calibrator(host, monkeypatch), Target(max_time_s=600, min_rounds=2), clock=host.clock
    )
    data = run.run(show_progress=False)
    # the cpu method decides from 12 runs per mechanism on (MIN_STOPPING_BLOCKS): 6 rounds of 2 rates
    assert {name: status.rounds for name, status in run.status.items()} == {"sflow": 6, "mirror": 6}
    assert all(status.done for status in run.status.values())
    assert run.elapsed_s < 600 and data["block"].nunique() == 2 * 2 * 6
    assert abs(run.status["sflow"].estimate - 0.3) < run.status["sflow"].half_width
    assert "sflow a=0.29" in run.describe() and "done" in run.describe()
    summary = run.summary()
    assert summary["rounds"] == {"sflow": 6, "mirror": 6} and summary["seconds"]["sflow"] > 0
    assert all(m.cleared for m in run.calibrator.mechanisms.values())
    met, lines = target_report(CostModelFit(n_bootstrap=100).fit(data).calibration_, run.target)
    assert set(met) == {"sflow", "mirror"} and len(lines) == 2


def test_adaptive_run_stops_when_time_runs_out(monkeypatch):
    host = CpuHost(20_000, {"sflow": 0.3}, noise=0.5, seed=2)
    run = AdaptiveRun(
        calibrator(host, monkeypatch, mechanisms=("sflow",)),
        Target(relative=0.001, absolute=0.0001, max_time_s=60),
        clock=host.clock,
    )
    data = run.run(show_progress=False)
    assert run.elapsed_s <= 60 and not run.status["sflow"].done
    assert data["block"].nunique() >= 4  # it kept measuring until the budget, not past it
    a, half = interval_of(data, "sflow", 0.95)
    assert math.isfinite(a) and half > 0.0001


def test_adaptive_needs_the_paired_design(monkeypatch):
    host = CpuHost(20_000, {"sflow": 0.3})
    run = AdaptiveRun(
        calibrator(host, monkeypatch, mechanisms=("sflow",), design="independent"),
        Target(),
        clock=host.clock,
    )
    with pytest.raises(HarnessError, match="paired"):
        run.run(show_progress=False)


def test_fit_refuses_mixed_methods(monkeypatch):
    host = CpuHost(20_000, {"sflow": 0.3})
    data = calibrator(host, monkeypatch, mechanisms=("sflow",)).run(show_progress=False)
    data.loc[data.index[:4], "method"] = "throughput"
    with pytest.raises(FitError, match="mix methods"):
        CostModelFit(n_bootstrap=100).fit(data)
