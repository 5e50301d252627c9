"""The agent loop: fetch, validate, select, compute the difference, apply, verify, report.

``Agent.cycle`` is one pass; ``Agent.run`` repeats it every ``interval_s`` plus a random jitter
of up to ``jitter_s`` (so a fleet does not hit the plan server in step). Any failure in a pass
is recorded (status file, error metric) and the next pass starts from a fresh observation, so a
pass killed at any point, or an OVS restart, is repaired by the next one.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from cosample.agents.config import AgentConfig
from cosample.agents.desired import DEFAULT_BRIDGE, desired_state, safe_state
from cosample.agents.errors import AgentError, PlanError, SignatureError
from cosample.agents.plan import Plan, format_time, parse_plan
from cosample.agents.reconcile import find_problems, reconcile
from cosample.agents.report import CycleReport, Metrics, summarise, write_reports
from cosample.agents.selection import select_plan
from cosample.agents.signing import verify
from cosample.files import write_bytes_atomic
from cosample.agents.source import fetch
from cosample.agents.state import DesiredState
from cosample.errors import CosampleError

LAST_GOOD_FILE = "last-good-plan.json"
log = logging.getLogger("cosample.agents")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Agent:
    """One host's agent. ``host`` is a ``LinuxOvsHost`` (default) or a ``FakeHost``."""

    def __init__(self, config: AgentConfig, host=None, *, clock: Callable[[], datetime] = utcnow,
                 fetcher: Callable = fetch, metrics: Metrics | None = None,
                 on_command: Callable[[str], None] | None = None) -> None:
        if host is None:
            from cosample.agents.host import LinuxOvsHost
            host = LinuxOvsHost(config)
        self.config = config
        self.host = host
        self.clock = clock
        self.fetcher = fetcher
        self.metrics = metrics or Metrics()
        self.on_command = on_command  # told of each command right after it was applied
        self.state_dir = Path(config.state_dir)
        self.running: Plan | None = self._load_last_good()

    # one pass -----------------------------------------------------------------------------------
    def cycle(self, dry_run: bool = False) -> CycleReport:
        """Fetch and select a plan, then converge the host to it (or only report, ``dry_run``)."""
        now = self.clock()
        errors: list[str] = []
        kinds: list[str] = []
        candidates = self._candidates(errors, kinds)
        selection = select_plan(candidates, self.running, now)
        errors += selection.refused
        kinds += ["plan"] * len(selection.refused)
        plan, reason = selection.plan, selection.reason
        try:
            desired = desired_state(plan, self.config) if plan is not None else None
        except PlanError as exc:  # the running plan no longer fits this host's config
            errors.append(f"plan version {plan.version}: {exc}")
            kinds.append("plan")
            desired, plan, reason = None, None, f"safe state: {exc}"
        if desired is None:
            desired = safe_state(self.config, self.running)
        return self._converge(desired, dry_run, errors, kinds, reason, plan, selection.pending,
                              now, adopt=plan)

    def remove(self) -> CycleReport:
        """Remove everything the agent owns on this host (sFlow row, tunnels, flows, mirrors)."""
        host_plan = self.running.hosts.get(self.config.host) if self.running else None
        bridge = self.config.bridge or (host_plan.bridge if host_plan else None) or DEFAULT_BRIDGE
        desired = DesiredState(bridge=bridge, sflow=None, vm_ports=(), mode="removed")
        return self._converge(desired, False, [], [], "remove all owned state", None, None,
                              self.clock(), adopt=None)

    # loop ---------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, max_cycles: int | None = None) -> None:
        """Cycle until ``stop`` is set (or ``max_cycles`` passes); never dies on a failed pass."""
        done = 0
        while not stop.is_set():
            try:
                self.cycle()
            except Exception:  # noqa: BLE001 - a daemon must survive its own bugs; report them
                log.exception("agent cycle failed")
                self.metrics.errors.labels(kind="internal").inc()
            done += 1
            if max_cycles is not None and done >= max_cycles:
                break
            stop.wait(self.config.interval_s + random.uniform(0, self.config.jitter_s))

    # pieces -------------------------------------------------------------------------------------
    def _candidates(self, errors: list[str], kinds: list[str]) -> tuple[Plan, ...]:
        from cosample.agents.plan import parse_document
        if not self.config.plan:
            errors.append("no plan location configured (--plan or 'plan' in the config)")
            kinds.append("fetch")
            return ()
        try:
            fetched = self.fetcher(self.config.plan, timeout_s=self.config.timeout_s,
                                   with_signature=self.config.public_key is not None)
            if self.config.public_key is not None:
                verify(fetched.data, fetched.signature, self.config.public_key)
            plans = parse_document(fetched.data)
        except SignatureError as exc:
            errors.append(str(exc))
            kinds.append("signature")
            return ()
        except PlanError as exc:
            errors.append(str(exc))
            kinds.append("plan")
            return ()
        except AgentError as exc:
            errors.append(str(exc))
            kinds.append("fetch")
            return ()
        usable = []
        for plan in plans:
            try:
                desired_state(plan, self.config)
            except PlanError as exc:
                errors.append(f"plan version {plan.version}: {exc}")
                kinds.append("plan")
            else:
                usable.append(plan)
        return tuple(usable)

    def _converge(self, desired: DesiredState, dry_run: bool, errors: list[str],
                  kinds: list[str], reason: str, plan: Plan | None, pending: Plan | None,
                  now: datetime, adopt: Plan | None) -> CycleReport:
        applied: list[str] = []
        remaining: list[str] = []
        problems: list[str] = []
        result = "dry-run" if dry_run else "ok"
        try:
            observed = self.host.observe(desired.bridge, desired.vm_ports or ())
            commands = reconcile(desired, observed)
            problems = find_problems(desired, observed)
            if dry_run:
                applied = [command.describe() for command in commands]
            else:
                if adopt is not None and (self.running is None or (
                        adopt.version, adopt.plan_id) != (self.running.version,
                                                          self.running.plan_id)):
                    self._adopt(adopt)
                for command in commands:
                    log.info("apply: %s", command.describe())
                    self.host.apply(command)
                    applied.append(command.describe())
                    if self.on_command is not None:
                        self.on_command(applied[-1])
                after = self.host.observe(desired.bridge, desired.vm_ports or ())
                remaining = [command.describe() for command in reconcile(desired, after)]
                problems = find_problems(desired, after)
                if remaining:
                    result = "diverged"
                    kinds.append("diverged")
                elif problems:
                    result = "degraded"
        except CosampleError as exc:  # HostError, or a command that failed
            errors.append(str(exc))
            kinds.append("host")
            result = "error"
        report = CycleReport(
            host=self.config.host, time=format_time(now), result=result, mode=desired.mode,
            reason=reason, plan_version=plan.version if plan else None,
            plan_id=plan.plan_id if plan else None,
            plan_expires=format_time(plan.expires) if plan else None,
            pending_version=pending.version if pending else None,
            commands=tuple(applied), remaining=tuple(remaining), problems=tuple(problems),
            errors=tuple(errors), desired=summarise(desired))
        for error in errors:
            log.warning("%s", error)
        if not dry_run:
            self.metrics.record(report, desired, now.timestamp(), kinds)
            write_reports(self.state_dir, report, self.metrics)
        return report

    def _adopt(self, plan: Plan) -> None:
        """Make ``plan`` the running one and remember it across restarts (rollback floor)."""
        self.running = plan
        text = json.dumps(plan.raw, sort_keys=True, indent=2) + "\n"
        write_bytes_atomic(self.state_dir / LAST_GOOD_FILE, text.encode(), parents=True)

    def _load_last_good(self) -> Plan | None:
        path = self.state_dir / LAST_GOOD_FILE
        try:
            return parse_plan(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, PlanError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            return None
