"""A light sFlow collector that only counts: datagrams and the samples they carry.

During calibration OVS may export every packet's header (1-in-1 of ~10^5 pps); decoding each
sample in Python (``cosample.lab.sflow``) would compete for the CPU being measured. The sample
count sits in the sFlow v5 datagram header, so counting costs one unpack per datagram.
"""

from __future__ import annotations

import socket
import struct
import threading

from cosample.costmodel.errors import HarnessError

#: Header bytes before ``num_samples``: version, address type, address, sub-agent, sequence, uptime.
_AFTER_ADDRESS = 12


def samples_in_datagram(data: bytes) -> int | None:
    """Number of samples an sFlow v5 datagram announces; None if it is not one."""
    if len(data) < 8:
        return None
    version, address_type = struct.unpack_from("!II", data, 0)
    length = {1: 4, 2: 16}.get(address_type)
    if version != 5 or length is None or len(data) < 8 + length + _AFTER_ADDRESS + 4:
        return None
    return struct.unpack_from("!I", data, 8 + length + _AFTER_ADDRESS)[0]


class SampleCounter:
    """UDP listener on ``host:port`` (0 = any free port) counting sFlow samples in a thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._socket.bind((host, port))
        except OSError as exc:
            self._socket.close()
            raise HarnessError(f"sFlow collector cannot bind {host}:{port}: {exc.strerror}") from None
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self._socket.settimeout(0.2)
        self.host, self.port = self._socket.getsockname()
        self.samples = 0
        self.datagrams = 0
        self.malformed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sflow-counter", daemon=True)

    @property
    def target(self) -> str:
        """``HOST:PORT`` for OVS's sFlow ``targets``."""
        return f"{self.host}:{self.port}"

    def __enter__(self) -> "SampleCounter":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._socket.close()

    def _loop(self) -> None:
        buffer = bytearray(65535)
        while not self._stop.is_set():
            try:
                size = self._socket.recv_into(buffer)
            except (socket.timeout, OSError):
                continue
            count = samples_in_datagram(bytes(buffer[:64]) if size >= 64 else bytes(buffer[:size]))
            if count is None:
                self.malformed += 1
            else:  # single writer; readers only need a recent value
                self.datagrams += 1
                self.samples += count
