"""The ``sample`` local mechanism on a host (pure): what the plan asks, and the commands to get it.

A host planned with ``local_mechanism: "sample"`` takes its local share with OVS's OpenFlow
``sample`` action instead of sFlow (docs/agents.md, issue 24): sFlow off on the bridge, one
``IPFIX`` row with the exporter's flow cache, one ``Flow_Sample_Collector_Set`` (``id``
``SAMPLE_COLLECTOR_SET_ID``) and one OpenFlow flow with the agent's cookie.

How the flow composes with the bridge's other flows. sFlow samples every packet entering the
bridge before the OpenFlow pipeline, whatever the pipeline then does (the receivers' drop flows
rely on it). The sample flow does the same in the pipeline itself: at the top priority of table
0 it matches packets not yet marked (one register bit, ``SAMPLE_MARK``), marks them, samples
them and resubmits them to table 0, where the mark makes it miss and the bridge's own flows
(the agent's drop and application-monitoring flows, anyone else's, ``NORMAL``) decide as
before. So every packet entering the bridge is drawn exactly once, and no other flow has to
know about sampling. The cost: the bridge's pipeline must not use that register bit (a plain
``NORMAL`` bridge, which is what the agents support, uses none).
"""

from __future__ import annotations

from dataclasses import dataclass

from cosample.agents.commands import Command
from cosample.agents.config import AgentConfig
from cosample.agents.state import COOKIE_TAG
from cosample.dataplane.ipfix import SAMPLE_COLLECTOR_SET_ID
from cosample.plan.document import HostPlan, Plan
from cosample.plan.errors import PlanError

#: The sample flow's cookie: the agent's tag, and a low part no drop flow uses (those carry
#: an OpenFlow port number, below 2^16).
SAMPLE_COOKIE = COOKIE_TAG | 1 << 32
#: Above every other flow of table 0, so each packet meets it first.
SAMPLE_PRIORITY = 65535
#: The register bit that says "already sampled": bit 31 of reg15, as OVS prints it.
SAMPLE_MARK_FIELD, SAMPLE_MARK_BIT = "NXM_NX_REG15", 31


@dataclass(frozen=True)
class IpfixSettings:
    """The ``IPFIX`` row's content that the agent manages."""

    target: str
    cache_active_timeout_s: int
    cache_max_flows: int


@dataclass(frozen=True)
class SampleSettings:
    """What a ``sample`` host needs: the exporter, the draw's probability (of 65535) and the
    IPFIX observation domain its records carry."""

    ipfix: IpfixSettings
    probability: int
    domain: int


@dataclass(frozen=True)
class ObservedExporter:
    """A ``Flow_Sample_Collector_Set`` row and its ``IPFIX`` row."""

    bridge: str
    uuid: str
    set_id: int
    owned: bool
    ipfix_uuid: str | None
    ipfix: IpfixSettings | None


@dataclass(frozen=True)
class ObservedSample:
    """The collector sets on every bridge that has one with the agent's id or mark."""

    exporters: tuple[ObservedExporter, ...] = ()


# commands ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SetSampleExporter(Command):
    """Create the owned IPFIX + Flow_Sample_Collector_Set rows on ``bridge``, or update the
    owned IPFIX row ``ipfix_uuid`` in place."""

    bridge: str
    ipfix: IpfixSettings
    ipfix_uuid: str | None = None

    def describe(self) -> str:
        verb = "update" if self.ipfix_uuid else "create"
        return (
            f"{verb} IPFIX exporter on {self.bridge}: collector set "
            f"{SAMPLE_COLLECTOR_SET_ID:#x} to {self.ipfix.target} (cache "
            f"{self.ipfix.cache_max_flows} flows, {self.ipfix.cache_active_timeout_s} s)"
        )


@dataclass(frozen=True)
class RemoveSampleExporter(Command):
    """Destroy the owned Flow_Sample_Collector_Set ``uuid`` (a root table; its IPFIX row goes
    with it)."""

    bridge: str
    uuid: str

    def describe(self) -> str:
        return f"remove IPFIX exporter (collector set {self.uuid}) from {self.bridge}"


@dataclass(frozen=True)
class SetSampleFlow(Command):
    """Add (or replace) the sample flow on ``bridge``."""

    bridge: str
    probability: int
    domain: int

    def describe(self) -> str:
        return (
            f"set sample flow on {self.bridge}: probability {self.probability}/65535, "
            f"observation domain {self.domain}"
        )

    def flow(self) -> str:
        """The flow as ``ovs-ofctl add-flow`` reads it."""
        return (
            f"cookie={SAMPLE_COOKIE:#x},priority={SAMPLE_PRIORITY},"
            f"reg15=0/{1 << SAMPLE_MARK_BIT:#x},actions="
            f"{sample_actions(self.probability, self.domain)}"
        )


@dataclass(frozen=True)
class RemoveSampleFlow(Command):
    bridge: str

    def describe(self) -> str:
        return f"remove sample flow cookie={SAMPLE_COOKIE:#x} from {self.bridge}"


SAMPLE_COMMANDS = (SetSampleExporter, RemoveSampleExporter, SetSampleFlow, RemoveSampleFlow)


def sample_actions(probability: int, domain: int) -> str:
    """The flow's actions as ``ovs-ofctl dump-flows`` prints them (compared on every cycle):
    mark, draw (``obs_point_id`` = the probability, so each record states it), back to table 0."""
    return (
        f"load:0x1->{SAMPLE_MARK_FIELD}[{SAMPLE_MARK_BIT}],"
        f"sample(probability={int(probability)},collector_set_id={SAMPLE_COLLECTOR_SET_ID},"
        f"obs_domain_id={int(domain)},obs_point_id={int(probability)}),resubmit(,0)"
    )


# desired -------------------------------------------------------------------------------------
def desired_sample(plan: Plan, host: HostPlan, config: AgentConfig) -> SampleSettings | None:
    """The host's ``sample`` settings, plan values first, the config's otherwise; None for sFlow."""
    if host.local_mechanism != "sample":
        return None
    spec = plan.ipfix
    target = spec.collector or config.ipfix_collector
    if not target:
        raise PlanError(
            "ipfix.collector: missing in the plan and in the agent config "
            f"(hosts.{host.name} samples with local_mechanism 'sample'; set "
            f"'ipfix_collector' in the config)"
        )
    ipfix = IpfixSettings(
        target=target,
        cache_active_timeout_s=spec.cache_active_timeout_s
        if spec.cache_active_timeout_s is not None
        else config.ipfix_cache_active_timeout_s,
        cache_max_flows=spec.cache_max_flows
        if spec.cache_max_flows is not None
        else config.ipfix_cache_max_flows,
    )
    probability, domain = host.sample_probability, host.observation_domain
    assert probability is not None and domain is not None  # (the plan's: with ``sample``)
    return SampleSettings(ipfix=ipfix, probability=probability, domain=domain)


# reconcile -----------------------------------------------------------------------------------
def reconcile_sample(
    desired: SampleSettings | None,
    observed: ObservedSample | None,
    bridge: str,
    bridge_exists: bool,
    flow_actions: dict[int, tuple[int, str]],
) -> tuple[list[Command], list[Command]]:
    """(decreases, increases) turning the observed exporters and sample flow into ``desired``.

    ``flow_actions``: the agent's flows on ``bridge`` by cookie, as (priority, actions). The flow
    goes before its exporter and comes after it; owned exporters on other bridges are removed
    (their flows go with the other owned flows of those bridges, ``reconcile._elsewhere``). A
    foreign collector set with the agent's id on the bridge blocks the flow (``sample_problems``).
    """
    if observed is None:
        return [], []
    decrease: list[Command] = []
    increase: list[Command] = []
    mine = [e for e in observed.exporters if e.owned]
    decrease += [
        RemoveSampleExporter(e.bridge, e.uuid)
        for e in mine
        if e.bridge != bridge or desired is None or not bridge_exists
    ]
    if not bridge_exists:
        return decrease, increase
    flow = flow_actions.get(SAMPLE_COOKIE)
    if desired is None or _blocked(observed, bridge):
        if flow is not None:
            decrease.insert(0, RemoveSampleFlow(bridge))
        return decrease, increase
    here = [e for e in mine if e.bridge == bridge]
    current = here[0] if here else None
    decrease += [RemoveSampleExporter(e.bridge, e.uuid) for e in here[1:]]
    if current is None or current.set_id != SAMPLE_COLLECTOR_SET_ID or current.ipfix_uuid is None:
        if current is not None:
            decrease.append(RemoveSampleExporter(bridge, current.uuid))
        increase.append(SetSampleExporter(bridge, desired.ipfix))
    elif current.ipfix != desired.ipfix:
        increase.append(SetSampleExporter(bridge, desired.ipfix, current.ipfix_uuid))
    if flow != (SAMPLE_PRIORITY, sample_actions(desired.probability, desired.domain)):
        command = SetSampleFlow(bridge, desired.probability, desired.domain)
        lower = flow is not None and _probability(flow[1]) >= desired.probability
        (decrease if lower else increase).append(command)
    return decrease, increase


def sample_problems(
    desired: SampleSettings | None, observed: ObservedSample | None, bridge: str
) -> list[str]:
    if desired is None or observed is None or not _blocked(observed, bridge):
        return []
    return [
        f"bridge {bridge} has a foreign Flow_Sample_Collector_Set with id "
        f"{SAMPLE_COLLECTOR_SET_ID:#x}; left alone, local sampling not set up"
    ]


def _blocked(observed: ObservedSample, bridge: str) -> bool:
    return any(
        e.bridge == bridge and not e.owned and e.set_id == SAMPLE_COLLECTOR_SET_ID
        for e in observed.exporters
    )


def _probability(actions: str) -> int:
    """The probability in an observed sample flow's actions (0 when it has none)."""
    _, found, rest = actions.partition("probability=")
    digits = rest.split(",", 1)[0]
    return int(digits) if found and digits.isdigit() else 0
