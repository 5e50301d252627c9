"""What a live window lost before the analyser saw it, so its snapshot can say so (pure).

Two inputs lose data on the way in: the packet ring (the kernel drops a frame its filter passed
when every block is still being read: ``PACKET_STATISTICS``) and the records' UDP path (datagrams
missing from a sender's sequence). ``Losses`` keeps the running totals and, as each window
closes, hands it the part since the previous window closed. The counters are read once per tick
(``service.Settings.tick_s``), so a window's share is exact to a tick at its ends.

A window that lost anything has counts that are a lower bound: a dropped frame can take a
request, a response or the bytes that make a connection's next messages readable (a hole in the
stream), and drops come in bursts, so the share of requests lost is not the share of frames
lost. The renormalised rate (``requests_per_s_ci95``) does not account for drops; the snapshot
says ``lower_bound`` instead (docs/appmon.md, "Drops").
"""

from __future__ import annotations

from dataclasses import dataclass

TOTALS = ("kernel_frames", "kernel_drops", "record_datagrams", "record_datagrams_lost")


@dataclass(frozen=True)
class WindowLosses:
    """One window's inputs: None where the analyser did not read that input."""

    kernel_frames: int | None = None  # frames the kernel's filter passed (drops included)
    kernel_drops: int | None = None
    record_datagrams: int | None = None  # datagrams taken, and missing from the sequences
    record_datagrams_lost: int | None = None

    @property
    def kernel_drop_share(self) -> float | None:
        return _share(self.kernel_drops, self.kernel_frames)

    @property
    def record_loss_share(self) -> float | None:
        if self.record_datagrams is None or self.record_datagrams_lost is None:
            return None
        return _share(
            self.record_datagrams_lost, self.record_datagrams + self.record_datagrams_lost
        )

    @property
    def lower_bound(self) -> bool:
        return bool(self.kernel_drops or self.record_datagrams_lost)


def _share(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return min(1.0, part / whole)


class Losses:
    """Running totals in, each closed window's part out."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(TOTALS, 0)
        self._at_close = dict(self.totals)

    def update(self, **totals: int) -> None:
        """The inputs' totals since the start (never smaller than before)."""
        for name, value in totals.items():
            self.totals[name] = max(self.totals[name], value)

    def close(self, *, frames: bool, records: bool) -> WindowLosses:
        """The losses since the last window closed, for the window closing now."""
        part = {name: self.totals[name] - self._at_close[name] for name in TOTALS}
        self._at_close = dict(self.totals)
        return WindowLosses(
            kernel_frames=part["kernel_frames"] if frames else None,
            kernel_drops=part["kernel_drops"] if frames else None,
            record_datagrams=part["record_datagrams"] if records else None,
            record_datagrams_lost=part["record_datagrams_lost"] if records else None,
        )
