"""``appmon replay``: the analyser driven by a capture, time taken from the capture."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from cosample.appmon.analyser import Analyser
from cosample.appmon.pcap import frames, read_link
from cosample.appmon.snapshot import AppSnapshot, snapshot

#: Frames read from the capture at a time (the fast path takes a list).
CHUNK = 4096


def replay(
    capture: str | Path,
    *,
    window_s: float = 10.0,
    ports: frozenset[int] = frozenset(),
    name: str = "replay",
    protocols: dict[int, str] | None = None,
    compiled: bool = True,
) -> Iterator[AppSnapshot]:
    """One snapshot per window of the capture, in time order (the last one as far as it got);
    ``protocols``: server port -> declared protocol (``appmon.protocols``); ``compiled=False``:
    the Python path alone (the fast path's reference, ``appmon.fastpath``)."""
    analyser = Analyser(
        window_s, link=read_link(capture), ports=ports, protocols=protocols, compiled=compiled
    )
    ingest, ingest_from, windows = analyser.ingest, analyser.ingest_from, analyser.windows
    read = frames(capture)
    while chunk := list(islice(read, CHUNK)):
        index = 0
        while index < len(chunk):
            index = ingest_from(chunk, index)  # the compiled fast path stops at a window's end
            if index < len(chunk):
                time, frame = chunk[index]
                if time >= windows.end and windows.start is not None:
                    yield from _snapshots(analyser, analyser.tick(time), name)
                ingest(frame, time)
                index += 1
    yield from _snapshots(analyser, analyser.finish(), name)


def _snapshots(analyser: Analyser, windows, name: str) -> Iterator[AppSnapshot]:
    for window in windows:
        yield snapshot(
            window,
            analyser=name,
            frames=analyser.frames,
            connections=analyser.table.connections,
            dropped=analyser.dropped(),
            ignored=analyser.ignored(),
        )


def table(snap: AppSnapshot) -> str:
    """Plain lines: one per service of the window."""
    lines = []
    for s in snap.services:
        timing = s.service_time_s
        times = (
            (
                f"mean {timing.mean * 1e3:8.2f} ms  min {timing.min * 1e3:8.2f}  max "
                f"{timing.max * 1e3:8.2f}  p50 {timing.p50 * 1e3:8.2f}  p95 "
                f"{timing.p95 * 1e3:8.2f}  p99 {timing.p99 * 1e3:8.2f}"
            )
            if timing
            else "no matched responses"
        )
        success = f"{s.success_rate:.4f}" if s.success_rate is not None else "-"
        lines.append(
            f"{snap.window_start:%H:%M:%S}  {s.service:<22} {s.requests:>7} req "
            f"{s.requests_per_s:>9.1f}/s  success {success}  {times}"
        )
    return "\n".join(lines) + ("\n" if lines else "")
