"""Packet counters the calibration reads: an OVS port's (``ovs-ofctl dump-ports``) and a kernel
device's (``/sys/class/net``, read in microseconds, so a count and a CPU snapshot can be taken
at the same instant)."""

from __future__ import annotations

import re
from pathlib import Path

from cosample.costmodel.errors import HarnessError

_PORT_STATS = re.compile(r"rx pkts=(\d+).*?tx pkts=(\d+)", re.S)


def parse_port_stats(text: str) -> tuple[int, int]:
    """``(rx_packets, tx_packets)`` from ``ovs-ofctl dump-ports BRIDGE PORT`` output."""
    match = _PORT_STATS.search(text)
    if not match:
        raise HarnessError(f"cannot read port statistics from ovs-ofctl output: {text[:120]!r}")
    return int(match.group(1)), int(match.group(2))


def device_packets(device: str) -> tuple[int, int] | None:
    """``(rx_packets, tx_packets)`` of a kernel device in this namespace, None if there is none.

    For an OVS port backed by a kernel device these are OVS's rx/tx of the port, read in
    microseconds rather than by a subprocess; that lets a count and a CPU snapshot be taken at
    the same instant (ovs-ofctl takes tens of milliseconds on a loaded host)."""
    statistics = Path(f"/sys/class/net/{device}/statistics")
    try:
        return (
            int((statistics / "rx_packets").read_text()),
            int((statistics / "tx_packets").read_text()),
        )
    except (OSError, ValueError):
        return None


def device_tx_packets(device: str) -> int:
    """Copies sent out of a device in this namespace: kernel ``tx_packets + tx_dropped`` (a
    copy the far end had no room for was still made, and still cost the sender)."""
    total = 0
    for counter in ("tx_packets", "tx_dropped"):
        try:
            total += int(Path(f"/sys/class/net/{device}/statistics/{counter}").read_text())
        except (OSError, ValueError) as exc:
            raise HarnessError(f"cannot read {counter} of {device}: {exc}") from None
    return total
