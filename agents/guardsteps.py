"""The agent's guard between cycles (a part of ``runner.Agent``): tick the guard every
``guard_interval_s`` while waiting for the next cycle, take the host to the guard's rung at
once when it steps, and keep the plan's desired state on that rung in every cycle."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, overload

from cosample.agents.config import AgentConfig
from cosample.agents.desired import at_rung
from cosample.agents.guarding import HostGuard
from cosample.agents.hoststate import DesiredState
from cosample.agents.report import CycleReport, Metrics
from cosample.plan.document import Plan

log = logging.getLogger("cosample.agents")


class GuardSteps:
    """Mixed into ``runner.Agent``: uses its ``guard``, ``config``, ``metrics``, ``clock``,
    ``last_report`` and its ``_desired``, ``_converge`` and ``_report``."""

    # what ``Agent.__init__`` sets, and its methods (declared for the type checker only)
    guard: HostGuard | None
    config: AgentConfig
    metrics: Metrics
    clock: Callable[[], datetime]
    last_report: CycleReport | None
    _vm_ports: tuple[str, ...]
    _desired: Callable[[Plan | None, list[str], list[str]], DesiredState | None]
    _converge: Callable[[DesiredState, list[str], list[str]], Any]  # -> runner's ``_Outcome``
    _report: Callable[..., CycleReport]

    def guard_tick(self) -> CycleReport | None:
        """One reading of the guard; when it steps, the host goes to the new rung at once (only
        what changes: the sFlow row, the mirror filters) and the status says so."""
        guard = self.guard
        if guard is None:
            return None
        stepped = guard.tick()
        plan = guard.plan
        if not stepped or plan is None or self.last_report is None:
            self.metrics.record_guard(guard.status().as_dict())
            return None
        errors: list[str] = []
        kinds: list[str] = []
        desired = self._guarded(plan, self._desired(plan, errors, kinds))
        if desired is None:
            return None
        outcome = self._converge(desired, errors, kinds)
        rung = guard.status()
        last = self.last_report
        return self._report(
            desired,
            outcome,
            errors,
            kinds,
            f"guard: rung {rung.rung} of {rung.rungs - 1} of plan version {plan.version}",
            plan,
            None,
            self.clock(),
            pending_version=last.pending_version,
        )

    def _between_cycles(self, stop: threading.Event, seconds: float) -> None:
        """Wait ``seconds`` (or until ``stop``), ticking the guard every ``guard_interval_s``."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.guard is None or self.guard.mode == "off":
                stop.wait(left)
                continue
            stop.wait(min(left, self.config.guard_interval_s))
            try:
                self.guard_tick()
            except Exception:
                log.exception("guard tick failed")
                self.metrics.errors.labels(kind="internal").inc()

    @overload
    def _guarded(self, plan: Plan | None, desired: DesiredState) -> DesiredState: ...
    @overload
    def _guarded(self, plan: Plan | None, desired: DesiredState | None) -> DesiredState | None: ...
    def _guarded(self, plan: Plan | None, desired: DesiredState | None) -> DesiredState | None:
        """``desired`` on the guard's rung when ``plan`` is the plan the guard follows (a new
        plan starts on its rung 0: the deviation ends with the plan it belonged to)."""
        guard = self.guard
        if desired is not None and desired.vm_ports is not None:
            self._vm_ports = desired.vm_ports
        if desired is None or plan is None or guard is None or guard.plan is None:
            return desired
        if guard.plan.digest != plan.digest:
            return desired
        return at_rung(desired, guard.rung())
