"""The guard's effects: read the host's headroom every tick, decide (``agents.guard``), and tell
the runner which rung of the plan's ladder is in force; log each step at WARNING, count it, and
send the collector the report it renormalises by (``cosample.dataplane.guardwire``).

Modes (``guard`` in the configuration): ``on`` steps the host along its plan's ladder;
``report`` decides as ``on`` would, logs and counts, but changes nothing on the host and tells
the collector nothing (its rates are the plan's); ``off`` reads nothing.

A step is never a new plan: the rung indexes the ladder of the plan in force, and a new plan
(or none) ends the deviation (``follow``). The collector hears of every step, and again every
``RESEND_TICKS`` ticks while the host is off its plan, and twice after it returned (datagrams
may be lost).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from cosample.agents.config import AgentConfig
from cosample.agents.errors import HostError
from cosample.agents.guard import GuardPolicy, GuardState, Reading, step
from cosample.agents.headroom import Probe
from cosample.dataplane.guardwire import GuardReport, encode
from cosample.dataplane.run import CommandError, run
from cosample.plan.document import Plan
from cosample.plan.fieldtypes import parse_hostport
from cosample.plan.guard import Rung, ladder

log = logging.getLogger("cosample.agents")
RESEND_TICKS = 5


@dataclass(frozen=True)
class GuardStatus:
    """What the status file and metrics say of the guard."""

    mode: str
    rung: int
    rungs: int
    sflow_sampling: int | None
    mirror_scale: float
    busy: float | None
    limit: float | None
    since: float | None  # Unix time the host left its plan (None: on it)
    steps_down: int
    steps_up: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class HostGuard:
    """One host's guard; ``probe`` reads the counters, ``send`` a datagram to the collector
    (defaults: the real ones)."""

    def __init__(
        self,
        config: AgentConfig,
        probe: Probe | None = None,
        send: Callable[[bytes, str | None, str], None] | None = None,
        *,
        vm_ports: Callable[[], tuple[str, ...]] = tuple,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config, self.mode, self.clock = config, config.guard, clock
        self.probe = probe or Probe(config.rundir, config.guard_signals, vm_ports)
        self.send = send or send_datagram
        self.policy = GuardPolicy(band=config.guard_band, up_after=config.guard_up_after)
        self.state = GuardState()
        self.plan: Plan | None = None
        self.rungs: tuple[Rung, ...] = (Rung(None, 1.0),)
        self.limit: float | None = None
        self.busy: float | None = None
        self.since: float | None = None
        self.steps = {"down": 0, "up": 0}
        self.quiet = 0  # ticks since the last report
        self.owed = 0  # reports still to send after the host returned to its plan
        self.broken: str | None = None  # the last error reading the host (logged once)

    # the plan in force --------------------------------------------------------------------------
    def follow(self, plan: Plan | None, mode: str) -> bool:
        """The plan in force after a cycle (``mode`` ``plan``, or ``safe``/``removed``). A new
        plan, or none, ends any deviation: True when the rung in force changed."""
        if plan is not None and mode == "plan" and self.plan is not None:
            if plan.digest == self.plan.digest:
                return False
        was = self.state.rung
        self.state, self.since = GuardState(), None
        self.plan = plan if mode == "plan" else None
        host = self.plan.hosts.get(self.config.host) if self.plan is not None else None
        if host is None:
            self.rungs, self.limit = (Rung(None, 1.0),), None
        else:
            self.rungs = ladder(host.sflow_sampling, bool(host.mirrors), host.guard)
            self.limit = host.guard.limit if host.guard is not None else None
        if was and self.mode == "on":  # the collector ends it too when it switches plans
            log.warning("guard: back on the plan (a new plan, version %s)", _version(self.plan))
        return bool(was) and self.mode == "on"

    def rung(self) -> Rung:
        """The rung in force on the host: the guard's (``on``), else the plan's."""
        return self.rungs[self.state.rung if self.mode == "on" else 0]

    # one tick -----------------------------------------------------------------------------------
    def tick(self) -> bool:
        """Read the headroom and decide: True when the rung in force changed (apply it)."""
        if self.mode == "off":
            return False
        reading = self._read()
        if reading is None:
            return False
        self.busy = reading.busy
        if self.limit is None or len(self.rungs) == 1:
            return False
        before = self.state.rung
        self.state = step(self.state, reading, len(self.rungs) - 1, self.limit, self.policy)
        rung = self.state.rung
        if rung != before:
            self._stepped(before, rung, reading)
        if self.mode == "on":
            self._keep_collector_told(rung != before)
        return self.mode == "on" and rung != before

    def status(self) -> GuardStatus:
        rung = self.rungs[self.state.rung]
        return GuardStatus(
            mode=self.mode,
            rung=self.state.rung,
            rungs=len(self.rungs),
            sflow_sampling=rung.sampling,
            mirror_scale=rung.mirror_scale,
            busy=None if self.busy is None else round(self.busy, 4),
            limit=self.limit,
            since=self.since,
            steps_down=self.steps["down"],
            steps_up=self.steps["up"],
        )

    # pieces -------------------------------------------------------------------------------------
    def _read(self) -> Reading | None:
        try:
            reading = self.probe.read()
        except HostError as exc:
            if str(exc) != self.broken:
                log.warning("guard: cannot read the host's headroom: %s", exc)
            self.broken = str(exc)
            return None
        self.broken = None
        return reading

    def _stepped(self, before: int, rung: int, reading: Reading) -> None:
        direction = "down" if rung > before else "up"
        self.steps[direction] += 1
        now = self.clock()
        if rung == 0:
            self.since = None
        elif before == 0:
            self.since = now
        target = self.rungs[rung]
        what = "backs off" if direction == "down" else "steps back up"
        if self.mode == "report":
            what = f"would {'back off' if direction == 'down' else 'step back up'} (report only)"
        rates = [f"sFlow 1-in-{target.sampling}" if target.sampling is not None else "no sFlow"]
        if self.plan is not None and self.plan.hosts[self.config.host].mirrors:
            rates.append(f"mirrors at {target.mirror_scale:g} of the plan")
        log.warning(
            "guard: %s to rung %d of %d (%s): forwarding busy %.2f, limit %.2f%s",
            what,
            rung,
            len(self.rungs) - 1,
            ", ".join(rates),
            reading.busy,
            self.limit,
            f", {reading.drops} packets dropped" if reading.drops else "",
        )

    def _keep_collector_told(self, changed: bool) -> None:
        """A report on every step, then every ``RESEND_TICKS`` ticks while off the plan and
        twice more once back on it."""
        self.quiet += 1
        if changed:
            self.owed = 2 if self.state.rung == 0 else 0
        elif self.quiet < RESEND_TICKS or (self.state.rung == 0 and not self.owed):
            return
        elif self.state.rung == 0:
            self.owed -= 1
        self.quiet = 0
        self._report()

    def _report(self) -> None:
        """The rung in force, to the collector the host's sFlow goes to."""
        plan = self.plan
        collector = (plan.sflow.collector if plan is not None else None) or self.config.collector
        if plan is None or collector is None:
            return
        rung = self.rungs[self.state.rung]
        report = GuardReport(
            host=self.config.host,
            plan_version=plan.version,
            rung=self.state.rung,
            sflow_sampling=rung.sampling,
            mirror_scale=rung.mirror_scale,
            time=round(self.clock(), 3),
            busy=round(self.busy or 0.0, 4),
        )
        agent = plan.sflow.agent or self.config.sflow_agent
        try:
            self.send(encode(report), agent, collector)
        except (OSError, HostError) as exc:
            log.warning("guard: report to the collector %s not sent: %s", collector, exc)


def send_datagram(data: bytes, agent: str | None, collector: str) -> None:
    """One UDP datagram to ``collector`` (``ADDRESS:PORT``) from the host's sFlow agent address
    (``agent``: an address, an interface name, or None: the route's source, as OVS picks it)."""
    address, port = parse_hostport(collector)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    source = _source_address(agent, family)
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        if source is not None:
            sock.bind((source, 0))
        sock.sendto(data, (address, port))


def _source_address(agent: str | None, family: int) -> str | None:
    if agent is None:
        return None
    try:
        return str(ipaddress.ip_address(agent))
    except ValueError:
        pass
    version = "-6" if family == socket.AF_INET6 else "-4"
    try:
        shown = json.loads(
            run(["ip", "-j", version, "addr", "show", "dev", agent], timeout=2).stdout
        )
    except (CommandError, ValueError) as exc:
        raise HostError(f"sFlow agent interface {agent}: no address ({exc})") from None
    for link in shown:
        for info in link.get("addr_info", ()):
            if info.get("scope") == "global":
                return str(info["local"])
    raise HostError(f"sFlow agent interface {agent}: no global address")


def _version(plan: Plan | None) -> str:
    return str(plan.version) if plan is not None else "none"
