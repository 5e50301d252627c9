"""The agent loop: fetch, validate, select, compute the difference, apply, verify, report.

The plans come from this host's slice beside the plan when the location serves one
(``slices``, ``cosample.plan.slices``), else from the whole plan (``planreader.PlanReader``);
either way they are the same ``Plan`` objects, and everything after the fetch is one code path.

``Agent.cycle`` is one pass; ``Agent.run`` repeats it every ``interval_s`` plus a random jitter
of up to ``jitter_s`` (so a fleet does not hit the plan server in step). "Last good" means
*applied and verified*: a new plan is recorded (``last-good-plan.json``) only once its commands
ran and a fresh observation shows the host converged. If a new plan fails on the host, the agent
converges back to the last good plan (or the safe state), remembers the failure so it does not
retry the same content every cycle, and reports ``rejected``. Any other failure in a pass is
recorded (status file, error metric) and the next pass starts from a fresh observation, so a
pass killed at any point, or an OVS restart, is repaired by the next one.

Results: ``ok``; ``degraded`` (converged, problems left alone); ``rejected`` (a plan was
refused, the host is converged on the last good one); ``diverged``; ``error``; ``dry-run``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from cosample.agents.analyser_procs import Supervisor, wanted_for
from cosample.agents.config import AgentConfig
from cosample.agents.desired import DEFAULT_BRIDGE, desired_state, safe_state
from cosample.agents.guarding import HostGuard
from cosample.agents.guardsteps import GuardSteps
from cosample.agents.host import Host, LinuxOvsHost
from cosample.agents.hoststate import DesiredState
from cosample.agents.ledger import private_dir, remove_stale_temporaries
from cosample.agents.mtu import mirror_mtu_warnings
from cosample.agents.planreader import PlanReader, unsigned_warning
from cosample.agents.reconcile import find_problems, kernel_mirror_links, reconcile
from cosample.agents.report import CycleReport, Metrics, summarise, write_reports
from cosample.errors import CosampleError
from cosample.files import write_bytes_atomic
from cosample.plan.document import Plan, parse_plan
from cosample.plan.errors import PlanError
from cosample.plan.selection import select_plan
from cosample.plan.source import fetch
from cosample.statelog import StateLog
from cosample.times import format_time, utcnow

LAST_GOOD_FILE = "last-good-plan.json"
#: Error kinds that mean "an input was refused" (result ``rejected`` when the host converged).
REJECTIONS = ("plan", "signature")
log = logging.getLogger("cosample.agents")


class Agent(GuardSteps):
    """One host's agent. ``host`` is a ``LinuxOvsHost`` (default) or a ``FakeHost``."""

    def __init__(
        self,
        config: AgentConfig,
        host: Host | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        fetcher: Callable = fetch,
        metrics: Metrics | None = None,
        on_command: Callable[[str], None] | None = None,
        supervisor: Supervisor | None = None,
        guard: HostGuard | None = None,
    ) -> None:
        if host is None:
            host = LinuxOvsHost(config)
            if supervisor is None and config.run_analysers:  # effects come with the real host
                supervisor = Supervisor.from_config(config)
            if guard is None and config.guard != "off":
                guard = HostGuard(config, vm_ports=lambda: self._vm_ports)
        #: steps the host along its plan's ladder between cycles (None: no guard)
        self.guard = guard
        self._vm_ports: tuple[str, ...] = ()
        self.last_report: CycleReport | None = None
        #: runs the analysers the plan asks of this host (None: an operator does)
        self.supervisor = supervisor
        self.config = config
        self.host = host
        self.clock = clock
        self.metrics = metrics or Metrics()
        #: where the plans come from: the slice or the whole plan, verified (``planreader``)
        self.reader = PlanReader(config, fetcher, self.metrics)
        self.on_command = on_command  # told of each command right after it was applied
        self.state_dir = Path(config.state_dir)
        self._clean_state_dir()
        self.running: Plan | None = self._load_last_good()
        #: Plans (by content digest) that failed on this host, and why; not retried.
        self.failed: dict[str, str] = {}
        self.problem_log = StateLog(log)  # errors, problems and the safe state: logged once

    # one pass -----------------------------------------------------------------------------------
    def cycle(self, dry_run: bool = False) -> CycleReport:
        """Fetch and select a plan, then converge the host to it (or only report, ``dry_run``)."""
        now = self.clock()
        errors: list[str] = []
        kinds: list[str] = []
        candidates = self.reader.candidates(errors, kinds)
        selection = select_plan(candidates, self.running, now, self.failed)
        errors += selection.refused
        kinds += ["plan"] * len(selection.refused)
        plan, reason = selection.plan, selection.reason
        desired = self._desired(plan, errors, kinds)
        if plan is not None and desired is None:
            plan, reason = None, f"safe state: {errors[-1]}"
        desired = self._guarded(plan, desired)
        fallback = self._fallback()
        if plan is None:
            desired = fallback
        assert desired is not None  # (a plan without its desired state was dropped above)
        if dry_run:
            return self._report(
                desired,
                self._dry_run(desired, errors, kinds),
                errors,
                kinds,
                reason,
                plan,
                selection.pending,
                now,
                dry_run=True,
            )
        new = plan is not None and (self.running is None or plan.digest != self.running.digest)
        if not new:
            outcome = self._converge(desired, errors, kinds)
        else:
            assert plan is not None  # (``new``)
            outcome = self._try(plan, desired, fallback, errors, kinds)
            if outcome.returned:
                plan = self.running if fallback.mode == "plan" else None
                desired = fallback
                reason = (
                    f"keeping plan version {plan.version}"
                    if plan is not None
                    else "safe state: the new plan failed"
                )
        self._supervise(desired, outcome)
        if self.guard is not None:
            self.guard.follow(plan, desired.mode)
        return self._report(desired, outcome, errors, kinds, reason, plan, selection.pending, now)

    def remove(self) -> CycleReport:
        """Remove everything the agent owns on this host (sFlow row, tunnels, flows, mirrors)."""
        host_plan = self.running.hosts.get(self.config.host) if self.running else None
        bridge = self.config.bridge or (host_plan.bridge if host_plan else None) or DEFAULT_BRIDGE
        desired = DesiredState(bridge=bridge, sflow=None, vm_ports=(), mode="removed")
        errors: list[str] = []
        kinds: list[str] = []
        outcome = self._converge(desired, errors, kinds)
        self._supervise(desired, outcome)
        return self._report(
            desired, outcome, errors, kinds, "remove all owned state", None, None, self.clock()
        )

    # loop ---------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, max_cycles: int | None = None) -> None:
        """Cycle until ``stop`` is set (or ``max_cycles`` passes); never dies on a failed pass."""
        done = 0
        while not stop.is_set():
            try:
                self.cycle()
            except Exception:
                log.exception("agent cycle failed")
                self.metrics.errors.labels(kind="internal").inc()
            done += 1
            if max_cycles is not None and done >= max_cycles:
                break
            self._between_cycles(
                stop, self.config.interval_s + random.uniform(0, self.config.jitter_s)
            )
        if stop.is_set():
            self.close()

    def close(self) -> None:
        """Stop the analysers this agent runs (a stopped agent leaves no child behind)."""
        if self.supervisor is not None:
            self.supervisor.stop_all()

    # pieces -------------------------------------------------------------------------------------
    def _try(
        self,
        plan: Plan,
        desired: DesiredState,
        fallback: DesiredState,
        errors: list[str],
        kinds: list[str],
    ) -> "_Outcome":
        """Converge to a new plan and adopt it, or converge back to ``fallback`` if it fails."""
        tried_errors: list[str] = []
        outcome = self._converge(desired, tried_errors, [])
        if not outcome.failed:
            errors += tried_errors
            self._adopt(plan)
            return outcome
        why = outcome.failure or f"{len(outcome.remaining)} change(s) did not hold"
        back = self._converge(fallback, errors, kinds)
        back.commands = outcome.commands + back.commands
        back.returned = True
        to = "the safe state"
        if fallback.mode == "plan":
            assert self.running is not None  # (the fallback to a plan is to the running one)
            to = f"version {self.running.version}"
        if back.failed:  # the host itself is in trouble: try the plan again next cycle
            errors.append(
                f"plan version {plan.version} could not be applied ({why}); "
                f"returning to {to} failed too"
            )
            kinds.append("host")
        else:
            self.failed[plan.digest] = why
            errors.append(
                f"plan version {plan.version} failed on this host and was not "
                f"adopted ({why}); back on {to}"
            )
            kinds.append("plan")
        return back

    def _desired(
        self, plan: Plan | None, errors: list[str], kinds: list[str]
    ) -> DesiredState | None:
        if plan is None:
            return None
        try:
            return desired_state(plan, self.config)
        except PlanError as exc:  # the running plan no longer fits this host's config
            errors.append(f"plan version {plan.version}: {exc}")
            kinds.append("plan")
            return None

    def _fallback(self) -> DesiredState:
        """Where a failed new plan returns to: the last good plan, else the safe state."""
        if self.running is not None and not self.running.expired(self.clock()):
            try:
                return self._guarded(self.running, desired_state(self.running, self.config))
            except PlanError:
                pass
        return safe_state(self.config, self.running)

    def _dry_run(self, desired: DesiredState, errors: list[str], kinds: list[str]) -> "_Outcome":
        outcome = _Outcome()
        try:
            observed = self._observe(desired)
            outcome.commands = [command.describe() for command in reconcile(desired, observed)]
            outcome.problems = find_problems(desired, observed)
            outcome.warnings = mirror_mtu_warnings(
                desired.mirrors, observed.link_mtus, observed.paths
            )
        except CosampleError as exc:
            errors.append(str(exc))
            kinds.append("host")
            outcome.failure = str(exc)
        return outcome

    def _converge(
        self,
        desired: DesiredState,
        errors: list[str],
        kinds: list[str],
        outcome: "_Outcome | None" = None,
    ) -> "_Outcome":
        """Apply the difference, then observe again: converged, or why not."""
        outcome = outcome or _Outcome()
        try:
            for command in reconcile(desired, self._observe(desired)):
                log.info("apply: %s", command.describe())
                self.host.apply(command)
                outcome.commands.append(command.describe())
                if self.on_command is not None:
                    self.on_command(outcome.commands[-1])
            after = self._observe(desired)
            outcome.remaining = [command.describe() for command in reconcile(desired, after)]
            outcome.problems = find_problems(desired, after)
            outcome.warnings = mirror_mtu_warnings(desired.mirrors, after.link_mtus, after.paths)
            if outcome.remaining:
                kinds.append("diverged")
                outcome.diverged = True
        except CosampleError as exc:  # HostError, or a command that failed
            errors.append(str(exc))
            kinds.append("host")
            outcome.failure = str(exc)
        return outcome

    def _supervise(self, desired: DesiredState, outcome: "_Outcome") -> None:
        """Start, stop and restart the analysers ``desired`` asks of this host."""
        if self.supervisor is None:
            return
        done, failed = self.supervisor.step(wanted_for(desired.appmon, self.config))
        outcome.commands += done
        outcome.problems += failed

    def _observe(self, desired: DesiredState):
        remotes = [t.remote_ip for t in desired.mirrors] + [p.remote_ip for p in desired.receivers]
        links = (*(desired.vm_ports or ()), *kernel_mirror_links(desired))
        return self.host.observe(desired.bridge, links, remotes)

    def _report(
        self,
        desired: DesiredState,
        outcome: "_Outcome",
        errors: list[str],
        kinds: list[str],
        reason: str,
        plan: Plan | None,
        pending: Plan | None,
        now: datetime,
        dry_run: bool = False,
        pending_version: int | None = None,
    ) -> CycleReport:
        if outcome.failure or any(kind in ("host", "fetch") for kind in kinds):
            result = "error"  # a dry run too: nothing was read, so nothing can be said
        elif dry_run:
            result = "dry-run"
        elif outcome.diverged:
            result = "diverged"
        elif any(kind in REJECTIONS for kind in kinds):
            result = "rejected"
        elif outcome.problems:
            result = "degraded"
        else:
            result = "ok"
        warning = unsigned_warning(self.config)
        report = CycleReport(
            host=self.config.host,
            time=format_time(now),
            result=result,
            mode=desired.mode,
            reason=reason,
            plan_version=plan.version if plan else None,
            plan_id=plan.plan_id if plan else None,
            plan_expires=format_time(plan.expires) if plan else None,
            pending_version=pending.version if pending else pending_version,
            commands=tuple(outcome.commands),
            remaining=tuple(outcome.remaining),
            problems=tuple(outcome.problems),
            errors=tuple(errors),
            desired=summarise(desired),
            warnings=((warning,) if warning else ()) + tuple(outcome.warnings),
            analysers=tuple(self.supervisor.status()) if self.supervisor is not None else (),
            guard=self.guard.status().as_dict() if self.guard is not None else None,
        )
        # each problem once, when it appears (and when it goes); the status has them every cycle
        self.problem_log.update(
            [*errors, *outcome.problems]
            + ([reason] if desired.mode == "safe" and not dry_run else [])  # "safe state: ..."
        )
        if not dry_run:
            self.metrics.record(report, desired, now.timestamp(), kinds)
            private_dir(self.state_dir)
            write_reports(self.state_dir, report, self.metrics)
            self._clean_state_dir()
            self.last_report = report
        return report

    def _clean_state_dir(self) -> None:
        """Temporary files killed writes left (ledger, last good plan, status), at start and
        after every cycle that wrote (so one left by a kill goes within a minute)."""
        for name in remove_stale_temporaries(self.state_dir, time.time()):
            log.info("removed %s, left in %s by an interrupted write", name, self.state_dir)

    def _adopt(self, plan: Plan) -> None:
        """Make ``plan`` the running one and remember it across restarts (rollback floor)."""
        self.running = plan
        text = json.dumps(plan.raw, sort_keys=True, indent=2) + "\n"
        private_dir(self.state_dir)
        write_bytes_atomic(self.state_dir / LAST_GOOD_FILE, text.encode(), mode=0o600)

    def _load_last_good(self) -> Plan | None:
        path = self.state_dir / LAST_GOOD_FILE
        try:
            return parse_plan(path.read_bytes(), source=str(path))
        except FileNotFoundError:
            return None
        except (OSError, PlanError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            return None


class _Outcome:
    """What one convergence did: commands applied, what remains, problems, failure."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.remaining: list[str] = []
        self.problems: list[str] = []
        #: conditions that leave the state converged but lose data (``agents.mtu``)
        self.warnings: list[str] = []
        self.failure: str | None = None
        self.diverged = False
        self.returned = False  # converged back to the fallback after a new plan failed

    @property
    def failed(self) -> bool:
        return self.failure is not None or self.diverged
