"""What one controller cycle carries from step to step: its judgement and its step timings.

``Judged`` is what ``Controller._judge`` computes from a snapshot and ``_situation`` completes
for ``decide``; ``mark``/``lap`` time each step in wall-clock and CPU seconds (the cycle's
``status.timings``, which ``bench_controller`` prints beside its floors).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosample.controller import decide as decisions
from cosample.controller.estimate import Measurement
from cosample.controller.evaluate import Evaluation
from cosample.controller.plausibility import Refusal, Screen
from cosample.controller.replan import Candidate
from cosample.controller.smoothing import Smoothed


@dataclass(frozen=True)
class Judged:
    """One snapshot's estimate, the candidate planned for it, and the situation ``decide``
    judges (computed by ``Controller._judge``; the controller learns it only after deciding)."""

    measurement: Measurement
    refusals: tuple[Refusal, ...]
    screen: Screen
    smoothed: Smoothed
    candidate: Candidate
    sparse: bool  # plan-less or measurement-plan samples
    quiet: bool  # our last publication is still settling
    measuring: bool  # the plan in force is the measurement plan
    settling: np.ndarray  # servers whose traffic moved by a step within a window
    # by ``Controller._situation``:
    candidate_eval: Evaluation | None = None
    current: Evaluation | None = None
    situation: decisions.Situation | None = None
    app: Any = None  # ``apploop.AppJudgement``: the application part's own judgement
    app_problems: tuple[str, ...] = ()

    def status_fields(self, decision: decisions.Decision) -> dict[str, Any]:
        """What the cycle's status says of this judgement and ``decision`` (``CycleStatus``
        fields; the controller adds its own: result, reading, publication, timings)."""
        candidate, measurement, situation = self.candidate, self.measurement, self.situation
        worst = self.current if self.current is not None else self.candidate_eval
        assert worst is not None and situation is not None  # (``_situation`` judged them)
        return dict(
            reasons=decision.reasons,
            gain=decision.gain if self.current is not None else None,
            gain_streak=decision.gain_streak,
            predicted_max_use=float(worst.use.max()) if worst.use.size else 0.0,
            over_limit=decision.overloaded,
            unrelievable=decision.unrelievable + candidate.saturated,
            unmeasured=len(candidate.unmeasured),
            rising=candidate.rising,
            settling=situation.settling,
            quiet=situation.quiet,
            counter_servers=int(measurement.from_counters.sum()),
            refused=tuple(
                {"server": r.server, "reason": r.reason, "pps": r.pps, "bound_pps": r.bound_pps}
                for r in self.refusals
            ),
            problems=tuple(f"estimate refused: {r.describe()}" for r in self.refusals)
            + self.app_problems,
            disagreements=tuple(
                {
                    "server": d.server,
                    "counters_pps": d.counters_pps,
                    "sampled_pps": d.sampled_pps,
                    "ci95": list(d.ci95),
                }
                for d in measurement.disagreements
            ),
        )


def mark() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def lap(timings: dict[str, float], step: str, started: tuple[float, float]) -> None:
    """The step's wall-clock seconds, and its CPU seconds as ``<step>_cpu`` (on a shared
    machine the wall clock also counts waiting for a core)."""
    timings[step] = round(time.perf_counter() - started[0], 6)
    timings[f"{step}_cpu"] = round(time.process_time() - started[1], 6)
