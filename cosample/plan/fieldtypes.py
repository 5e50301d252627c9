"""The plan's field types: rates, the sFlow 1-in-N and header bounds, collector and agent
addresses, times; each a pydantic type with its check, shared by the plan's models
(``document``), the slices and the agents' configuration.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from cosample.plan.errors import PlanError
from cosample.times import parse_time
from cosample.validation import InterfaceName

Role = Literal["sender", "receiver", "idle"]
ROLES = get_args(Role)
#: Slack allowed on rates and sums through floating-point rounding in the planner.
RATE_SLACK = 1e-9
#: OVS keeps the sFlow 1-in-N in 32 bits (sFlow's ``sampling_rate``).
MAX_SAMPLING = 2**32 - 1
#: Bytes of each sampled packet's header sent to the collector: at least an Ethernet header, at
#: most what fits with the sample's other fields into OVS's 1400-byte sFlow datagrams.
HEADER_BYTES = (14, 1024)
#: IPFIX's Observation Domain ID is 32 bits; 0 is reserved (RFC 7011, 3.1).
MAX_OBSERVATION_DOMAIN = 2**32 - 1
#: How a host takes its local share: sFlow 1-in-N on its bridge, or OVS's OpenFlow ``sample``
#: action at K/65535 with IPFIX export (docs/formats.md).
LocalMechanism = Literal["sflow", "sample"]


def parse_hostport(value: str, at: str | None = None) -> tuple[str, int]:
    """``"ADDRESS:PORT"`` (IPv6 as ``[ADDRESS]:PORT``) split and checked.

    The address must be an IP literal: it goes to OVS as an sFlow target (or to a socket),
    nothing else. Raises ``ValueError``, or ``PlanError`` naming ``at`` when it is given.
    """
    try:
        return _hostport(value)
    except ValueError as exc:
        if at is None:
            raise
        raise PlanError(f"{at}: {exc}, got {value!r}") from None


def _hostport(value: str) -> tuple[str, int]:
    if not isinstance(value, str):
        raise ValueError("expected 'ADDRESS:PORT'")
    host, colon, port = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        raise ValueError(
            "expected 'ADDRESS:PORT' with an IP address ([ADDRESS] for IPv6)"
        ) from None
    if not colon or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("expected 'ADDRESS:PORT' with a port in 1..65535")
    if address.version == 6 and not bracketed:
        raise ValueError("expected an IPv6 address as '[ADDRESS]:PORT'")
    return str(address), int(port)


def _collector(value: str) -> str:
    parse_hostport(value)
    return value


def _sflow_agent(value: str) -> str:
    """OVS's sFlow ``agent``: an interface name or an IP address, nothing else."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    return _interface_name(value)


_INTERFACE_NAME: TypeAdapter = TypeAdapter(InterfaceName)


def _interface_name(value: str) -> str:
    try:
        return _INTERFACE_NAME.validate_python(value)
    except ValidationError:
        raise ValueError("expected an interface name or an IP address") from None


def listed(value: Any) -> Any:
    """JSON, TOML and YAML give lists; plans and configurations keep immutable tuples."""
    return tuple(value) if isinstance(value, list) else value


Rate = Annotated[
    float,
    Field(gt=0, le=1 + RATE_SLACK, allow_inf_nan=False),
    AfterValidator(lambda value: min(value, 1.0)),
]
LocalRate = Annotated[
    float,
    Field(ge=0, le=1 + RATE_SLACK, allow_inf_nan=False),
    AfterValidator(lambda value: min(value, 1.0)),
]
if TYPE_CHECKING:  # what a validated field holds: the validator turns the text into a datetime
    UtcTime = datetime
else:
    UtcTime = Annotated[str, AfterValidator(parse_time)]
Collector = Annotated[str, AfterValidator(_collector)]
SflowAgent = Annotated[str, Field(min_length=1), AfterValidator(_sflow_agent)]
