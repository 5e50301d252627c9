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
from cosample.costmodel.flowgen import FlowProfile, sender_argv
from cosample.costmodel.iperf import (
    DEFAULT_PORT,
    MAX_STREAMS,
    PROTOCOLS,
    IperfResult,
    client_argv,
)
from cosample.costmodel.localsample import CACHE_ACTIVE_TIMEOUT_S, CACHE_MAX_FLOWS
from cosample.costmodel.mechanisms import Mechanism

MECHANISMS = (
    "sflow",
    "mirror",
    "mirror_vxlan",
    "sample_action",
    "sample_action_cached",
    "tc_sample",
)
DESIGNS = ("paired", "independent")
#: ``cpu``: CPU time per packet at a fixed offered load; ``throughput``: packets/s at saturation.
METHODS = ("cpu", "throughput")
#: TCP segment payload assumed to turn ``offered_pps`` into iperf3's ``-b`` (MTU 1500).
TCP_SEGMENT_BYTES = 1448
#: Paired runs: seconds of load kept beyond the phases (iperf3 starts before packets flow).
TAIL_S = 1.5
#: Paired runs: the load lasts this many times the nominal duration (phases delayed by slow
#: reconfiguration still have load), and is stopped after the last phase.
LOAD_SLACK = 2.0
#: Paired runs: the shortest counted part of a phase, seconds (1,000 packets at the cpu
#: method's 20 kpps; a counter read is much shorter).
MIN_COUNTED_S = 0.05
#: Paired runs: how long to wait for the first packet to reach the receiver.
FIRST_PACKET_TIMEOUT_S = 10.0
#: Paired runs: how many times a load whose client exits before its first packet is started.
LOAD_STARTS = 3
#: Paired runs: how many phases of one run may be measured again (a phase the load did not
#: cover: it ended, or forwarded nothing) before the run keeps what it has.
PHASE_RETRIES = 4
#: The largest burst iperf3 accepts (its ``MAX_BURST``).
MAX_BURST = 1000


@dataclass(frozen=True)
class CalibrationSettings:
    """What to measure; checked on construction so a bad grid fails before anything is built."""

    mechanisms: tuple[str, ...] = ("sflow", "mirror")
    rates: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    repetitions: int = 2
    duration_s: float = 6.0
    protocol: str = "udp"
    packet_bytes: int = 64
    bandwidth: str = "0"
    warmup_s: float = 2.0
    settle_s: float = 0.5
    seed: int = 0
    port: int = DEFAULT_PORT
    design: str = "paired"
    phases: int = 4
    guard_s: float = 0.3
    method: str = "throughput"
    offered_pps: float = 20_000.0
    #: cpu method: packets per burst of the offered load (iperf3 ``-b RATE/N``); 0: iperf3's
    #: own pacing (whatever its 1-ms timer finds due).
    burst: int = 0
    #: Parallel flows of the load (iperf3 ``-P``), sharing ``offered_pps``: a flow cache
    #: (``sample_action_cached``) keeps one entry per flow.
    streams: int = 1
    #: cpu method: the load from ``costmodel.flowgen`` instead of iperf3, as this many
    #: concurrent UDP flows (0: iperf3's ``streams``); each lasting ``flow_packets`` datagrams
    #: before a new 5-tuple replaces it (0: the whole run). A flow cache's cost depends on both.
    flows: int = 0
    flow_packets: int = 0
    #: ``sample_action_cached``: the exporter's ``cache_max_flows`` and
    #: ``cache_active_timeout`` (seconds).
    ipfix_cache_flows: int = CACHE_MAX_FLOWS
    ipfix_active_timeout_s: int = CACHE_ACTIVE_TIMEOUT_S
    #: Paired runs of some mechanisms with their own design:
    #: ``(mechanism, seconds, phases, guard seconds)``.
    run_lengths: tuple[tuple[str, float, int, float], ...] = ()

    def run_design(self, mechanism: str) -> tuple[float, int, float]:
        """(seconds, phases, guard seconds) of one paired run of ``mechanism``."""
        for name, seconds, phases, guard_s in self.run_lengths:
            if name == mechanism:
                return float(seconds), int(phases), float(guard_s)
        return self.duration_s, self.phases, self.guard_s

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise HarnessError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.method == "cpu":
            if not (
                isinstance(self.offered_pps, (int, float)) and 100 <= self.offered_pps <= 10_000_000
            ):
                raise HarnessError(
                    f"offered load must be 100..10,000,000 packets/s, got {self.offered_pps!r}"
                )
            if not (isinstance(self.burst, int) and 0 <= self.burst <= MAX_BURST):
                raise HarnessError(f"burst must be 0..{MAX_BURST} packets, got {self.burst!r}")
        if not (isinstance(self.streams, int) and 1 <= self.streams <= MAX_STREAMS):
            raise HarnessError(f"streams must be 1..{MAX_STREAMS}, got {self.streams!r}")
        if self.flows or self.flow_packets:
            if self.method != "cpu" or self.protocol != "udp" or self.streams != 1:
                raise HarnessError(
                    "flows: the flow generator offers a UDP load at a fixed rate "
                    "(--method cpu, --protocol udp, no --streams)"
                )
            if not self.flows:
                raise HarnessError("flow packets: give the number of concurrent flows too")
            FlowProfile(self.flows, self.flow_packets)  # checks both
        if not (
            isinstance(self.ipfix_cache_flows, int) and 1 <= self.ipfix_cache_flows <= 2**32 - 1
        ):
            raise HarnessError(
                f"IPFIX cache flows must be 1..{2**32 - 1}, got {self.ipfix_cache_flows!r}"
            )
        if not (
            isinstance(self.ipfix_active_timeout_s, int)
            and 1 <= self.ipfix_active_timeout_s <= 3600
        ):
            raise HarnessError(
                f"IPFIX active timeout must be 1..3600 s, got {self.ipfix_active_timeout_s!r}"
            )
        if self.design not in DESIGNS:
            raise HarnessError(f"design must be one of {', '.join(DESIGNS)}, got {self.design!r}")
        if self.design == "paired":
            if not any(r > 0 for r in self.rates if isinstance(r, (int, float))):
                raise HarnessError("rates: the paired design needs a rate > 0 (0 is in every run)")
            for name, *_ in self.run_lengths:
                if name not in MECHANISMS:
                    raise HarnessError(f"run length for unknown mechanism {name!r}")
            for seconds, phases, guard_s in {
                (self.duration_s, self.phases, self.guard_s),
                *(self.run_design(m) for m in self.mechanisms),
            }:
                if not isinstance(phases, int) or phases < 2 or phases % 2:
                    raise HarnessError(f"phases must be an even integer >= 2, got {phases!r}")
                if not seconds >= 1:
                    raise HarnessError(
                        f"duration must be >= 1 s (iperf3's minimum), got {seconds!r}"
                    )
                if not (isinstance(guard_s, (int, float)) and guard_s >= 0):
                    raise HarnessError(f"guard must be >= 0 s, got {guard_s!r}")
                if seconds / phases < guard_s + MIN_COUNTED_S:
                    raise HarnessError(
                        f"duration {seconds:g} s is too short for "
                        f"{phases} phases of at least "
                        f"{guard_s + MIN_COUNTED_S:g} s"
                    )
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if not self.mechanisms or unknown:
            raise HarnessError(
                f"mechanisms: choose from {', '.join(MECHANISMS)}, got "
                f"{', '.join(self.mechanisms) or 'none'}"
            )
        if len(set(self.mechanisms)) != len(self.mechanisms):
            raise HarnessError(f"mechanisms: duplicates in {', '.join(self.mechanisms)}")
        bad = [r for r in self.rates if not (isinstance(r, (int, float)) and 0 <= r <= 1)]
        if bad:
            raise HarnessError(f"rates: each must be in [0, 1], got {bad[0]!r}")
        if self.design == "independent" and len(set(self.rates)) < 2:
            raise HarnessError(
                "rates: need at least 2 distinct rates to fit the law (3+ to check it)"
            )
        if not isinstance(self.repetitions, int) or self.repetitions < 1:
            raise HarnessError(f"repetitions must be an integer >= 1, got {self.repetitions!r}")
        if not self.duration_s >= 1:
            raise HarnessError(
                f"duration must be >= 1 s (iperf3's minimum), got {self.duration_s!r}"
            )
        if self.protocol not in PROTOCOLS:
            raise HarnessError(
                f"protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}"
            )
        if not 0 <= self.warmup_s <= 600 or not 0 <= self.settle_s <= 60:
            raise HarnessError("warm-up must be in [0, 600] s and settle time in [0, 60] s")

    def client_argv(self, server_ip: str, duration_s: float | None = None) -> list[str]:
        profile = self.flow_profile
        if profile is not None:  # (``flows``: the flow generator makes the load)
            return sender_argv(
                server_ip,
                self.port + 1,
                self.offered_pps,
                duration_s or self.duration_s,
                profile,
                self.packet_bytes,
            )
        return client_argv(
            server_ip,
            port=self.port,
            duration_s=duration_s or self.duration_s,
            protocol=self.protocol,
            packet_bytes=self.packet_bytes,
            bandwidth=self.load_bandwidth,
            streams=self.streams,
        )

    @property
    def flow_profile(self) -> FlowProfile | None:
        """The flow generator's profile, None when iperf3 makes the load."""
        return FlowProfile(self.flows, self.flow_packets) if self.flows else None

    @property
    def load_bandwidth(self) -> str:
        """iperf3's ``-b``: flat out (or ``bandwidth``) for the throughput method; for the cpu
        method the bits per second that make ``offered_pps`` packets (UDP datagrams or TCP
        segments of ``TCP_SEGMENT_BYTES``), sent ``burst`` at a time when given, split over
        ``streams`` (iperf3's ``-b`` is per stream)."""
        if self.method != "cpu":
            return self.bandwidth
        size = self.packet_bytes if self.protocol == "udp" else TCP_SEGMENT_BYTES
        bits = str(round(self.offered_pps * size * 8 / self.streams))
        return f"{bits}/{self.burst}" if self.burst else bits

    @property
    def trial_rates(self) -> tuple[float, ...]:
        """Rates with a trial of their own (paired runs hold rate 0 in every trial)."""
        rates = tuple(dict.fromkeys(float(r) for r in self.rates))
        return tuple(r for r in rates if r > 0) if self.design == "paired" else rates

    @property
    def estimated_s(self) -> float:
        """Rough wall time: trials x (duration + overheads) plus the warm-up."""
        per_mechanism = len(self.trial_rates) * self.repetitions
        overhead = TAIL_S + 1.0 if self.design == "paired" else self.settle_s + 1.0
        seconds = sum(
            (self.run_design(m)[0] if self.design == "paired" else self.duration_s)
            for m in self.mechanisms
        )
        return self.warmup_s + per_mechanism * (seconds + len(self.mechanisms) * overhead)


@dataclass(frozen=True)
class Trial:
    order: int
    mechanism: str
    rate: float
    repetition: int


def plan_trials(settings: CalibrationSettings) -> list[Trial]:
    """Every (mechanism, trial rate, repetition) once, shuffled with the settings' seed."""
    cells = [
        (m, r, k)
        for m in settings.mechanisms
        for r in settings.trial_rates
        for k in range(settings.repetitions)
    ]
    random.Random(settings.seed).shuffle(cells)
    return [Trial(order, m, r, k) for order, (m, r, k) in enumerate(cells)]


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
