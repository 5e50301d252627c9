"""The application part of the controller's cycle: services' request rates in, the plan's
application part judged and, when it is worth it, published (docs/controller.md, "Application
monitoring").

Each cycle (``Applications``, the loop's only state for it):

1. **read** the analysers (``appsource``) and turn their windows into request rates per
   inventory service, renormalised by the running plan's share (``appmeasure``);
2. **vet and smooth** them with the collector path's own rules: ``plausibility.vet`` (a service
   cannot carry more requests than its server can forward packets for, with the same slack;
   a jump waits for a second window) and ``smoothing.update`` (EWMA with ``tau``, rises at
   once, steps of ``change``, falls held for ``hold``), the services standing where servers
   stand; windows read while the controller is quiet after a publication (the analysis may be
   moving between hosts, two analysers each seeing part of a window) neither make steps nor
   enter the hold;
3. **describe** the services to the planner with their held rates (``services``; a service
   never measured keeps the inventory's ``request_rate``, or the planner's default);
4. **judge** both plans' application parts under the present rates: their CPU is added to the
   sFlow part's predicted load per host, so ``decide``'s overload rule (and its hysteresis:
   margin, relief) covers the whole plan; and **decide** what only the application part can
   gain (``app_decision``, pure): more weighted requests monitored, or as many with fewer
   mirrored bytes (the analysis coming back on-site), by more than ``min_gain`` for
   ``confirm_cycles`` cycles, warm, not while a server or service settles, not while quiet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from cosample.controller import appmeasure
from cosample.controller.appsource import AnalyserReader, AppReading
from cosample.controller.decide import Decision, Policy
from cosample.controller.evaluate import Evaluation
from cosample.controller.plausibility import Refusal, Screen, vet
from cosample.controller.smoothing import Smoothed, update
from cosample.plan.appmon import SHARE_BITS, selected_share
from cosample.planner.appmon import DEFAULT_COSTS, NONE, ONSITE, Services, loads
from cosample.planner.appmon_plan import plan_appmon
from cosample.planner.realise import realise


@dataclass(frozen=True)
class AppJudgement:
    """Both plans' application parts under the held rates (what the gain compares)."""

    value: tuple[float, float]  # weighted monitored requests/s: (running, candidate)
    fabric: tuple[float, float]  # mirrored bytes/s: (running, candidate)
    same: bool  # same mechanisms, hosts and applied shares


def app_decision(
    judgement: AppJudgement, streak: int, policy: Policy, *, warm: bool, settling: bool, quiet: bool
) -> tuple[str | None, int]:
    """A reason to publish for the application part alone, and the new streak (pure)."""
    (value_now, value_new), (bytes_now, bytes_new) = judgement.value, judgement.fabric
    more = value_new > value_now * (1 + policy.min_gain) if value_now > 0 else value_new > 0
    lighter = (
        value_new >= value_now * (1 - 1e-9)
        and bytes_now > 0
        and bytes_new < bytes_now * (1 - policy.min_gain)
    )
    holds = (more or lighter) and warm and not judgement.same
    streak = streak + 1 if holds else 0
    if streak < policy.confirm_cycles or settling or quiet:
        return None, streak
    if more:
        gain = value_new / value_now - 1 if value_now > 0 else float("inf")
        return (
            f"application gain: the candidate monitors {gain:+.1%} weighted requests "
            f"({value_now:.4g} -> {value_new:.4g}/s, {streak} cycles in a row)"
        ), 0
    return (
        f"application fabric: the candidate monitors as many requests with "
        f"{bytes_new / bytes_now - 1:+.1%} mirrored bytes ({bytes_now:.4g} -> "
        f"{bytes_new:.4g} B/s, {streak} cycles in a row)"
    ), 0


class Applications:
    """The application part's state across cycles and its steps (see the module's docstring)."""

    def __init__(
        self,
        inventory: Any,
        analysers: tuple[str, ...],
        keys: tuple[str, ...] = (),
        reader: Any = None,
    ) -> None:
        self.inventory = inventory
        self.services = tuple(inventory.services)
        self.names = appmeasure.names(self.services)
        self.analysers = analysers
        self.reader = reader or AnalyserReader(keys)
        self.bound = appmeasure.request_capacity(
            self.services, inventory.index, inventory.capacity_pps
        )
        self.costs = {**DEFAULT_COSTS, **inventory.appmon_cost}
        self.smoothed: Smoothed | None = None
        self.screen: Screen | None = None
        self.streak = 0
        self.last: dict[str, Any] = {}

    @property
    def active(self) -> bool:
        return bool(self.services)

    def observe(
        self, now: datetime, current_plan: dict | None, settings: Any, *, warm: bool, quiet: bool
    ) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        """Read, vet and smooth; the services to plan for (held rates) and the problems."""
        reading: AppReading = self.reader(
            self.analysers, now, settings.snapshot_max_age_s, settings.timeout_s
        )
        problems = list(reading.problems)
        _, _, share = appmeasure.plan_entries(current_plan, self.services)
        measurement, unknown, intervals = appmeasure.measure(reading.snapshots, self.names, share)
        successes = appmeasure.success_rates(reading.snapshots, self.names, share)
        refused: tuple[Refusal, ...] = ()
        if measurement is not None:
            vetted = vet(
                measurement,
                self.screen,
                self.names,
                self.bound,
                settings.implausible_slack,
                settings.jump_factor,
                settings.jump_of_capacity,
            )
            refused = vetted.refusals
            problems += [f"service rate refused: {r.describe()} (requests/s)" for r in refused]
            self.screen = vetted.screen
            self.smoothed = update(
                self.smoothed,
                vetted.measurement,
                settings.tau_s,
                settings.rise_tau_s,
                hold_s=settings.hold_seconds,
                change=settings.change,
                capacity=self.bound,
                detect=warm and not quiet,
                remember=not quiet,
            )
        self.last = {
            "analysers_up": reading.analysers_up,
            "analysers": reading.analysers,
            # this cycle's renormalised rates (before vetting and smoothing), each
            # with its connection-level 95 % interval (None: unknown)
            "rates_measured": [
                {
                    "service": name,
                    "share": round(float(share[j]), 6),
                    "requests_per_s": round(float(measurement.own_pps[j]), 3),
                    "requests_per_s_ci95": _rounded_all(intervals.get(name), 3),
                    # the window's success rate over all connections, with its 95 %
                    # connection-level interval (None: no final response, or unknown)
                    "success_rate": _rounded(successes.get(name, (None, None))[0]),
                    "success_rate_ci95": _rounded_all(successes.get(name, (None, None))[1], 6),
                }
                for j, name in enumerate(self.names)
                if measurement is not None and measurement.measured[j]
            ],
            "unlisted_services": list(unknown)[:20],
            "refused": [
                {
                    "service": r.server,
                    "reason": r.reason,
                    "requests_per_s": r.pps,
                    "bound": r.bound_pps,
                }
                for r in refused
            ],
        }
        return self.described(), tuple(problems)

    def described(self) -> tuple[Any, ...]:
        """The inventory's services with their held rates where measured."""
        if self.smoothed is None:
            return self.services
        held, seen = self.smoothed.held(), self.smoothed.seen
        return tuple(
            s.model_copy(update={"request_rate": float(held[j])}) if seen[j] else s
            for j, s in enumerate(self.services)
        )

    def settling(self) -> tuple[str, ...]:
        if self.smoothed is None:
            return ()
        return tuple(self.names[j] for j in np.flatnonzero(self.smoothed.settling()))

    # judging ---------------------------------------------------------------------------------
    def parts(
        self, candidate: Any, current_plan: dict | None
    ) -> tuple[Services, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """The services' arrays and both plans' (to, applied share)."""
        problem = candidate.solution.problem
        if problem.appmon is not None:
            plan, svc = problem.appmon
        else:
            plan, svc = plan_appmon(problem, realise(candidate.solution))
        applied = np.array(
            [
                selected_share(float(s)) / (1 << SHARE_BITS) if t != NONE else 0.0
                for t, s in zip(plan.to, plan.share)
            ]
        )
        listed, hosts, share = appmeasure.plan_entries(current_plan, self.services)
        index = self.inventory.index
        to = np.array(
            [
                NONE if not listed[j] else ONSITE if not hosts[j] else index.get(hosts[j], NONE)
                for j in range(len(self.services))
            ],
            dtype=np.int64,
        )
        return svc, (to, np.where(to != NONE, share, 0.0)), (plan.to.astype(np.int64), applied)

    def judge(
        self,
        candidate: Any,
        current_plan: dict | None,
        judged: Evaluation,
        current: Evaluation | None,
    ) -> tuple[Evaluation, Evaluation | None, AppJudgement]:
        """Both evaluations with their application CPU added (present rates), and the
        application judgement (held rates)."""
        svc, running, proposed = self.parts(candidate, current_plan)
        present = self.smoothed.totals() if self.smoothed is not None else svc.rate
        present = np.where(self._seen(), present, svc.rate)
        now_svc = replace(svc, rate=present)
        n = self.inventory.size
        capacity = self.inventory.capacity_pps

        def plus(evaluation: Evaluation, part) -> Evaluation:
            extra, _, _ = loads(now_svc, part[0], part[1], self.costs, n)
            load = evaluation.load_pps + extra
            with np.errstate(divide="ignore", invalid="ignore"):
                use = np.where(capacity > 0, load / capacity, np.where(load > 0, np.inf, 0.0))
            return replace(evaluation, load_pps=load, use=use)

        _, bytes_now, value_now = loads(svc, running[0], running[1], self.costs, n)
        _, bytes_new, value_new = loads(svc, proposed[0], proposed[1], self.costs, n)
        same = bool(
            np.array_equal(running[0], proposed[0]) and np.allclose(running[1], proposed[1])
        )
        self.last.update(
            running=self._describe(running),
            candidate=self._describe(proposed),
            rates_present=[round(float(r), 3) for r in present],
            rates_planned=[round(float(r), 3) for r in svc.rate],
        )
        return (
            plus(judged, proposed),
            plus(current, running) if current is not None else None,
            AppJudgement(
                (value_now, value_new), (float(bytes_now.sum()), float(bytes_new.sum())), same
            ),
        )

    def decide(
        self,
        decision: Decision,
        judgement: AppJudgement,
        policy: Policy,
        *,
        current: bool,
        warm: bool,
        settling: bool,
        quiet: bool,
    ) -> Decision:
        """``decision`` with the application part's own reason added, if it has one."""
        if not current or decision.publish:
            self.streak = 0
            return decision
        reason, self.streak = app_decision(
            judgement, self.streak, policy, warm=warm, settling=settling, quiet=quiet
        )
        self.last["streak"] = self.streak
        if reason is None:
            return decision
        return replace(decision, publish=True, reasons=decision.reasons + (reason,), gain_streak=0)

    def status(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        return {"services": list(self.names), "settling": list(self.settling()), **self.last}

    def _seen(self) -> np.ndarray:
        if self.smoothed is None:
            return np.zeros(len(self.services), dtype=bool)
        return self.smoothed.seen

    def _describe(self, part: tuple[np.ndarray, np.ndarray]) -> list[dict[str, Any]]:
        names = self.inventory.names
        return [
            {
                "service": self.names[j],
                "mechanism": "none" if t == NONE else "sniffer" if t == ONSITE else "mirror",
                "to": names[t] if t >= 0 else None,
                "share": round(float(s), 6),
            }
            for j, (t, s) in enumerate(zip(part[0].tolist(), part[1].tolist()))
        ]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _rounded_all(values: list[float] | None, digits: int) -> list[float] | None:
    """An interval's ends rounded (None: no interval, or an empty one)."""
    return [round(v, digits) for v in values] if values else None
