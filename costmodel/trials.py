"""What a calibration measures: its settings, checked on construction, and its trials.

``CalibrationSettings`` holds the grid (mechanisms x rates x repetitions), the method (``cpu``
or ``throughput``) and the design (``paired`` or ``independent``), and refuses a grid that could
not be run before anything is built; ``plan_trials`` orders the trials at random with the
settings' seed. ``harness.Calibrator`` runs them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.flowgen import FlowProfile, sender_argv
from cosample.costmodel.iperf import DEFAULT_PORT, MAX_STREAMS, PROTOCOLS, client_argv
from cosample.costmodel.localsample import CACHE_ACTIVE_TIMEOUT_S, CACHE_MAX_FLOWS

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
#: method's 20 kpps; a counter read is much shorter).
MIN_COUNTED_S = 0.05
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
