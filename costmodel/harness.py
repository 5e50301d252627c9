"""Run a calibration: a grid of rates per mechanism, repeated, in random order, through iperf3.

Two methods: ``throughput`` floods (iperf3 ``-b 0``) and counts packets forwarded; ``cpu``
offers ``offered_pps`` and counts, through ``accounting``, the CPU time the forwarding costs per
packet (``accounting.py``). Two designs:

- ``paired`` (default): each trial is one iperf3 run whose load alternates between rate 0 and the
  trial's rate in ``phases`` phases, from the moment packets reach the receiver (which comes
  first is a seeded coin toss); after each change the harness waits ``guard_s``, then counts.
  Every phase is a row, the run is a ``block``, and the fit gives each block its own capacity,
  so the slow drift of a shared host's load cancels out of the coefficient.
- ``independent``: each trial sets the rate, settles, and counts over one whole run; one row.

What the columns mean:

- ``forwarded_pps``: packets OVS delivered to the receiver's port per second (the port's kernel
  ``tx_packets`` when it is a local device, else OpenFlow port statistics) over the counted
  interval; ``throughput_pps`` is the same for the throughput method and ``budget_cpus`` over
  the CPU cost per packet for the cpu method (the law's ``T`` either way);
- ``sent_pps``: packets OVS took in from the sender's port (``rx``) per second;
- ``copies_pps``: sampled (sFlow samples at the collector) or mirrored (``tx_packets`` plus
  ``tx_dropped`` of the mirror target) copies per second, a check of the configured rate;
- ``cpu_*``: CPUs used over the interval by source (``accounting.CpuSnapshot``);
- ``iperf_pps`` (UDP, independent design): datagrams the iperf3 server received per second;
  ``bits_per_second``, CPU and loss as iperf3 reports them for the whole run.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from cosample.costmodel.accounting import cost_row
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.iperf import IperfResult
from cosample.costmodel.mechanisms import Mechanism
from cosample.costmodel.trials import (
    TAIL_S,
    CalibrationSettings,
    Trial,
    plan_trials,
)

#: Paired runs: the load lasts this many times the nominal duration (phases delayed by slow
#: reconfiguration still have load), and is stopped after the last phase.
LOAD_SLACK = 2.0
#: Paired runs: how long to wait for the first packet to reach the receiver.
FIRST_PACKET_TIMEOUT_S = 10.0
#: Paired runs: how many times a load whose client exits before its first packet is started.
LOAD_STARTS = 3
#: Paired runs: how many phases of one run may be measured again (a phase the load did not
#: cover: it ended, or forwarded nothing) before the run keeps what it has.
PHASE_RETRIES = 4


@dataclass
class Calibrator:
    """Runs ``plan_trials`` against real endpoints; effects come in as callables and objects.

    ``port_stats(port) -> (rx, tx)``, ``copies[mechanism]() -> count so far``, ``client(argv,
    duration) -> run`` starting a load whose ``run.wait()`` gives an ``IperfResult`` (and
    ``run.stop()`` aborts it); the CLI wires them to ovs-ofctl, the collector and iperf3.
    """

    settings: CalibrationSettings
    mechanisms: Mapping[str, Mechanism]
    port_stats: Callable[[str], tuple[int, int]]
    copies: Mapping[str, Callable[[], int]]
    client: Callable[[Sequence[str], float], Any]
    server_ip: str
    sender_port: str
    receiver_port: str
    clock: Callable[[], float] = time.monotonic
    rows: list[dict] = field(default_factory=list)
    #: Paired phases in which not one packet was forwarded (measured again).
    empty_phases: int = 0
    #: Paired loads that ended before their run's phases did (started again, phase measured
    #: again), and phases never measured because a run ran out of ``PHASE_RETRIES``.
    restarted_loads: int = 0
    unmeasured_phases: int = 0
    #: CPU method: ``accounting() -> CpuSnapshot`` and the CPUs the capacity is stated for.
    accounting: Callable[[], Any] | None = None
    budget_cpus: float = 1.0

    def run(self, show_progress: bool = True) -> pd.DataFrame:
        """All trials; mechanisms are switched off at the end, also on error or Ctrl-C."""
        # rich (not in the lean install) loads only to draw the progress bar
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        trials = plan_trials(self.settings)
        measure = self.measure_paired if self.settings.design == "paired" else self.measure
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
        )
        try:
            with Progress(*columns, disable=not show_progress, transient=False) as progress:
                task = progress.add_task("warm-up", total=len(trials))
                self._set_active(None, 0.0)
                if self.settings.warmup_s >= 1:
                    self._load(self.settings.warmup_s).wait()
                for trial in trials:
                    progress.update(task, description=f"{trial.mechanism:<6} rate {trial.rate:.2f}")
                    self.rows.extend(measure(trial))
                    progress.advance(task)
        finally:
            for mechanism in self.mechanisms.values():
                mechanism.clear()
        return pd.DataFrame(self.rows)

    def _load(self, duration_s: float) -> Any:
        return self.client(self.settings.client_argv(self.server_ip, duration_s), duration_s)

    def _set_active(self, active: str | None, rate: float) -> float:
        effective = 0.0
        for name, mechanism in self.mechanisms.items():
            configured = mechanism.set_rate(rate if name == active else 0.0)
            if name == active:
                effective = configured
        return effective

    def _counters(self, mechanism: str) -> tuple[float, int, int, int, Any]:
        """(time, sender rx, receiver tx, copies, CPU snapshot or None); the receiver's count,
        which is the measurement, is stamped with the middle of its own read (a subprocess under
        load), and the CPU snapshot is taken just before it."""
        rx, _ = self.port_stats(self.sender_port)
        before = self.clock()
        cpu = self.accounting() if self.accounting else None
        _, tx = self.port_stats(self.receiver_port)
        stamp = (before + self.clock()) / 2
        return stamp, rx, tx, self.copies.get(mechanism, lambda: 0)(), cpu

    def _row(
        self,
        trial: Trial,
        rate: float,
        effective: float,
        before: tuple,
        after: tuple,
        result: IperfResult | None,
        seconds: float | None = None,
        **extra: Any,
    ) -> dict:
        s = self.settings
        seconds = seconds or after[0] - before[0]
        if seconds <= 0:
            raise HarnessError("counters were read twice at the same instant")
        forwarded = (after[2] - before[2]) / seconds
        row = {
            "mechanism": trial.mechanism,
            "rate": effective,
            "throughput_pps": forwarded,
            "method": s.method,
            "rate_requested": rate,
            "protocol": s.protocol,
            "packet_bytes": s.packet_bytes if s.protocol == "udp" else math.nan,
            "trial": trial.repetition,
            "order": trial.order,
            **extra,
            "duration_s": seconds,
            "sent_pps": (after[1] - before[1]) / seconds,
            "copies_pps": (after[3] - before[3]) / seconds,
            "iperf_pps": result.received_pps if result and "phase" not in extra else math.nan,
            "bits_per_second": result.bits_per_second if result else math.nan,
            "cpu_sender_pct": result.cpu_sender_pct if result else math.nan,
            "cpu_receiver_pct": result.cpu_receiver_pct if result else math.nan,
            "lost_percent": result.lost_percent if result else math.nan,
            "forwarded_pps": forwarded,
        }
        if after[4] is not None:  # CPU accounting: where the time went, per second
            row.update(after[4].per_second(before[4], seconds))
            row["budget_cpus"] = self.budget_cpus
        if s.method == "cpu":
            row["offered_pps"] = s.offered_pps
            row.update(cost_row(row, forwarded, self.budget_cpus))
        return row

    def _first_packet(self, load: Any = None) -> float:
        """When load started reaching the receiver (polled), so phases cover a flowing load.
        Raises ``_LoadExited`` at once if the load's process ended without packets."""
        deadline = self.clock() + FIRST_PACKET_TIMEOUT_S
        _, initial = self.port_stats(self.receiver_port)
        while self.clock() < deadline:
            time.sleep(0.05)
            if self.port_stats(self.receiver_port)[1] > initial + 10:
                return self.clock()
            if _exited(load):
                raise _LoadExited("the iperf3 client ended before any packet reached the receiver")
        raise HarnessError(
            f"no packets reached the receiver's port {self.receiver_port} within "
            f"{FIRST_PACKET_TIMEOUT_S:g} s of starting iperf3; is the receiver "
            f"reachable from the sender?"
        )

    def _flowing_load(self, duration_s: float) -> Any:
        """Start a load and wait for its first packet. An iperf3 server still busy with the
        previous, killed run refuses a new client at once ("the server is busy"), more often
        on a loaded host; such a client is started again, up to ``LOAD_STARTS`` times."""
        for attempt in range(1, LOAD_STARTS + 1):
            load = self._load(duration_s)
            try:
                self._first_packet(load)
                return load
            except _LoadExited as exc:
                load.stop()
                if attempt == LOAD_STARTS:
                    raise HarnessError(
                        f"{exc} ({LOAD_STARTS} tries); is the iperf3 server "
                        f"running and the receiver reachable?"
                    ) from None
                time.sleep(1.0)
            except BaseException:
                load.stop()
                raise
        raise AssertionError("unreachable")

    def measure(self, trial: Trial) -> list[dict]:
        """Independent design: configure, settle, count, one whole run, count; one row."""
        effective = self._set_active(trial.mechanism, trial.rate)
        time.sleep(self.settings.settle_s)
        before = self._counters(trial.mechanism)
        result = self._load(self.settings.duration_s).wait()
        time.sleep(0.2)  # let the last packets and sFlow datagrams land
        after = self._counters(trial.mechanism)
        seconds = result.seconds if result.seconds > 0 else self.settings.duration_s
        return [self._row(trial, trial.rate, effective, before, after, result, seconds)]

    def measure_paired(self, trial: Trial) -> list[dict]:
        """Paired design: one run alternating rate 0 and the trial's rate (order by coin);
        each phase sets the rate, skips ``guard_s``, then counts for the rest of ``phase_s``
        (timed from the count's start, so a slow reconfiguration on a loaded host delays the
        phase instead of shortening it). One row per phase, all in one block, so the fit
        compares them under the same background load. The load runs long enough for delayed
        phases and is stopped after the last one (iperf3's own totals are not recorded).

        A phase the load did not cover is not a measurement and is measured again: if a very
        loaded host delayed the phases past the load's end, a new load is started
        (``restarted_loads``); if the load forwarded nothing for the whole phase (starved on a
        host loaded many times over), the phase is repeated (``empty_phases``). After
        ``PHASE_RETRIES`` such phases the run keeps the phases it measured and counts the rest
        (``unmeasured_phases``), so a load that never flows cannot hold the calibration."""
        s = self.settings
        first = random.Random(s.seed * 100_003 + trial.order).random() < 0.5
        seconds, phases, guard_s = s.run_design(trial.mechanism)
        schedule = [trial.rate if (k % 2 == 0) == first else 0.0 for k in range(phases)]
        counted_s = seconds / phases - guard_s
        load_s = seconds * LOAD_SLACK + TAIL_S
        rows: list[dict] = []
        retries = 0
        self._set_active(None, 0.0)
        load = self._flowing_load(load_s)
        try:
            while len(rows) < phases:
                k = len(rows)
                effective = self._set_active(trial.mechanism, schedule[k])
                _sleep_until(self.clock, self.clock() + guard_s)
                before = self._counters(trial.mechanism)
                _sleep_until(self.clock, before[0] + counted_s)
                after = self._counters(trial.mechanism)
                ended, empty = _exited(load), after[2] == before[2]
                if ended or empty:
                    self.restarted_loads += ended
                    self.empty_phases += empty and not ended
                    retries += 1
                    if retries > PHASE_RETRIES:
                        self.unmeasured_phases += phases - k
                        break
                    if ended:
                        load.stop()
                        self._set_active(None, 0.0)
                        load = self._flowing_load(load_s)
                    continue
                rows.append(
                    self._row(
                        trial,
                        schedule[k],
                        effective,
                        before,
                        after,
                        None,
                        block=trial.order,
                        phase=k,
                    )
                )
        finally:
            load.stop()
        return rows


class _LoadExited(HarnessError):
    """The load's process ended before its first packet reached the receiver."""


def _exited(load: Any) -> bool:
    """Whether a load's process has ended (False for loads without a process, e.g. fakes)."""
    process = getattr(load, "process", None)
    return process is not None and process.poll() is not None


def _sleep_until(clock: Callable[[], float], deadline: float) -> None:
    remaining = deadline - clock()
    if remaining > 0:
        time.sleep(remaining)
