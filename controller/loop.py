"""The controller loop: read, estimate, smooth, re-plan, decide, publish, report.

``Controller.cycle`` is one pass and never raises for bad input: a collector that is down,
stale or inconsistent with the inventory leaves the plan in force untouched and says so
(``status.json``, metrics). ``Controller.run`` repeats it every ``interval_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cosample.controller import decide as decisions
from cosample.controller.apploop import Applications
from cosample.controller.bootstrap import is_measurement_plan, measurement_plan
from cosample.controller.errors import ControllerError, SnapshotError
from cosample.controller.estimate import Measurement, measure
from cosample.controller.evaluate import Evaluation, PlanShares, evaluate, shares
from cosample.controller.guarded import Derater
from cosample.controller.hostnames import HostNames
from cosample.controller.inventory import Inventory
from cosample.controller.plausibility import Screen, vet
from cosample.controller.publish import oversized, render, serialised_hosts, signed
from cosample.controller.replan import replan
from cosample.controller.report import CycleStatus, Metrics, operator_problems, write_reports
from cosample.controller.settings import Settings
from cosample.controller.smoothing import Smoothed, update
from cosample.controller.source import Reading, SnapshotReader
from cosample.controller.steps import Judged, lap, mark
from cosample.controller.store import Store, next_version
from cosample.errors import CosampleError
from cosample.files import FileWriteError
from cosample.gcpause import gc_paused
from cosample.statelog import StateLog
from cosample.times import format_time, utcnow

log = logging.getLogger("cosample.controller")


class Controller:
    """One controller. ``target`` has ``publish(rendered)`` (and may have ``restore``);
    ``reader`` has ``read_collectors``' signature (default: a ``SnapshotReader``)."""

    def __init__(
        self,
        inventory: Inventory,
        settings: Settings,
        target: Any,
        state_dir: str | Path,
        *,
        clock: Callable[[], datetime] = utcnow,
        reader: Callable[..., Reading] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.inventory, self.settings, self.target = inventory, settings, target
        self.store = Store(Path(state_dir))
        self.clock = clock
        #: default: the collectors' snapshots, verified with ``collector_keys``
        self.reader = reader or SnapshotReader(settings.collector_keys)
        self.metrics = metrics or Metrics()
        self.smoothed: Smoothed | None = None
        self.screen: Screen | None = None  # the plausibility checks' memory
        #: the last cycle's measurement (read by the testbed's timeline)
        self.measurement: Measurement | None = None
        self.quiet_until: datetime | None = None  # after a publication (``quiet_s``)
        self.full_window_s = 0.0  # the longest collector window seen (shorter ones: start-up)
        self.gain_streak = 0
        #: first of the cycles in a row with no plan in force and no snapshot knowing a server
        self.waiting_since: datetime | None = None
        self.size_problem: str | None = None  # the last published plan is above agents' limit
        #: planning capacities of hosts whose guard backs off (``guarded``)
        self.derater = Derater(inventory, settings.guard_hold_s)
        self.planning: Inventory = inventory  # the inventory with them, this cycle
        self.last_status: CycleStatus | None = None
        #: the problems last logged (``cosample.statelog``): each once, when it appears
        self.problem_log = StateLog(log)
        #: the application part (services' request rates from the analysers), if any
        self.apps = (
            Applications(inventory, settings.analysers, settings.analyser_keys)
            if inventory.services
            else None
        )
        with gc_paused():  # as a cycle: reading back a 10^6-host plan makes 10^7 objects
            data, plans = self.store.published_plans() or (b"", ())
            self.current_shares: PlanShares | None = (
                shares(plans[-1], inventory.index) if plans else None
            )
            # each plan's parsed table (gigabytes at 10^6 hosts) kept as its bytes instead
            plans = tuple(serialised_hosts(plan) for plan in plans)
            self.current: dict[str, Any] | None = plans[-1] if plans else None
            if self.current is not None:
                self.metrics.plan_version.set(self.store.last_version() or -1)
                self._restore(data, plans)

    def _restore(self, data: bytes, plans: tuple[dict[str, Any], ...]) -> None:
        """A target that serves from memory (``--serve``) serves the last publication again at
        once after a restart (``data``, its ``plans`` as read back), signed anew with the key,
        instead of 404 until the next one."""
        restore = getattr(self.target, "restore", None)
        if restore is None:
            return
        key, current = self.settings.key, self.current
        assert current is not None  # (the plan in force, read back)
        restore(
            signed(
                data,
                key,
                (self.store.last_version() or int(current["version"]),),
                current,
                plans,
            )
        )
        log.info("serving the last publication again (version %s)", current["version"])

    # one pass -----------------------------------------------------------------------------------
    def cycle(self) -> CycleStatus:
        started = time.perf_counter()
        now = self.clock()
        try:
            with gc_paused():
                status = self._cycle(now)
        except CosampleError as exc:  # inconsistent input, a failed write: nothing published
            self.metrics.errors.labels(kind=type(exc).__name__).inc()
            status = self._base(now, "error", problems=(str(exc),))
        status = replace(status, cycle_seconds=round(time.perf_counter() - started, 6))
        self.problem_log.update(operator_problems(status))  # once each, as they come and go
        self.last_status = status
        self.metrics.record(status, now.timestamp())
        write_reports(self.store.directory, status, self.metrics)
        return status

    def run(self, stop: threading.Event, max_cycles: int | None = None) -> None:
        """Cycle every ``interval_s`` until ``stop`` is set; never dies on a failed pass."""
        done = 0
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.cycle()
            except Exception:
                log.exception("controller cycle failed")
                self.metrics.errors.labels(kind="internal").inc()
            done += 1
            if max_cycles is not None and done >= max_cycles:
                break
            stop.wait(max(0.0, self.settings.interval_s - (time.monotonic() - began)))

    # pieces: the effects around the pure rules of ``decide`` -----------------------------------
    def _cycle(self, now: datetime) -> CycleStatus:
        timings: dict[str, float] = {}
        reading = self._read(now, timings)
        if reading.snapshot is None:
            if self.current is None:
                self.waiting_since = self.waiting_since or now
                return self._without_plan(now, reading)
            return self._base(
                now,
                "stale",
                reading=reading,
                reasons=("no fresh snapshot: keeping the plan in force",),
            )
        self.waiting_since = None
        judged = self._judge(now, reading.snapshot, timings)
        step = mark()
        judged = self._situation(now, judged)
        situation = judged.situation
        assert situation is not None  # (``_situation`` judged it)
        decision = decisions.decide(situation, self.settings.policy)
        if judged.app is not None:
            assert self.apps is not None  # (only the application part judges applications)
            decision = self.apps.decide(
                decision,
                judged.app,
                self.settings.policy,
                current=judged.current is not None,
                warm=situation.warm,
                settling=bool(situation.settling),
                quiet=judged.quiet,
            )
        lap(timings, "decide", step)
        self.smoothed = judged.smoothed  # only a cycle that got this far learns from its snapshot
        self.screen = judged.screen
        self.measurement = judged.measurement
        self.gain_streak = decision.gain_streak
        published: tuple[int, ...] = ()
        two_phase = False
        if decision.publish:
            published, two_phase = self._publish_candidate(judged, now, timings)
        return self._status(now, reading, judged, decision, published, two_phase, timings)

    def _read(self, now: datetime, timings: dict[str, float]) -> Reading:
        """The collectors' merged snapshot; one that knows no server counts as none."""
        step = mark()
        reading = self.reader(
            self.settings.collectors, now, self.settings.snapshot_max_age_s, self.settings.timeout_s
        )
        lap(timings, "read", step)
        if reading.snapshot is not None and not decisions.knows_servers(reading.snapshot):
            reading = replace(
                reading,
                snapshot=None,
                problems=reading.problems
                + (
                    "the collectors know no server yet (no plan and no agent addresses, or no "
                    "sFlow arriving)",
                ),
            )
        return reading

    def _judge(self, now: datetime, snapshot: Any, timings: dict[str, float]) -> Judged:
        """Estimate, vet and smooth the snapshot, re-plan. Computations: but for the longest
        window seen, the controller learns them only once the cycle has decided (``_cycle``)."""
        step = mark()
        settings, inv = self.settings, self.inventory
        measurement = measure(snapshot, inv, source="+".join(settings.collectors))
        vetted = vet(
            measurement,
            self.screen,
            inv.names,
            inv.capacity_pps,
            settings.implausible_slack,
            settings.jump_factor,
            settings.jump_of_capacity,
        )
        measurement = vetted.measurement  # its refusals are logged as the cycle's problems
        measuring = is_measurement_plan(self.current)  # decided as if no plan were in force
        sparse = snapshot.plan is None or measuring
        quiet = self.quiet_until is not None and now < self.quiet_until
        self.full_window_s = max(self.full_window_s, measurement.window_s)
        before = self.smoothed
        full = decisions.full_window(
            measurement.window_s, before.window_s if before is not None else 0.0, self.full_window_s
        )
        smoothed = update(
            before,
            measurement,
            settings.tau_s,
            settings.rise_tau_s,
            hold_s=settings.hold_seconds,
            change=settings.change,
            capacity=inv.capacity_pps,
            detect=before is not None
            and decisions.is_warm(before.count, settings.interval_s, settings.warm_s),
            remember=decisions.remembers(quiet, full, sparse),
        )
        rising, settling = smoothed.rising(), smoothed.settling()
        services, app_problems = (
            self.apps.observe(
                now,
                self.current,
                settings,
                quiet=quiet,
                warm=before is not None
                and decisions.is_warm(before.count, settings.interval_s, settings.warm_s),
            )
            if self.apps
            else (None, ())
        )
        lap(timings, "estimate", step)
        step = mark()
        inv = self.planning = self.derater.plan(
            now, snapshot, smoothed, self.current, self.current_shares
        )
        candidate = replan(
            inv,
            smoothed.planning(),
            settings.plan_margin,
            settings.solver,
            settings.measure_sampling,
            rising,
            services,
        )
        lap(timings, "plan", step)
        return Judged(
            measurement,
            vetted.refusals,
            vetted.screen,
            smoothed,
            candidate,
            sparse,
            quiet,
            measuring,
            settling,
            app_problems=app_problems,
        )

    def _situation(self, now: datetime, judged: Judged) -> Judged:
        """``judged`` with the candidate and the plan in force evaluated: ``decide``'s input."""
        settings, inv = self.settings, self.planning
        smoothed, candidate, measuring = judged.smoothed, judged.candidate, judged.measuring
        # overload is judged under the present traffic, the gain under the held peaks the
        # candidate was planned for (a trough of noise shorter than the hold is no gain)
        own, forwarding = smoothed.loads()
        candidate_eval = evaluate(
            candidate.shares, own, forwarding, inv.capacity_pps, inv.alpha, inv.beta
        )
        current_eval: Evaluation | None = None
        gain_basis: tuple[float, float] | None = None
        if self.current_shares is not None and not measuring:
            current_eval = evaluate(
                self.current_shares, own, forwarding, inv.capacity_pps, inv.alpha, inv.beta
            )
            current_pps, candidate_pps = (
                evaluate(
                    plan_shares,
                    candidate.own_pps,
                    candidate.forwarding_pps,
                    inv.capacity_pps,
                    inv.alpha,
                    inv.beta,
                ).distinct_pps
                for plan_shares in (self.current_shares, candidate.shares)
            )
            gain_basis = (current_pps, candidate_pps)
        app = None  # the application part's CPU joins both plans' loads (``apploop``)
        if self.apps is not None:
            candidate_eval, current_eval, app = self.apps.judge(
                candidate, self.current, candidate_eval, current_eval
            )
        situation = decisions.Situation(
            now=now,
            interval_s=settings.interval_s,
            names=inv.names,
            capacity_pps=inv.capacity_pps,
            candidate=candidate_eval,
            current=current_eval,
            current_expires=None if measuring else _expires(self.current),
            same_content=self.current_shares is not None
            and self.current_shares.same_as(candidate.shares)
            and (app is None or app.same),
            gain_streak=self.gain_streak,
            warm=decisions.is_warm(smoothed.count, settings.interval_s, settings.warm_s),
            settling=HostNames.where(inv.names, judged.settling)
            + (self.apps.settling() if self.apps else ()),
            quiet=judged.quiet,
            gain_basis=gain_basis,
            averaged=smoothed.count,
            warm_s=settings.warm_s,
        )
        return replace(
            judged,
            candidate_eval=candidate_eval,
            current=current_eval,
            situation=situation,
            app=app,
        )

    def _publish_candidate(
        self, judged: Judged, now: datetime, timings: dict[str, float]
    ) -> tuple[tuple[int, ...], bool]:
        """Build the candidate's document, publish it, record its report, start the quiet."""
        candidate, settings = judged.candidate, self.settings
        step = mark()
        document = candidate.document(now, timedelta(seconds=settings.valid_for_s))
        lap(timings, "document", step)
        step = mark()
        published, two_phase = self._publish(document, candidate.shares, now)
        self._record_report(candidate)
        lap(timings, "publish", step)
        self.quiet_until = now + timedelta(
            seconds=decisions.quiet_s(
                settings, two_phase, judged.measurement.window_s, judged.sparse
            )
        )
        return published, two_phase

    def _status(
        self,
        now: datetime,
        reading: Reading,
        judged: Judged,
        decision: decisions.Decision,
        published: tuple[int, ...],
        two_phase: bool,
        timings: dict[str, float],
    ) -> CycleStatus:
        return self._base(
            now,
            "published" if published else "kept",
            reading=reading,
            published=published,
            two_phase=two_phase,
            applications=self.apps.status() if self.apps else None,
            timings=timings,
            derated=self.derater.status(),
            **judged.status_fields(decision),
        )

    def _without_plan(self, now: datetime, reading: Reading) -> CycleStatus:
        """No plan in force and no snapshot that knows a server: wait ``measure_after_s`` for
        the agents' safe-state sampling to show in a plan-less snapshot, then fall back to the
        measurement plan (``measurement_due``)."""
        settings, sampling, since = (
            self.settings,
            self.settings.measure_sampling,
            self.waiting_since,
        )
        assert since is not None  # (``_cycle`` set it)
        waited = (now - since).total_seconds()
        if sampling is not None and decisions.measurement_due(
            waited, settings.measure_after_s, sampling
        ):
            plan = measurement_plan(
                self.inventory,
                sampling,
                now,
                timedelta(seconds=settings.valid_for_s),
            )
            published, _ = self._publish(plan, shares(plan, self.inventory.index), now)
            return self._base(
                now,
                "published",
                reading=reading,
                published=published,
                reasons=(
                    f"bootstrap: no plan in force and no snapshot knew a "
                    f"server for {waited:.0f} s; published the measurement "
                    f"plan (local 1-in-{settings.measure_sampling}, no "
                    "mirrors)",
                ),
            )
        fallback = (
            f"; measurement plan after {settings.measure_after_s:g} s"
            if settings.measure_sampling
            else ""
        )
        return self._base(
            now,
            "stale",
            reading=reading,
            reasons=(
                f"no plan in force: waiting {waited:.0f} s for a snapshot that knows the servers "
                f"(agents sample in their safe state){fallback}",
            ),
        )

    def _publish(
        self, plan: dict[str, Any], plan_shares: PlanShares, now: datetime
    ) -> tuple[tuple[int, ...], bool]:
        version = next_version(self.store.last_version(), now)
        previous = (
            self.current
            if decisions.two_phases(
                self.current_shares,
                _expires(self.current),
                is_measurement_plan(self.current),
                plan_shares,
                now,
            )
            else None
        )
        rendered = render(
            plan,
            version,
            self.settings.key,
            previous,
            now,
            self.settings.settle_s,
            self.settings.lead_s,
        )
        written = self.target.publish(rendered)  # a file path, if the target wrote one
        self.store.record(
            rendered.versions[-1],
            rendered.final["plan_id"],
            rendered.data,
            now,
            written if isinstance(written, Path) else None,
        )
        self.current = rendered.final
        self.current_shares = plan_shares  # the final plan's hosts are the candidate's
        log.info("published version(s) %s", rendered.versions)
        self.size_problem = oversized(rendered)
        if self.size_problem:
            log.warning("%s", self.size_problem)
        return rendered.versions, previous is not None

    def _record_report(self, candidate: Any) -> None:
        """The published plan's per-host report, beside the state. It is for operators: a
        report that cannot be written is logged and counted, the publication stands."""
        try:
            self.store.record_report(candidate.report(self.current))
        except FileWriteError as exc:
            log.warning("plan report not written: %s", exc)
            self.metrics.errors.labels(kind="report").inc()

    def _base(
        self, now: datetime, result: str, reading: Reading | None = None, **fields: Any
    ) -> CycleStatus:
        plan = self.current
        snapshot = reading.snapshot if reading is not None else None
        expires = _expires(plan)
        if expires is not None:
            self.metrics.plan_expires.set(expires.timestamp())
        return CycleStatus(
            time=format_time(now),
            result=result,
            plan_version=int(plan["version"]) if plan else None,
            plan_id=plan.get("plan_id") if plan else None,
            plan_expires=plan.get("expires") if plan else None,
            plan_kind=("measurement" if is_measurement_plan(plan) else "planned") if plan else None,
            snapshot_time=format_time(snapshot.time) if snapshot is not None else None,
            snapshot_age_s=round((now - snapshot.time).total_seconds(), 3)
            if snapshot is not None
            else None,
            collectors_up=reading.collectors_up if reading else 0,
            collectors=reading.collectors if reading else len(self.settings.collectors),
            problems=tuple(fields.pop("problems", ()))
            + (reading.problems if reading else ())
            + ((self.size_problem,) if self.size_problem else ()),
            **{key: value for key, value in fields.items() if key != "published"},
            published_versions=fields.get("published", ()),
        )


def _expires(plan: dict[str, Any] | None) -> datetime | None:
    if not plan or not isinstance(plan.get("expires"), str):
        return None
    try:
        return datetime.fromisoformat(plan["expires"].replace("Z", "+00:00"))
    except ValueError:
        raise ControllerError(
            f"plan in force: expires: not a UTC time: {plan['expires']!r}"
        ) from None


__all__ = ["Controller", "Settings", "SnapshotError"]
