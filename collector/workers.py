"""The daemon's slow work, each on a thread of its own so reception never waits for it.

- ``PlanPoller`` reads the plan every ``interval_s`` (from the start of one read to the start of
  the next, as ``polling.plan_lead_s`` assumes) and queues each ``Reading`` for the receive loop,
  which applies it between two batches: a plan server that trickles its answer holds this
  thread, not the socket.
- ``SnapshotWriter`` takes the newest snapshot and does what costs time with it: its JSON for
  ``/snapshot``, the events, the state file, the kernel's drop counter. When it falls behind it
  skips to the newest snapshot. A state file that cannot be written (disk full, descriptors
  exhausted) is counted and logged, never fatal.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from cosample.collector.planread import PlanReader, Reading

T = TypeVar("T")


class PlanPoller:
    def __init__(
        self, reader: PlanReader, interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.reader, self.interval_s, self.clock = reader, interval_s, clock
        self.readings: queue.SimpleQueue[Reading] = queue.SimpleQueue()
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="collector-plan", daemon=True)

    def start(self) -> "PlanPoller":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def take(self) -> list[Reading]:
        """The readings queued since the last call, oldest first (never blocks)."""
        out = []
        while True:
            try:
                out.append(self.readings.get_nowait())
            except queue.Empty:
                return out

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self.clock()
            self.readings.put(self.reader.read())  # never raises on input (PlanReader)
            self.reads += 1
            self._stop.wait(max(0.0, began + self.interval_s - self.clock()))


class SnapshotWriter(Generic[T]):
    """``submit(item)``: hand the newest export to ``write(item)`` on the writer thread."""

    def __init__(self, write: Callable[[T], None], log: Callable[[str], None]) -> None:
        self.write, self.log = write, log
        self.skipped = 0  # exports replaced by a newer one before they were written
        self._item: T | None = None
        self._ready = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="collector-writer", daemon=True)

    def start(self) -> "SnapshotWriter[T]":
        self._thread.start()
        return self

    def submit(self, item: T) -> None:
        with self._ready:
            if self._item is not None:
                self.skipped += 1
            self._item = item
            self._ready.notify()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Write what is pending, then end."""
        with self._ready:
            self._stop = True
            self._ready.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._ready:
                while self._item is None and not self._stop:
                    self._ready.wait()
                item, self._item = self._item, None
                if item is None:
                    return
            try:
                self.write(item)
            except Exception as exc:  # noqa: BLE001 (a writer that dies stops every export)
                self.log(
                    f"collector: export failed ({type(exc).__name__}: {exc}); "
                    "the next export tries again"
                )
