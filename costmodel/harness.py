"""Run a calibration: a grid of rates per mechanism, repeated, in random order, through iperf3.

For each trial the harness sets the trial's mechanism to its rate (every other mechanism off),
lets OVS settle, reads counters, runs one iperf3 client, reads counters again and records one
tidy row. What the columns mean:

- ``throughput_pps``: packets OVS delivered to the receiver's port per second (OpenFlow port
  statistics of the receiver's port, ``tx pkts``), over iperf3's measured duration;
- ``sent_pps``: packets OVS took in from the sender's port (``rx pkts``) per second;
- ``copies_pps``: sampled (sFlow samples at the collector) or mirrored (``tx_packets`` of the
  mirror target) copies per second — ``copies_pps / sent_pps`` checks the configured rate;
- ``iperf_pps`` (UDP): datagrams the iperf3 server received per second; ``bits_per_second``,
  CPU and loss as iperf3 reports them.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.iperf import DEFAULT_PORT, PROTOCOLS, IperfResult, client_argv, run_client
from cosample.costmodel.mechanisms import Mechanism

MECHANISMS = ("sflow", "mirror")
_PORT_STATS = re.compile(r"rx pkts=(\d+).*?tx pkts=(\d+)", re.S)


@dataclass(frozen=True)
class CalibrationSettings:
    """What to measure; checked on construction so a bad grid fails before anything is built."""

    mechanisms: tuple[str, ...] = MECHANISMS
    rates: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    repetitions: int = 2
    duration_s: float = 3.0
    protocol: str = "udp"
    packet_bytes: int = 64
    bandwidth: str = "0"
    warmup_s: float = 2.0
    settle_s: float = 0.5
    seed: int = 0
    port: int = DEFAULT_PORT

    def __post_init__(self) -> None:
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if not self.mechanisms or unknown:
            raise HarnessError(f"mechanisms: choose from {', '.join(MECHANISMS)}, got "
                               f"{', '.join(self.mechanisms) or 'none'}")
        if len(set(self.mechanisms)) != len(self.mechanisms):
            raise HarnessError(f"mechanisms: duplicates in {', '.join(self.mechanisms)}")
        bad = [r for r in self.rates if not (isinstance(r, (int, float)) and 0 <= r <= 1)]
        if bad:
            raise HarnessError(f"rates: each must be in [0, 1], got {bad[0]!r}")
        if len(set(self.rates)) < 2:
            raise HarnessError("rates: need at least 2 distinct rates to fit the law (3+ to check it)")
        if not isinstance(self.repetitions, int) or self.repetitions < 1:
            raise HarnessError(f"repetitions must be an integer >= 1, got {self.repetitions!r}")
        if not self.duration_s >= 1:
            raise HarnessError(f"duration must be >= 1 s (iperf3's minimum), got {self.duration_s!r}")
        if self.protocol not in PROTOCOLS:
            raise HarnessError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if not 0 <= self.warmup_s <= 600 or not 0 <= self.settle_s <= 60:
            raise HarnessError("warm-up must be in [0, 600] s and settle time in [0, 60] s")

    def client_argv(self, server_ip: str, duration_s: float | None = None) -> list[str]:
        return client_argv(server_ip, port=self.port, duration_s=duration_s or self.duration_s,
                           protocol=self.protocol, packet_bytes=self.packet_bytes,
                           bandwidth=self.bandwidth)

    @property
    def estimated_s(self) -> float:
        """Rough wall time: trials x (duration + overheads) plus the warm-up."""
        trials = len(self.mechanisms) * len(self.rates) * self.repetitions
        return self.warmup_s + trials * (self.duration_s + self.settle_s + 1.0)


@dataclass(frozen=True)
class Trial:
    order: int
    mechanism: str
    rate: float
    repetition: int


def plan_trials(settings: CalibrationSettings) -> list[Trial]:
    """Every (mechanism, rate, repetition) once, shuffled with the settings' seed."""
    cells = [(m, float(r), k) for m in settings.mechanisms for r in settings.rates
             for k in range(settings.repetitions)]
    random.Random(settings.seed).shuffle(cells)
    return [Trial(order, m, r, k) for order, (m, r, k) in enumerate(cells)]


def parse_port_stats(text: str) -> tuple[int, int]:
    """``(rx_packets, tx_packets)`` from ``ovs-ofctl dump-ports BRIDGE PORT`` output."""
    match = _PORT_STATS.search(text)
    if not match:
        raise HarnessError(f"cannot read port statistics from ovs-ofctl output: {text[:120]!r}")
    return int(match.group(1)), int(match.group(2))


def device_tx_packets(device: str) -> int:
    """Kernel ``tx_packets`` of a device in this namespace (copies leaving by a mirror target)."""
    try:
        return int(Path(f"/sys/class/net/{device}/statistics/tx_packets").read_text())
    except (OSError, ValueError) as exc:
        raise HarnessError(f"cannot read tx_packets of {device}: {exc}") from None


@dataclass
class Calibrator:
    """Runs ``plan_trials`` against real endpoints; effects come in as callables and objects.

    ``port_stats(port) -> (rx, tx)``, ``copies[mechanism]() -> count so far``, ``client(argv,
    duration) -> IperfResult``; the CLI wires them to ovs-ofctl, the collector and iperf3.
    """

    settings: CalibrationSettings
    mechanisms: Mapping[str, Mechanism]
    port_stats: Callable[[str], tuple[int, int]]
    copies: Mapping[str, Callable[[], int]]
    client: Callable[[Sequence[str], float], IperfResult]
    server_ip: str
    sender_port: str
    receiver_port: str
    rows: list[dict] = field(default_factory=list)

    def run(self, show_progress: bool = True) -> pd.DataFrame:
        """All trials; mechanisms are switched off at the end, also on error or Ctrl-C."""
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeRemainingColumn)

        trials = plan_trials(self.settings)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn())
        try:
            with Progress(*columns, disable=not show_progress, transient=False) as progress:
                task = progress.add_task("warm-up", total=len(trials))
                self._set_active(None, 0.0)
                if self.settings.warmup_s >= 1:
                    self.client(self.settings.client_argv(self.server_ip, self.settings.warmup_s),
                                self.settings.warmup_s)
                for trial in trials:
                    progress.update(task, description=f"{trial.mechanism:<6} rate {trial.rate:.2f}")
                    self.rows.append(self.measure(trial))
                    progress.advance(task)
        finally:
            for mechanism in self.mechanisms.values():
                mechanism.clear()
        return pd.DataFrame(self.rows)

    def _set_active(self, active: str | None, rate: float) -> float:
        effective = 0.0
        for name, mechanism in self.mechanisms.items():
            configured = mechanism.set_rate(rate if name == active else 0.0)
            if name == active:
                effective = configured
        return effective

    def measure(self, trial: Trial) -> dict:
        """One trial: configure, settle, count, load, count; one tidy row."""
        s = self.settings
        effective = self._set_active(trial.mechanism, trial.rate)
        time.sleep(s.settle_s)
        count_copies = self.copies.get(trial.mechanism, lambda: 0)
        rx0, _ = self.port_stats(self.sender_port)
        _, tx0 = self.port_stats(self.receiver_port)
        copies0 = count_copies()
        result = self.client(s.client_argv(self.server_ip), s.duration_s)
        time.sleep(0.2)  # let the last packets and sFlow datagrams land
        rx1, _ = self.port_stats(self.sender_port)
        _, tx1 = self.port_stats(self.receiver_port)
        copies1 = count_copies()
        seconds = result.seconds if result.seconds > 0 else s.duration_s
        return {
            "mechanism": trial.mechanism, "rate": effective,
            "throughput_pps": (tx1 - tx0) / seconds, "rate_requested": trial.rate,
            "protocol": s.protocol, "packet_bytes": s.packet_bytes if s.protocol == "udp" else math.nan,
            "trial": trial.repetition, "order": trial.order, "duration_s": seconds,
            "sent_pps": (rx1 - rx0) / seconds, "copies_pps": (copies1 - copies0) / seconds,
            "iperf_pps": result.received_pps, "bits_per_second": result.bits_per_second,
            "cpu_sender_pct": result.cpu_sender_pct, "cpu_receiver_pct": result.cpu_receiver_pct,
            "lost_percent": result.lost_percent,
        }


def iperf_client(exec_prefix: Sequence[str], protocol: str) -> Callable[[Sequence[str], float], IperfResult]:
    """The ``client`` callable for ``Calibrator``: iperf3 run through an endpoint's prefix."""
    def client(argv: Sequence[str], duration_s: float) -> IperfResult:
        return run_client(exec_prefix, argv, protocol, duration_s)
    return client


def run_calibration(endpoints, ovs, settings: CalibrationSettings,
                    show_progress: bool = True) -> pd.DataFrame:
    """Wire a ``Calibrator`` to real things: an sFlow counter on 127.0.0.1, the tc mirror,
    an iperf3 server on the receiver, OVS port statistics; everything stops at the end.

    ``endpoints`` is a ``testbed.Endpoints``; ``ovs`` offers ``vsctl(*args)`` and ``ofctl(*args)``.
    """
    from contextlib import ExitStack

    from cosample.costmodel.collector import SampleCounter
    from cosample.costmodel.iperf import IperfServer
    from cosample.costmodel.mechanisms import SflowSampling, TcMirror

    with ExitStack() as stack:
        mechanisms: dict[str, Mechanism] = {}
        copies: dict[str, Callable[[], int]] = {}
        if "sflow" in settings.mechanisms:
            counter = stack.enter_context(SampleCounter())
            mechanisms["sflow"] = SflowSampling(ovs.vsctl, endpoints.bridge, counter.target)
            copies["sflow"] = lambda: counter.samples
        if "mirror" in settings.mechanisms:
            mechanisms["mirror"] = TcMirror(endpoints.sender_port, endpoints.mirror_target)
            copies["mirror"] = lambda: device_tx_packets(endpoints.mirror_target)
        stack.enter_context(IperfServer(endpoints.receiver_exec, settings.port))

        def port_stats(port: str) -> tuple[int, int]:
            return parse_port_stats(ovs.ofctl("dump-ports", endpoints.bridge, port))

        calibrator = Calibrator(settings, mechanisms, port_stats, copies,
                                iperf_client(endpoints.sender_exec, settings.protocol),
                                endpoints.receiver_ip, endpoints.sender_port,
                                endpoints.receiver_port)
        return calibrator.run(show_progress)
