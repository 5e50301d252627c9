"""The values of a collector snapshot that events watch (``cosample.events`` detects when one
leaves its band)."""

from __future__ import annotations

from collections.abc import Iterator


def snapshot_values(snapshot) -> Iterator[tuple[str, float]]:
    """The values events watch: each server's packets/s and bytes/s."""
    for server, estimate in snapshot.servers.items():
        yield f"{server}.packets_per_s", estimate.packets_per_s
        yield f"{server}.bytes_per_s", estimate.bytes_per_s
