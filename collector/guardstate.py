"""Which rung of its plan's ladder each host's guard runs, from the reports its agent sends
(``cosample.dataplane.guardwire``; docs/collector.md, "Guarded hosts").

A host's guard may sample more sparsely and mirror less than its plan says, down to the floor
the plan gives it (``cosample.plan.guard``). Its sFlow samples carry the 1-in-N in force; the
mirror rates do not travel with the copies, so the collector learns them from the reports and
weighs mirrored copies by ``scale x m_j / N_j``. A report is believed only as far as the plan
allows, and refused (counted under ``dropped``) otherwise:

- ``guard_malformed``: not a report (``guardwire.decode``);
- ``guard_source_mismatch``: the UDP source is not the named host's agent address;
- ``guard_stale_plan``: it is about another plan than the one in force (an agent that has not
  applied a new plan yet; the new plan starts every host on its rung 0);
- ``guard_off_ladder``: its rung, 1-in-N or mirror scale is not a rung of the host's ladder;
- ``guard_stale``: not newer than the last report accepted from the host, or more than
  ``CLOCK_SKEW_S`` from the collector's clock (a replay).

Pure but for the clock the caller passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from cosample.collector.attribution import exporter_address
from cosample.dataplane.guardwire import GuardReport, decode

#: A report's time may differ from the collector's by this much (hosts run NTP; the plans'
#: ``created`` allows the same).
CLOCK_SKEW_S = 300.0


@dataclass(frozen=True)
class HostRung:
    """What a host's guard runs now, as its last accepted report said."""

    rung: int
    sflow_sampling: int | None
    mirror_scale: float
    since: float | None  # arrival of the report that took it off rung 0 (None: on rung 0)
    time: float  # the report's own time (the next must be later)
    busy: float


class GuardBook:
    """The accepted reports per server, for the plan in force."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostRung] = {}
        self.accepted = 0

    def forget(self) -> list[str]:
        """A new plan: every host starts on its rung 0. The servers that were off theirs."""
        off = [server for server, rung in self.hosts.items() if rung.rung]
        self.hosts.clear()
        return off

    def scale(self, server: str) -> float:
        rung = self.hosts.get(server)
        return rung.mirror_scale if rung is not None else 1.0

    def read(
        self, data: bytes, source: str, now: float, attribution
    ) -> tuple[str, HostRung, float] | str:
        """(server, its rung now, its mirror scale before) for an accepted report, else the
        reason it is refused."""
        try:
            report = decode(data)
        except ValueError:
            return "guard_malformed"
        if attribution is None or attribution.plan_version is None:
            return "guard_stale_plan"
        server = attribution.server_of_agent.get(exporter_address(source))
        if server is None or server != report.host:
            return "guard_source_mismatch"
        if report.plan_version != attribution.plan_version:
            return "guard_stale_plan"
        if not _on_ladder(report, attribution.servers[server]):
            return "guard_off_ladder"
        last = self.hosts.get(server)
        if abs(report.time - now) > CLOCK_SKEW_S or (last is not None and report.time <= last.time):
            return "guard_stale"
        since = None
        if report.rung:
            since = last.since if last is not None and last.rung else now
        rung = HostRung(
            report.rung, report.sflow_sampling, report.mirror_scale, since, report.time, report.busy
        )
        self.hosts[server] = rung
        self.accepted += 1
        return server, rung, last.mirror_scale if last is not None else 1.0

    def snapshot(self) -> dict[str, dict]:
        """The snapshot's ``guard``: servers off their plan, by name."""
        return {
            server: {
                "rung": rung.rung,
                "sflow_sampling": rung.sflow_sampling,
                "mirror_scale": rung.mirror_scale,
                "since": rung.since,
                "busy": rung.busy,
            }
            for server, rung in sorted(self.hosts.items())
            if rung.rung
        }


def _on_ladder(report: GuardReport, plan) -> bool:
    """The report's rung, 1-in-N and mirror scale are one rung of the host's ladder."""
    from cosample.plan.guard import ladder  # pydantic's models: only a daemon gets reports

    rungs = ladder(plan.sampling, bool(plan.mirrors), plan.guard)
    if report.rung >= len(rungs):
        return False
    rung = rungs[report.rung]
    return rung.sampling == report.sflow_sampling and rung.mirror_scale == report.mirror_scale
