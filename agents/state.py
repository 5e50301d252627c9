"""Plain immutable records of what a host should look like (desired) and what it looks like
(observed): the sFlow and mirror parts, which ``hoststate`` joins with the application part and
the ``sample`` mechanism's into a host's whole state.

Both sides use the same vocabulary so ``reconcile`` can compare them field by field. Names and
numbers that mark objects as the agent's own (ownership tags, tc prio range, OpenFlow cookie,
OpenFlow port range) are defined here, in one place.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from cosample.dataplane.tunnels import pair_vni  # noqa: F401  (re-exported: agents use it here)

#: ``external_ids`` key/value on every OVSDB row the agent creates.
OWNER_KEY, OWNER_VALUE = "cosample-owner", "agent"
#: ``external_ids`` key naming the peer host of a receiver tunnel port.
PEER_KEY = "cosample-peer"
#: Prefix of the Linux ``ifalias`` of every mirror device the agent creates.
ALIAS_PREFIX = "cosample-owner=agent"
#: tc filter priorities the agent uses on a VM port's ingress hook: [PRIO_BASE, +PRIO_COUNT).
PRIO_BASE, PRIO_COUNT, FILTER_HANDLE = 0xC000, 256, 1
#: The agent's mark on its tc filters: the mirred action's cookie ("cosample" in ASCII). A
#: filter in the agent's prio range without it belongs to someone else.
FILTER_COOKIE = "636f73616d706c65"
#: OpenFlow cookies owned by the agent: the top 16 bits are COOKIE_TAG, the low bits the ofport.
COOKIE_TAG, COOKIE_MASK = 0xC05A << 48, 0xFFFF << 48
DROP_FLOW_PRIORITY = 40000
#: OpenFlow port numbers the agent requests for its tunnel ports: [OFPORT_BASE, +OFPORT_COUNT).
OFPORT_BASE, OFPORT_COUNT = 64000, 1000


def short_hash(text: str) -> str:
    """8 hex digits naming a peer in an interface name (names are limited to 15 characters)."""
    return f"{zlib.crc32(text.encode()):08x}"


def drop_cookie(ofport: int) -> int:
    return COOKIE_TAG | ofport


# desired -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SflowSettings:
    """The sFlow row's content that the agent manages."""

    target: str
    sampling: int
    agent: str | None = None
    header_bytes: int = 128
    polling_s: int = 30


@dataclass(frozen=True)
class MirrorTarget:
    """A mirrored share toward ``peer``: a VXLAN device, and a tc filter at ``prio`` on each VM port."""

    peer: str
    rate: float
    probability: float  # conditional match probability of this filter in the chain
    prio: int
    device: str
    remote_ip: str
    vni: int
    local_ip: str | None = None
    dstport: int = 4789


@dataclass(frozen=True)
class TunnelPort:
    """A receiver's OVS VXLAN port for mirrored traffic from ``peer`` (dropped after sampling)."""

    peer: str
    name: str
    remote_ip: str
    key: int
    local_ip: str | None = None
    dstport: int = 4789

    def options(self) -> dict[str, str]:
        out = {"remote_ip": self.remote_ip, "key": str(self.key)}
        if self.local_ip:
            out["local_ip"] = self.local_ip
        if self.dstport != 4789:
            out["dst_port"] = str(self.dstport)
        return out


# observed ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObservedSflow:
    uuid: str
    owned: bool
    settings: SflowSettings


@dataclass(frozen=True)
class ObservedPort:
    """A port of the bridge (its interface of the same name)."""

    name: str
    type: str
    ofport: int | None
    owned: bool
    options: Mapping[str, str] = field(default_factory=dict)
    peer: str | None = None


@dataclass(frozen=True)
class ObservedFilter:
    prio: int
    bytecode: str
    target: str | None  # mirred device; None when it no longer exists


@dataclass(frozen=True)
class ObservedKernelFilter:
    """One of the agent's kernel application-mirror filters (``kernel_mirror``) on a hook."""

    direction: str  # ingress / egress
    prio: int
    cookie: str
    target: str | None  # mirred device; None when it no longer exists


@dataclass(frozen=True)
class ObservedLink:
    """A Linux interface that carries VM traffic: its clsact hook and the agent's filters on it."""

    name: str
    clsact: bool
    filters: tuple[ObservedFilter, ...] = ()
    clsact_owned: bool = False  # the agent added the clsact qdisc (its ledger says so)
    foreign_filters: int = 0  # filters of others on either hook
    conflict: str | None = None  # why the agent must leave this interface alone
    #: the agent's kernel application-mirror filters, both hooks (not in ``foreign_filters``)
    kernel_filters: tuple[ObservedKernelFilter, ...] = ()


@dataclass(frozen=True)
class ObservedDevice:
    """A mirror VXLAN device owned by the agent."""

    name: str
    remote_ip: str | None
    vni: int | None
    local_ip: str | None
    dstport: int | None
    up: bool


@dataclass(frozen=True)
class ObservedFlow:
    cookie: int
    in_port: int | None
    priority: int
    actions: str


@dataclass(frozen=True)
class ObservedElsewhere:
    """What the agent owns on a bridge other than the plan's (left behind by a bridge change)."""

    bridge: str
    sflow_uuid: str | None = None  # the bridge's sFlow row, when it is the agent's
    ports: tuple[str, ...] = ()
    flows: tuple[int, ...] = ()  # cookies
