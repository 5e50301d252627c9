"""The calibration grid and one trial's bookkeeping, with fakes for OVS, tc and iperf3.

The real thing runs in test_integration.py (root): same Calibrator, real OVS and iperf3.
"""

from __future__ import annotations

import pytest

from cosample.costmodel.counters import parse_port_stats
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.harness import Calibrator
from cosample.costmodel.iperf import IperfResult
from cosample.costmodel.trials import TAIL_S, CalibrationSettings, plan_trials

DUMP_PORTS = """OFPST_PORT reply (xid=0x4): 1 ports
  port  2: rx pkts=24, bytes=2007, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=451491, bytes=47857523, drop=0, errs=0, coll=0
"""


def test_plan_covers_every_cell_once_in_seeded_random_order():
    settings = CalibrationSettings(rates=(0, 0.5, 1), repetitions=2, seed=3, design="independent")
    trials = plan_trials(settings)
    cells = {(t.mechanism, t.rate, t.repetition) for t in trials}
    assert len(trials) == len(cells) == 2 * 3 * 2
    assert [t.order for t in trials] == list(range(12))
    assert trials == plan_trials(settings)
    assert [(t.mechanism, t.rate) for t in trials] != sorted((t.mechanism, t.rate) for t in trials)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mechanisms": ("sflow", "gre")}, "choose from"),
        ({"rates": (0.5,), "design": "independent"}, "at least 2 distinct"),
        ({"rates": (0, 1.5)}, "in \\[0, 1\\]"),
        ({"repetitions": 0}, "repetitions"),
        ({"duration_s": 0.2}, "duration"),
        ({"protocol": "icmp"}, "protocol"),
        ({"design": "latin"}, "design"),
        ({"phases": 3}, "even integer"),
        ({"rates": (0.0, 0.0)}, "needs a rate > 0"),
        ({"duration_s": 2, "phases": 8}, "too short"),
    ],
)
def test_settings_are_strict(kwargs, message):
    with pytest.raises(HarnessError, match=message):
        CalibrationSettings(**kwargs)


def test_parse_port_stats():
    assert parse_port_stats(DUMP_PORTS) == (24, 451491)
    with pytest.raises(HarnessError, match="port statistics"):
        parse_port_stats("OFPST_PORT reply: 0 ports")


class FakeMechanism:
    def __init__(self, name, log):
        self.name, self.log, self.rate = name, log, 0.0

    def set_rate(self, rate):
        self.rate = rate
        self.log.append((self.name, rate))
        return round(rate, 1)

    def clear(self):
        self.log.append((self.name, "clear"))


class FakeRun:
    def __init__(self, result):
        self.result, self.stopped = result, False

    def wait(self):
        return self.result

    def stop(self):
        self.stopped = True


class FakeSwitch:
    """Counters that advance while the fake client 'runs': 1000 pps in, 800 pps out."""

    def __init__(self):
        self.rx = self.tx = self.copies = 0

    def port_stats(self, port):
        return (self.rx, 0) if port == "in" else (0, self.tx)

    def client(self, argv, duration):
        self.rx += int(1000 * duration)
        self.tx += int(800 * duration)
        self.copies += int(100 * duration)
        return FakeRun(IperfResult("udp", duration, 1e6, packets=1000, lost_packets=200))


def _calibrator(log, switch, **settings):
    settings = CalibrationSettings(
        rates=(0, 0.3),
        repetitions=1,
        duration_s=2,
        warmup_s=1,
        settle_s=0,
        design="independent",
        **settings,
    )
    mechanisms = {m: FakeMechanism(m, log) for m in settings.mechanisms}
    return Calibrator(
        settings,
        mechanisms,
        switch.port_stats,
        {"sflow": lambda: switch.copies},
        switch.client,
        "10.0.0.2",
        "in",
        "out",
    )


def test_trials_produce_tidy_rows_with_one_mechanism_active():
    log, switch = [], FakeSwitch()
    data = _calibrator(log, switch).run(show_progress=False)
    assert len(data) == 4 and set(data["mechanism"]) == {"sflow", "mirror"}
    assert data["throughput_pps"].tolist() == [800.0] * 4
    assert data["sent_pps"].tolist() == [1000.0] * 4
    assert data["iperf_pps"].tolist() == [400.0] * 4  # (1000 - 200) datagrams / 2 s
    assert set(data["rate"]) == {0.0, 0.3}
    sflow = data[data["mechanism"] == "sflow"]
    assert sflow["copies_pps"].tolist() == [100.0, 100.0]
    assert (data[data["mechanism"] == "mirror"]["copies_pps"] == 0).all()  # no counter given
    # before each trial, every mechanism but the trial's is set to 0
    for trial in data.itertuples():
        start = 2 + 2 * trial.order
        settings = dict(log[start : start + 2])
        other = "mirror" if trial.mechanism == "sflow" else "sflow"
        assert settings[trial.mechanism] == trial.rate_requested and settings[other] == 0.0
    assert log[-2:] == [("sflow", "clear"), ("mirror", "clear")]


def test_mechanisms_are_cleared_when_a_run_fails():
    log, switch = [], FakeSwitch()
    calls = []

    def failing_client(argv, duration):
        calls.append(argv)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return switch.client(argv, duration)

    calibrator = _calibrator(log, switch)
    calibrator.client = failing_client
    with pytest.raises(KeyboardInterrupt):
        calibrator.run(show_progress=False)
    assert log[-2:] == [("sflow", "clear"), ("mirror", "clear")]
    assert len(calibrator.rows) == 1  # warm-up, one trial, then the interruption


def test_paired_plan_keeps_rate_zero_inside_every_run():
    settings = CalibrationSettings(rates=(0, 0.5, 1), repetitions=2, seed=3)
    assert settings.trial_rates == (0.5, 1.0)
    assert {t.rate for t in plan_trials(settings)} == {0.5, 1.0} and len(plan_trials(settings)) == 8
    with pytest.raises(HarnessError, match="needs a rate > 0"):
        CalibrationSettings(rates=(0,), repetitions=1)


class ClockedSwitch:
    """A fake switch on a fake clock that forwards T0/(1 + a*s) pps, s being the rate the
    active mechanism is set to: the paired harness must recover a from it."""

    def __init__(self, capacity, coefficients):
        self.now, self.capacity, self.coefficients = 0.0, capacity, coefficients
        self.rates = {m: 0.0 for m in coefficients}
        self.tx = self.rx = 0.0

    def clock(self):
        return self.now

    def advance(self, seconds):
        cost = sum(self.coefficients[m] * r for m, r in self.rates.items())
        self.tx += self.capacity / (1 + cost) * seconds
        self.rx += self.capacity * seconds
        self.now += seconds

    def port_stats(self, port):
        return (int(self.rx), 0) if port == "in" else (0, int(self.tx))

    def mechanisms(self):
        """One fake mechanism per coefficient, setting the rate this switch's cost reads."""
        switch = self

        class Mechanism:
            def __init__(self, name):
                self.name = name

            def set_rate(self, rate):
                switch.rates[self.name] = rate
                return rate

            def clear(self):
                switch.rates[self.name] = 0.0

        return {name: Mechanism(name) for name in self.rates}


def test_paired_design_recovers_the_law_from_a_clocked_fake(monkeypatch):
    from cosample.costmodel import harness
    from cosample.costmodel.fit import CostModelFit

    switch = ClockedSwitch(50_000, {"sflow": 0.8, "mirror": 0.25})
    monkeypatch.setattr(harness.time, "sleep", switch.advance)

    settings = CalibrationSettings(
        rates=(0, 0.5, 1), repetitions=2, duration_s=4.5, warmup_s=0, phases=4, guard_s=0.3
    )
    runs = []

    def client(argv, duration):
        runs.append(FakeRun(IperfResult("udp", duration, 1e6, packets=10, lost_packets=0)))
        return runs[-1]

    calibrator = Calibrator(
        settings,
        switch.mechanisms(),
        switch.port_stats,
        {},
        client,
        "10.0.0.2",
        "in",
        "out",
        clock=switch.clock,
    )
    data = calibrator.run(show_progress=False)
    assert len(data) == 2 * 2 * 2 * 4 and data["block"].nunique() == 8
    assert (data.groupby("block")["rate"].apply(lambda r: sorted(set(r))[0]) == 0).all()
    assert data["duration_s"].to_numpy() == pytest.approx(4.5 / 4 - 0.3)
    assert all(run.stopped for run in runs)
    model = CostModelFit(n_bootstrap=100).fit(data)
    assert model.results_["sflow"].coefficient == pytest.approx(0.8, abs=0.01)
    assert model.results_["mirror"].coefficient == pytest.approx(0.25, abs=0.01)
    assert model.capacity_pps_ == pytest.approx(50_000, rel=0.01)


def test_mirror_vxlan_needs_a_tunnel_device():
    from cosample.costmodel.endpoints import existing_endpoints
    from cosample.costmodel.realrun import run_calibration

    endpoints = existing_endpoints("br0", "p1", "p2", "10.0.0.2", "m0")
    settings = CalibrationSettings(mechanisms=("mirror_vxlan",), rates=(1.0,), repetitions=1)
    with pytest.raises(HarnessError, match="mirror_vxlan needs a VXLAN device"):
        run_calibration(endpoints, ovs=None, settings=settings, show_progress=False)


def test_a_client_refused_by_a_busy_server_is_started_again(monkeypatch):
    """iperf3's server, still busy with the previous killed run, refuses a client at once: the
    paired harness starts the load again instead of waiting 10 s and failing the calibration."""
    from cosample.costmodel import harness

    switch = ClockedSwitch(50_000, {"sflow": 0.5})
    monkeypatch.setattr(harness.time, "sleep", switch.advance)

    class Process:
        def __init__(self, exited):
            self.exited = exited

        def poll(self):
            return 1 if self.exited else None

    runs = []

    def client(argv, duration):
        run = FakeRun(IperfResult("udp", duration, 1e6, packets=10, lost_packets=0))
        run.process = Process(exited=len(runs) in refusing)
        switch.capacity = 0 if run.process.exited else 50_000  # a refused client sends nothing
        runs.append(run)
        return run

    settings = CalibrationSettings(
        mechanisms=("sflow",),
        rates=(0, 1),
        repetitions=1,
        duration_s=2,
        warmup_s=0,
        phases=4,
        guard_s=0.1,
    )
    refusing = {0, 1}
    calibrator = Calibrator(
        settings,
        switch.mechanisms(),
        switch.port_stats,
        {},
        client,
        "10.0.0.2",
        "in",
        "out",
        clock=switch.clock,
    )
    data = calibrator.run(show_progress=False)
    assert len(runs) == 3 and len(data) == 4 and all(run.stopped for run in runs)
    assert switch.now < 5 + 2 * 1.0 + 1  # the refusals cost a second each, not 10 s
    refusing = {3, 4, 5}  # every start refused: one clear error after LOAD_STARTS tries
    with pytest.raises(
        HarnessError, match="ended before any packet reached the receiver .3 tries."
    ):
        calibrator.run(show_progress=False)


def test_a_mechanism_can_have_runs_of_its_own_length(monkeypatch):
    """The cpu method's VXLAN mirror runs shorter runs than the rest: each run has the phases
    and the load duration of its own mechanism; bad lengths are refused before anything runs."""
    from cosample.costmodel import harness

    switch = ClockedSwitch(50_000, {"sflow": 0.8, "mirror_vxlan": 0.4})
    monkeypatch.setattr(harness.time, "sleep", switch.advance)

    settings = CalibrationSettings(
        mechanisms=("sflow", "mirror_vxlan"),
        rates=(0, 1),
        repetitions=2,
        duration_s=6,
        warmup_s=0,
        phases=8,
        guard_s=0.1,
        run_lengths=(("mirror_vxlan", 2.0, 4, 0.2),),
    )
    assert settings.run_design("mirror_vxlan") == (2.0, 4, 0.2)
    assert settings.run_design("sflow") == (6, 8, 0.1)
    durations = []

    def client(argv, duration):
        durations.append(duration)
        return FakeRun(IperfResult("udp", duration, 1e6, packets=10, lost_packets=0))

    data = Calibrator(
        settings,
        switch.mechanisms(),
        switch.port_stats,
        {},
        client,
        "10.0.0.2",
        "in",
        "out",
        clock=switch.clock,
    ).run(show_progress=False)
    phases = data.groupby(["mechanism", "block"])["phase"].count()
    assert set(phases["sflow"]) == {8} and set(phases["mirror_vxlan"]) == {4}
    # counted: a phase less its own guard (0.5 - 0.2 s; sflow's 0.75 - 0.1 s)
    assert data[data["mechanism"] == "mirror_vxlan"]["duration_s"].between(0.25, 0.35).all()
    assert data[data["mechanism"] == "sflow"]["duration_s"].between(0.6, 0.7).all()
    assert sorted(set(durations)) == sorted(
        {2.0 * harness.LOAD_SLACK + TAIL_S, 6.0 * harness.LOAD_SLACK + TAIL_S}
    )
    with pytest.raises(HarnessError, match="phases must be an even integer"):
        CalibrationSettings(
            mechanisms=("mirror_vxlan",),
            rates=(0, 1),
            run_lengths=(("mirror_vxlan", 4.0, 3, 0.05),),
        )
    with pytest.raises(HarnessError, match="too short"):
        CalibrationSettings(
            mechanisms=("mirror_vxlan",),
            rates=(0, 1),
            guard_s=0.3,
            run_lengths=(("mirror_vxlan", 1.0, 14, 0.3),),
        )
    with pytest.raises(HarnessError, match="unknown mechanism"):
        CalibrationSettings(run_lengths=(("netflow", 4.0, 14, 0.05),))
    # a run's own guard decides whether its phases are long enough, not the default's
    CalibrationSettings(
        mechanisms=("sflow",),
        rates=(0, 1),
        duration_s=12,
        phases=40,
        guard_s=0.2,
        run_lengths=(("sflow", 12.0, 120, 0.02),),
    )
    with pytest.raises(HarnessError, match="too short for 120 phases"):
        CalibrationSettings(
            mechanisms=("sflow",),
            rates=(0, 1),
            duration_s=12,
            phases=40,
            guard_s=0.05,
            run_lengths=(("sflow", 12.0, 120, 0.06),),
        )


def test_a_run_delayed_past_its_load_measures_its_last_phases_under_a_new_load(monkeypatch):
    """On a very loaded host each reconfiguration can take long enough that the phases outlast
    the load started for them: the phase the load's end cut is measured again under a new
    load, so the block keeps all its phases, each counted while a load ran, and the restart
    is counted."""
    from cosample.costmodel import harness

    switch = ClockedSwitch(50_000, {"sflow": 0.5})
    monkeypatch.setattr(harness.time, "sleep", switch.advance)
    slow = switch.mechanisms()["sflow"]
    set_rate = slow.set_rate

    def slow_set_rate(rate):  # each switch costs 1.5 s of the fake clock
        switch.advance(1.5)
        return set_rate(rate)

    slow.set_rate = slow_set_rate

    class Process:
        def __init__(self, end):
            self.end = end

        def poll(self):
            return 0 if switch.now >= self.end else None

    loads = []  # (start, end) of each load on the fake clock

    def client(argv, duration):
        run = FakeRun(IperfResult("udp", duration, 1e6, packets=10, lost_packets=0))
        run.process = Process(switch.now + duration)
        loads.append((switch.now, switch.now + duration))
        return run

    settings = CalibrationSettings(
        mechanisms=("sflow",),
        rates=(0, 1),
        repetitions=1,
        duration_s=4,
        warmup_s=0,
        phases=8,
        guard_s=0.1,
    )
    calibrator = Calibrator(
        settings,
        {"sflow": slow},
        switch.port_stats,
        {},
        client,
        "10.0.0.2",
        "in",
        "out",
        clock=switch.clock,
    )
    data = calibrator.run(show_progress=False)
    assert list(data["phase"]) == list(range(8)) and (data["forwarded_pps"] > 0).all()
    assert calibrator.restarted_loads == len(loads) - 1 >= 1
    assert calibrator.unmeasured_phases == 0 and calibrator.empty_phases == 0


def test_a_load_that_keeps_ending_early_leaves_the_rest_unmeasured_and_counted(monkeypatch):
    """A load that ends before any phase is over (a broken client, or a host too loaded to
    measure) is started again only ``PHASE_RETRIES`` times per run: then the run ends with
    what it measured and counts the phases it never measured."""
    from cosample.costmodel import harness

    switch = ClockedSwitch(50_000, {"sflow": 0.5})
    monkeypatch.setattr(harness.time, "sleep", switch.advance)

    class Process:
        def __init__(self, end):
            self.end = end

        def poll(self):
            return 0 if switch.now >= self.end else None

    def client(argv, duration):
        run = FakeRun(IperfResult("udp", duration, 1e6, packets=10, lost_packets=0))
        run.process = Process(switch.now + 0.2)  # ends before a phase's count is over
        return run

    settings = CalibrationSettings(
        mechanisms=("sflow",), rates=(0, 1), repetitions=1, duration_s=4, warmup_s=0, phases=4
    )
    calibrator = Calibrator(
        settings,
        switch.mechanisms(),
        switch.port_stats,
        {},
        client,
        "10.0.0.2",
        "in",
        "out",
        clock=switch.clock,
    )
    data = calibrator.run(show_progress=False)
    assert len(data) == 0 and calibrator.unmeasured_phases == 4
    assert calibrator.restarted_loads == harness.PHASE_RETRIES + 1


def test_a_phase_that_forwarded_nothing_is_measured_again_and_counted(monkeypatch):
    """A host loaded many times over can starve the load for a whole phase: that phase has no
    cost per packet to state, so it is measured again (and counted) instead of ending the
    calibration or leaving the block short."""
    from cosample.costmodel import harness

    class StarvingSwitch(ClockedSwitch):
        def advance(self, seconds):
            self.capacity = 0 if 1.0 <= self.now < 1.6 else 50_000  # one phase gets nothing
            super().advance(seconds)

    switch = StarvingSwitch(50_000, {"sflow": 0.5})
    monkeypatch.setattr(harness.time, "sleep", switch.advance)
    settings = CalibrationSettings(
        mechanisms=("sflow",),
        rates=(0, 1),
        repetitions=1,
        duration_s=4,
        warmup_s=0,
        phases=4,
        guard_s=0.1,
    )
    calibrator = Calibrator(
        settings,
        switch.mechanisms(),
        switch.port_stats,
        {},
        lambda argv, duration: FakeRun(IperfResult("udp", duration, 1e6)),
        "10.0.0.2",
        "in",
        "out",
        clock=switch.clock,
    )
    data = calibrator.run(show_progress=False)
    assert calibrator.empty_phases == 1 and list(data["phase"]) == [0, 1, 2, 3]
    assert (data["forwarded_pps"] > 0).all()
