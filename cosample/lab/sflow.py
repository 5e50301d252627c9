"""The lab's counting sFlow collector: keep every flow sample, count them, for tests and calibration.

Decoding is the production decoder's (``cosample.collector.decode``); this module only adds a UDP
thread that keeps the raw records. Malformed datagrams are counted (``malformed``) and skipped.
The plan-aware collector that estimates per-server traffic is ``cosample.collector``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable

from cosample.collector.decode import (
    Datagram,
    DecodeError,
    FlowSample,
    parse_datagram,
    samples_announced,
)
from cosample.collector.errors import CollectorError

#: The lab's name for the decoder's error (every drop has a named ``reason``).
SflowError = DecodeError

__all__ = [
    "Datagram",
    "FlowSample",
    "SflowCollector",
    "SflowError",
    "parse_datagram",
    "samples_announced",
]


class SflowCollector:
    """A UDP collector in a background thread; bind to ``port=0`` to get a free port.

    ``decode=False`` only counts the samples each datagram announces (``sample_count``), for
    calibration runs where decoding every header in Python would steal the CPU being measured.
    ``receive_buffer`` enlarges the socket buffer (bytes; forced past the sysctl limit as root):
    at several thousand samples per second a collector thread that waits for a shared CPU
    otherwise loses datagrams.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        decode: bool = True,
        receive_buffer: int | None = None,
        keep_raw: bool = False,
    ) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._socket.bind((host, port))
            if receive_buffer:
                option = (
                    getattr(socket, "SO_RCVBUFFORCE", 33) if os.geteuid() == 0 else socket.SO_RCVBUF
                )
                self._socket.setsockopt(socket.SOL_SOCKET, option, receive_buffer)
        except OSError as exc:
            self._socket.close()
            raise CollectorError(
                f"sFlow collector cannot bind {host}:{port}: {exc.strerror}"
            ) from None
        self._socket.settimeout(0.2)
        self.host, self.port = self._socket.getsockname()
        self.decode = decode
        self.keep_raw = keep_raw
        #: with ``keep_raw``: every datagram as (Unix arrival time, bytes), for the estimator
        self.raw: list[tuple[float, bytes]] = []
        self.samples: list[FlowSample] = []
        self.sample_count = 0
        self.datagrams = 0
        self.malformed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sflow-collector", daemon=True)

    @property
    def target(self) -> str:
        """``HOST:PORT`` as OVS's sFlow ``targets`` wants it."""
        return f"{self.host}:{self.port}"

    def start(self) -> "SflowCollector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self._socket.close()

    def __enter__(self) -> "SflowCollector":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._socket.recv(65535)
            except (socket.timeout, OSError):
                continue
            if self.keep_raw:
                with self._lock:
                    self.raw.append((time.time(), data))
            try:
                if self.decode:
                    flows = parse_datagram(data).flow_samples
                    count = len(flows)
                else:
                    flows, count = (), samples_announced(data)
            except SflowError:
                with self._lock:
                    self.malformed += 1
                continue
            with self._lock:
                self.datagrams += 1
                self.sample_count += count
                self.samples.extend(flows)

    def raw_datagrams(self) -> list[tuple[float, bytes]]:
        """A copy of the datagrams kept so far (``keep_raw``)."""
        with self._lock:
            return list(self.raw)

    def snapshot(self) -> list[FlowSample]:
        """A copy of the samples received so far."""
        with self._lock:
            return list(self.samples)

    def clear(self) -> None:
        with self._lock:
            self.samples.clear()
            self.raw.clear()
            self.sample_count = 0
            self.datagrams = 0
            self.malformed = 0

    def count_by(self, key: Callable[[FlowSample], Hashable]) -> Counter:
        """Samples counted by ``key`` (e.g. ``lambda s: s.src_ip``)."""
        return Counter(key(sample) for sample in self.snapshot())
