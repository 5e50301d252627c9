"""A host's whole state, desired and observed: the sFlow and mirror part (``state``), the
application part (``appmon_state``) and the ``sample`` mechanism's (``sample``) side by side.

The parts are below this module and never import it, so each is read alone; ``reconcile``
compares the two wholes field by field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cosample.agents.appmon_state import DesiredAppmon, ObservedAppmon
from cosample.agents.sample import ObservedSample, SampleSettings
from cosample.agents.state import (
    MirrorTarget,
    ObservedDevice,
    ObservedElsewhere,
    ObservedFlow,
    ObservedLink,
    ObservedPort,
    ObservedSflow,
    SflowSettings,
    TunnelPort,
)


@dataclass(frozen=True)
class DesiredState:
    """What one host must look like. ``vm_ports`` None: every non-owned system port of the bridge."""

    bridge: str
    sflow: SflowSettings | None
    mirrors: tuple[MirrorTarget, ...] = ()
    receivers: tuple[TunnelPort, ...] = ()
    vm_ports: tuple[str, ...] | None = None
    mode: str = "plan"  # "plan" or "safe"
    plan_version: int | None = None
    appmon: "DesiredAppmon | None" = None  # None: no application monitoring (all removed)
    sample: "SampleSettings | None" = None  # the ``sample`` local mechanism (agents/sample.py)


@dataclass(frozen=True)
class ObservedState:
    """What the host looks like; only the agent's own objects plus what it needs to decide."""

    bridge: str
    bridge_exists: bool
    sflow: ObservedSflow | None = None
    ports: tuple[ObservedPort, ...] = ()
    flows: tuple[ObservedFlow, ...] = ()
    links: Mapping[str, ObservedLink] = field(default_factory=dict)
    devices: tuple[ObservedDevice, ...] = ()
    #: Interfaces that exist and are not the agent's (a mirror device name must not be one).
    foreign_links: frozenset[str] = frozenset()
    #: Interfaces carrying the underlay route to a tunnel peer: never VM ports.
    underlay: frozenset[str] = frozenset()
    #: MTUs of the observed links (VM ports), and per tunnel peer address the interface and
    #: MTU of its underlay route (``agents.mtu``); empty where the backend does not observe them.
    link_mtus: Mapping[str, int] = field(default_factory=dict)
    paths: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    elsewhere: tuple[ObservedElsewhere, ...] = ()
    appmon: "ObservedAppmon | None" = None  # None: the host backend does not observe it
    sample: "ObservedSample | None" = None  # None: the host backend does not observe it
