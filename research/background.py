"""A controlled stand-in for other people's work on a shared host: processes that burn CPU.

``hog:N`` runs N processes that busy-loop all the time; ``bursty:N`` runs N processes that each
alternate busy and idle periods drawn from a seeded generator (``bursty_schedule``: busy and
idle each uniform in 0.5-4 s), so the same seed gives the same load pattern. Every process is
told a deadline and ends by itself when it passes, so nothing outlives an experiment that was
killed; ``BackgroundLoad`` also stops them by PID when its block ends. Each process runs in a
session of its own: with autogroup scheduling (on here), processes of one session share one
slice of the CPUs, and other people's work comes from other sessions.

The worker is this module: ``python -m research.background --seconds 300
[--bursty SEED]``.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from research import ROOT

#: Bounds of the bursty pattern's busy and idle periods, seconds.
BURSTY_BUSY_S = (0.5, 4.0)
BURSTY_IDLE_S = (0.5, 4.0)
#: The worker's command, as ``ps`` shows it; tests look for it.
WORKER = (sys.executable, "-m", "research.background")


class Background(BaseModel):
    """What runs beside each calibration: nothing, ``processes`` hogs, or bursty processes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["none", "hog", "bursty"]
    processes: int = Field(0, ge=0, le=64)

    @classmethod
    def parse(cls, text: str) -> Background:
        """``none``, ``hog:N`` or ``bursty:N`` (N in 1..64)."""
        kind, _, count = text.partition(":")
        try:
            spec = cls(kind=kind, processes=count if count else 0)
        except ValidationError:
            spec = None
        if spec is None or (spec.kind == "none") != (spec.processes == 0):
            raise ValueError(
                f"background {text!r}: expected none, hog:N or bursty:N with N in 1..64"
            )
        return spec

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}:{self.processes}"


def bursty_schedule(
    seed: int | str,
    seconds: float,
    busy_s: tuple[float, float] = BURSTY_BUSY_S,
    idle_s: tuple[float, float] = BURSTY_IDLE_S,
) -> list[tuple[float, float]]:
    """``(busy, idle)`` periods drawn from ``seed`` until they cover ``seconds``."""
    rng, periods, covered = random.Random(seed), [], 0.0
    while covered < seconds:
        period = (rng.uniform(*busy_s), rng.uniform(*idle_s))
        periods.append(period)
        covered += sum(period)
    return periods


def worker_argv(spec: Background, seed: int, index: int, seconds: float) -> list[str]:
    """The command of process ``index``: a hog, or bursty from ``"{seed}/{index}"`` (so every
    design of a round, which shares its seed, meets the same load pattern)."""
    argv = [*WORKER, "--seconds", f"{seconds:g}"]
    return argv + (["--bursty", f"{seed}/{index}"] if spec.kind == "bursty" else [])


def work(
    schedule: list[tuple[float, float]],
    seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Busy-loop and sleep as ``schedule`` says, and return at ``seconds`` at the latest."""
    end = clock() + seconds
    for busy, idle in schedule:
        stop = min(clock() + busy, end)
        while clock() < stop:
            pass
        rest = min(idle, end - clock())
        if rest <= 0:
            return
        sleep(rest)


class BackgroundLoad:
    """Start the processes of ``spec`` on enter, stop them by PID on exit; each also ends by
    itself after ``seconds``."""

    def __init__(self, spec: Background, seed: int, seconds: float) -> None:
        self.spec, self.seed, self.seconds = spec, seed, seconds
        self.processes: list[subprocess.Popen] = []

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def __enter__(self) -> BackgroundLoad:
        try:
            for index in range(self.spec.processes):
                argv = worker_argv(self.spec, self.seed, index, self.seconds)
                self.processes.append(
                    subprocess.Popen(
                        argv, start_new_session=True, cwd=ROOT, stdin=subprocess.DEVNULL
                    )
                )
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    """The worker: one hog (no ``--bursty``) or one bursty process, for ``--seconds`` at most."""
    parser = argparse.ArgumentParser(description="one background CPU load process")
    parser.add_argument("--seconds", type=float, required=True, help="end by then at the latest")
    parser.add_argument("--bursty", metavar="SEED", help="alternate busy and idle from this seed")
    args = parser.parse_args(argv)
    schedule = (
        [(args.seconds, 0.0)] if args.bursty is None else bursty_schedule(args.bursty, args.seconds)
    )
    work(schedule, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
