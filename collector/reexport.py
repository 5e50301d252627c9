"""Re-export normalised sFlow to a downstream collector, so operators keep their tools.

Each counted sample is re-sent under its *origin* server's agent address (a mirrored copy under
its sender's, not the receiver's), without tunnel records, with an integer sampling rate drawn by
stochastic rounding of its weight in the combined estimate: unbiased on average, so a standard
collector that multiplies by the rate (pmacct's ``sfacctd_renormalize``, goflow2, sFlow-RT)
counts each server's traffic right. A weight below 1 rounds to 0 or 1; a 0 is not sent.
"""

from __future__ import annotations

import random
import socket

from cosample.collector.attribution import LOCAL, Attribution, Source
from cosample.collector.decode import FlowSample
from cosample.collector.encode import DATAGRAM_BUDGET_BYTES, SampleSpec, datagram, flow_sample
from cosample.collector.errors import CollectorError
from cosample.intervals import stochastic_round


class Reexporter:
    """Buffers re-encoded samples per origin agent and sends full datagrams (``flush`` the rest)."""

    def __init__(
        self,
        target: tuple[str, int],
        attribution: Attribution | None,
        *,
        seed: int | None = None,
        clock_ms=None,
    ) -> None:
        self.target = target
        self.attribution = attribution
        self._random = random.Random(seed)
        self._socket = socket.socket(
            socket.AF_INET6 if ":" in target[0] else socket.AF_INET, socket.SOCK_DGRAM
        )
        self._pending: dict[str, list[bytes]] = {}
        self._size: dict[str, int] = {}
        self._sample_seq: dict[str, int] = {}
        self._datagram_seq: dict[str, int] = {}
        self._pool: dict[str, int] = {}
        self._uptime_ms = clock_ms or (lambda: 0)
        self.sent_samples = 0
        self.sent_datagrams = 0
        self.errors = 0

    def __call__(self, sample: FlowSample, source: Source, weight: float) -> None:
        rate = stochastic_round(weight, self._random.random())
        if rate <= 0 or self.attribution is None:
            return
        agent = self.attribution.servers[source.server].agent
        if agent is None or ":" in agent:
            return  # the re-export speaks IPv4 agent addresses only
        sequence = self._sample_seq[agent] = self._sample_seq.get(agent, 0) + 1
        pool = self._pool[agent] = (self._pool.get(agent, 0) + rate) & 0xFFFFFFFF
        local = source.kind is LOCAL
        encoded = flow_sample(
            SampleSpec(
                sequence=sequence,
                sampling_rate=rate,
                sample_pool=pool,
                header=sample.header,
                frame_length=sample.frame_length,
                input_port=sample.input_port if local else 0,
                output_port=sample.output_port if local else 0,
            )
        )
        if self._size.get(agent, 0) + len(encoded) > DATAGRAM_BUDGET_BYTES - 28:
            self._send(agent)
        self._pending.setdefault(agent, []).append(encoded)
        self._size[agent] = self._size.get(agent, 0) + len(encoded)

    def flush(self) -> None:
        for agent in list(self._pending):
            self._send(agent)

    def _send(self, agent: str) -> None:
        samples = self._pending.pop(agent, [])
        self._size[agent] = 0
        if not samples:
            return
        number = self._datagram_seq[agent] = self._datagram_seq.get(agent, 0) + 1
        try:
            self._socket.sendto(
                datagram(agent, number, int(self._uptime_ms()), samples), self.target
            )
        except OSError:
            self.errors += 1  # a downstream collector that is down never stops the collector
            return
        self.sent_datagrams += 1
        self.sent_samples += len(samples)

    def close(self) -> None:
        self.flush()
        self._socket.close()


def parse_target(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[ADDR]:PORT``) for ``--reexport``."""
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise CollectorError(f"--reexport: expected HOST:PORT, got {value!r}")
    return host, int(port)
