"""The data-centre description format, declared once as pydantic models (docs/formats.md).

These models are the schema: types, bounds, optional fields and unknown keys are checked by
pydantic through ``cosample.validation``. What one field alone cannot say (unique server names,
traffic naming known servers, a capacity given by the server or its calibration file) is checked
in ``planner.datacentre`` with the same one-line error form. To add a field, add it here, to the
table in docs/formats.md, and, if the plan carries it, to ``planner.planfile``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from cosample.plan.appmon import TRUNCATE_BYTES, UNCUT, AppmonProtocol
from cosample.plan.document import IpfixSpec
from cosample.plan.fieldtypes import MAX_OBSERVATION_DOMAIN
from cosample.plan.guard import GuardSpec
from cosample.plan.hostfields import HANDED_FIELDS
from cosample.validation import InterfaceName, IpAddress, ServerName, Strict, TunnelAddress

#: A finite number >= 0 (packets per second, capacities).
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: A finite number > 0 (cost coefficients).
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A share of capacity kept free: 0 <= margin < 1.
Margin = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]


class Cost(Strict):
    """Default coefficients, in units of forwarding one packet."""

    alpha: Positive
    beta: Positive


class Server(Strict):
    """One OVS server; ``capacity_pps``, ``alpha`` and ``beta`` may come from ``calibration``."""

    name: ServerName
    capacity_pps: NonNegative | None = None
    alpha: Positive | None = None
    beta: Positive | None = None
    calibration: Annotated[str, Field(min_length=1)] | None = None
    tunnel_ip: TunnelAddress | None = None
    bridge: InterfaceName | None = None
    vm_ports: list[InterfaceName] | None = None
    #: share of capacity kept free (default: ``cosample plan --margin``, else 0.1)
    margin: Margin | None = None
    #: value of one collected packet of this server's VMs (monitor some servers more), default 1
    weight: Positive | None = None
    #: mean size of the VMs' packets, bytes (turns the mirror cap into packets)
    packet_bytes: Positive | None = None
    #: most mirrored bytes/s this server may send across the fabric
    mirror_cap_bytes_per_s: NonNegative | None = None
    #: "patch": tunnels on another bridge (OpenStack br-int + br-tun), the sampled bridge takes
    #: the VMs' own packets; "single": VM ports and tunnels on the sampled bridge, which then
    #: also samples the tenant traffic arriving from other servers
    bridge_layout: Literal["patch", "single"] = "patch"
    #: cost per sample of OVS's OpenFlow ``sample`` action with the IPFIX flow cache (absent:
    #: the calibration's ``alpha_sample``); a server with it may take its local share by the
    #: ``sample`` mechanism at any probability K/65535 (docs/planner.md)
    alpha_sample: Positive | None = None
    #: the IPFIX Observation Domain ID of its records when it uses ``sample`` (absent: its
    #: IPv4 ``tunnel_ip`` as a 32-bit integer)
    observation_domain: Annotated[int, Field(ge=1, le=MAX_OBSERVATION_DOMAIN)] | None = None
    #: the operator's minimum for this server: how far its agent's guard may back off between
    #: plans (``cosample.plan.guard``); handed to the plan with every field written
    guard: Annotated[GuardSpec, AfterValidator(lambda spec: spec.model_dump())] | None = None

    @field_validator("mirror_cap_bytes_per_s")
    @classmethod
    def _cap_needs_size(cls, cap: float | None, info: ValidationInfo) -> float | None:
        if cap is not None and info.data.get("packet_bytes") is None:
            raise ValueError("needs packet_bytes (the mean packet size) to count mirrored packets")
        return cap


#: Server fields handed through to the plan for the agents, when given (``cosample.plan.hostfields``).
AGENT_FIELDS = HANDED_FIELDS


class Sflow(Strict):
    """Copied into the plan for the agents' sFlow rows."""

    collector: Annotated[str, Field(min_length=1)] | None = None
    agent: Annotated[str, Field(min_length=1)] | None = None
    header_bytes: Annotated[int, Field(gt=0)] | None = None
    polling_s: Annotated[int, Field(ge=0)] | None = None


class Ipfix(IpfixSpec):
    """Copied into the plan for the agents' IPFIX rows (hosts using ``sample``): the plan's
    own declaration, strict about unknown keys as every description part is."""

    model_config = Strict.model_config


class Budgets(Strict):
    """Fleet-wide limits the operator sets."""

    #: most sFlow samples/s all bridges and receivers together send to the collector
    collector_samples_pps: NonNegative | None = None
    #: most hosts that analyse other hosts' services (application monitoring)
    analysis_hosts: Annotated[int, Field(ge=0)] | None = None


#: A share of a service's connections: 0 <= share <= 1.
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class AppmonCost(Strict):
    """The application mechanisms' CPU per request, in units of forwarding one of the service's
    packets, and the bytes each mirror copies per request (defaults: ``planner.appmon_costs``,
    from the seeds' comparison; the calibration harness's numbers replace them)."""

    #: a calibration JSON with an ``appmon`` section (beside the description); absent: the
    #: servers' calibration files' sections, if any (``planner.appmon_costs``)
    calibration: Annotated[str, Field(min_length=1)] | None = None
    onsite: Positive | None = None
    mirror_sender: Positive | None = None
    analyser: Positive | None = None
    mirror_bytes: Positive | None = None
    truncated_bytes: Positive | None = None
    #: the sender's CPU per request of a kernel mirror (``mirror: kernel_mirror``); absent and
    #: not calibrated: ``mirror_sender`` (docs/planner.md)
    kernel_mirror_sender: Positive | None = None


class Service(Strict):
    """One application service to monitor (planned by ``planner.appmon``)."""

    server: Annotated[str, Field(min_length=1)]
    address: IpAddress
    port: Annotated[int, Field(ge=1, le=65535)]
    #: what it speaks: HTTP/1.x, HTTP/2 in clear text, HTTP/1.1 or HTTP/2 over TLS (read at the
    #: record layer: no success rate); ``h2c`` cannot be truncated (docs/appmon-mechanisms.md)
    protocol: AppmonProtocol = "http"
    #: value of one monitored request (default 1)
    weight: Positive = 1.0
    #: the smallest share of connections that must be monitored (the accuracy target)
    min_share: Share = 0.0
    #: requests per second (unknown: the planner assumes ``default_request_rate``)
    request_rate: NonNegative | None = None
    #: packets one request and its response put through the bridge (both directions)
    packets_per_request: Positive | None = None
    #: the VM's port the on-site sniffer listens on (absent: no on-site option)
    interface: InterfaceName | None = None
    #: mirrors truncated to this many bytes (the plan format's bounds), cheaper on the fabric
    truncate_bytes: Annotated[int, Field(ge=TRUNCATE_BYTES[0], le=TRUNCATE_BYTES[1])] | None = None
    #: how a mirrored service is copied: OpenFlow flows, or the kernel on the VM's port
    #: (``kernel_mirror``: the server's timing on a userspace datapath; needs ``interface``, no
    #: ``truncate_bytes``; docs/appmon-mechanisms.md)
    mirror: Literal["selective_mirror", "kernel_mirror"] = "selective_mirror"

    @field_validator("mirror")
    @classmethod
    def _kernel_needs_port(cls, mirror: str, info: ValidationInfo) -> str:
        if mirror == "kernel_mirror" and info.data.get("interface") is None:
            raise ValueError("kernel_mirror needs interface (the VM's port its tc filters sit on)")
        if mirror == "kernel_mirror" and info.data.get("truncate_bytes") is not None:
            raise ValueError(
                "kernel_mirror cannot truncate; drop truncate_bytes or use selective_mirror"
            )
        return mirror

    @model_validator(mode="after")
    def _whole_segments(self) -> "Service":
        if self.protocol in UNCUT and self.truncate_bytes is not None:
            raise ValueError(
                f"a {self.protocol} service cannot be truncated (HTTP/2 frame headers sit "
                f"anywhere in a segment); drop truncate_bytes"
            )
        return self


class Envelope(Strict):
    """A description less its two large parts (which may also come as CSV files)."""

    name: Annotated[str, Field(min_length=1)] | None = None
    cost: Cost
    sflow: Sflow = Sflow()
    #: IPFIX settings for hosts planned with ``sample`` (absent: the agents' configuration)
    ipfix: Ipfix | None = None
    budgets: Budgets = Budgets()
    #: application services to monitor (docs/planner.md, "Application monitoring")
    services: list[Service] = []
    appmon_cost: AppmonCost = AppmonCost()
    #: which part is planned first on the shared CPU (docs/planner.md, "Application monitoring")
    appmon_order: Literal["appmon_first", "sflow_first"] = "appmon_first"


class Description(Envelope):
    """A whole description: ``cost``, ``servers``, ``traffic_pps[src][dst]``, ``sflow``, ``budgets``."""

    servers: Annotated[list[Server], Field(min_length=1)]
    traffic_pps: dict[str, dict[str, NonNegative]] = {}


#: The two large parts, which a description may give as CSV files beside it (docs/formats.md).
LARGE_PARTS = ("servers", "traffic_pps")
