"""The inventory: what the controller knows about the fleet before measuring anything.

Servers, their bridges, tunnel addresses and VM ports, and each server's capacity and cost
coefficients, given directly or through a calibration JSON (``cosample fit -o``) per server or
per class of identical servers. No traffic numbers: those are measured every cycle. Declared
once as pydantic models (``cosample.validation``); format in docs/formats.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import numpy as np
from pydantic import Field

from cosample.controller.errors import InventoryError
from cosample.costmodel.coefficients import CalibrationFileError, read_coefficients
from cosample.planner.appmon_costs import resolve as appmon_costs
from cosample.planner.datacentre import ExtraColumns, observation_domains
from cosample.planner.description import AppmonCost, Ipfix, NonNegative, Positive, Service, Sflow
from cosample.planner.description import Server as DescribedServer
from cosample.planner.errors import PlannerError
from cosample.validation import Strict, problem, read_document, validate

FORMAT: Final = "cosample.inventory"
Name = Annotated[str, Field(min_length=1)]


class Coefficients(Strict):
    """What a class of servers (or every server, ``cost``) costs: directly or by calibration."""

    calibration: Name | None = None
    capacity_pps: NonNegative | None = None
    alpha: Positive | None = None
    beta: Positive | None = None
    #: cost per sample of OVS's cached ``sample`` action (planner.description.Server)
    alpha_sample: Positive | None = None


class Server(DescribedServer):
    """A server as the planner's description declares it, plus its class; no traffic."""

    server_class: Name | None = Field(default=None, alias="class")


class InventoryModel(Strict):
    """The inventory file (JSON or YAML)."""

    format: Literal["cosample.inventory"] = FORMAT
    format_version: Literal[1] = 1
    name: Name = "datacentre"
    cost: Coefficients | None = None
    classes: dict[str, Coefficients] = {}
    servers: list[Server] = Field(min_length=1)
    sflow: Sflow | None = None
    #: IPFIX settings for servers planned with ``sample``, as in a description
    ipfix: Ipfix | None = None
    #: application services to monitor, as in a description; their request rates are measured
    #: by the analysers (``controller.appsource``), a given ``request_rate`` is the prior
    services: list[Service] = []
    appmon_cost: AppmonCost = AppmonCost()
    analysis_hosts: Annotated[int, Field(ge=0)] | None = None
    appmon_order: Literal["appmon_first", "sflow_first"] = "appmon_first"


def _check_references(model: InventoryModel, source: str) -> None:
    """What no single field can see: duplicate names and tunnels, unknown classes."""
    seen: dict[str, int] = {}
    tunnels: dict[str, str] = {}
    for position, server in enumerate(model.servers):
        if server.name in seen:
            raise problem(
                ("servers", position, "name"),
                f"duplicate server {server.name!r} (also servers[{seen[server.name]}])",
                where=source,
                error=InventoryError,
            )
        seen[server.name] = position
        if server.server_class is not None and server.server_class not in model.classes:
            raise problem(
                ("servers", position, "class"),
                f"unknown class {server.server_class!r} (classes: {sorted(model.classes)})",
                where=source,
                name=server.name,
                error=InventoryError,
            )
        if server.tunnel_ip is not None:
            if server.tunnel_ip in tunnels:
                raise problem(
                    ("servers", position, "tunnel_ip"),
                    f"{server.tunnel_ip} is also {tunnels[server.tunnel_ip]!r}'s",
                    where=source,
                    name=server.name,
                    error=InventoryError,
                )
            tunnels[server.tunnel_ip] = server.name


@dataclass(frozen=True)
class Inventory:
    """The fleet as arrays in inventory order, coefficients resolved."""

    name: str
    names: tuple[str, ...]
    capacity_pps: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    extras: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sflow: Mapping[str, Any] = field(default_factory=dict)
    index: Mapping[str, int] = field(default_factory=dict)
    #: application monitoring (``controller.appsource``, ``planner.appmon_plan``)
    services: tuple[Any, ...] = ()
    appmon_cost: Mapping[str, float] = field(default_factory=dict)
    analysis_hosts: int | None = None
    appmon_order: str = "appmon_first"
    #: the ``sample`` mechanism (``planner.datacentre.DataCentre``'s columns): cost per sample
    #: (NaN: sFlow only) and Observation Domain ID (0: none); None when no server may use it
    alpha_sample: np.ndarray | None = None
    observation_domain: np.ndarray | None = None
    ipfix: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.index:
            object.__setattr__(self, "index", {name: i for i, name in enumerate(self.names)})
        if self.extras and not isinstance(self.extras, ExtraColumns):
            # once, as columns: every publication writes them column by column, not host by host
            object.__setattr__(self, "extras", ExtraColumns.of(self.names, self.extras))

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def sample(self) -> dict[str, Any]:
        """The ``DataCentre`` keywords of the ``sample`` mechanism (none when no server may
        use it, nor an ``ipfix`` section: the plans are then those of an sFlow-only fleet)."""
        given = {
            "alpha_sample": self.alpha_sample,
            "observation_domain": self.observation_domain,
            "ipfix": self.ipfix,
        }
        return {key: value for key, value in given.items() if value is not None}

    def describe(self) -> dict[str, Any]:
        """The normalised inventory (``cosample controller check``)."""

        def sample(i: int) -> dict[str, Any]:
            if self.alpha_sample is None or not np.isfinite(self.alpha_sample[i]):
                return {}
            assert self.observation_domain is not None  # (given with ``alpha_sample``)
            domain = int(self.observation_domain[i])
            return {
                "alpha_sample": float(self.alpha_sample[i]),
                "observation_domain": domain or None,
            }

        described = {
            "name": self.name,
            "sflow": dict(self.sflow),
            "servers": [
                {
                    "name": name,
                    "capacity_pps": float(self.capacity_pps[i]),
                    "alpha": float(self.alpha[i]),
                    "beta": float(self.beta[i]),
                    **sample(i),
                    **dict(self.extras.get(name, {})),
                }
                for i, name in enumerate(self.names)
            ],
        }
        if self.ipfix is not None:
            described["ipfix"] = dict(self.ipfix)
        return described


def load_inventory(path: str | Path) -> Inventory:
    """Read, validate and resolve an inventory; one ``InventoryError`` naming the file and field."""
    path = Path(path)
    document = read_document(path, "inventory", error=InventoryError)
    return inventory_from_dict(document, base_dir=path.parent, source=str(path))


def inventory_from_dict(
    document: Any, base_dir: str | Path = ".", source: str = "inventory"
) -> Inventory:
    """Validate a parsed inventory; calibration files are resolved relative to ``base_dir``."""
    model = validate(InventoryModel, document, where=source, error=InventoryError)
    _check_references(model, source)
    base_dir = Path(base_dir)
    default = _resolve(model.cost, base_dir, f"{source}: cost")
    classes = {
        name: {**default, **_resolve(cls, base_dir, f"{source}: classes.{name}")}
        for name, cls in model.classes.items()
    }
    n = len(model.servers)
    capacity, alpha, beta = np.empty(n), np.empty(n), np.empty(n)
    alpha_sample = np.full(n, np.nan)  # NaN: sFlow only (as a description's)
    extras: dict[str, dict[str, Any]] = {}
    for i, server in enumerate(model.servers):
        at = f"{source}: servers[{i}] ({server.name!r})"
        merged = {
            **(classes[server.server_class] if server.server_class else default),
            **_resolve(server, base_dir, at),
        }
        for key, target in (("capacity_pps", capacity), ("alpha", alpha), ("beta", beta)):
            if key not in merged:
                raise problem(
                    ("servers", i, key),
                    "missing (give it, a calibration with it, a class or the top-level cost)",
                    where=source,
                    name=server.name,
                    error=InventoryError,
                )
            target[i] = merged[key]
        if merged.get("alpha_sample") is not None:
            alpha_sample[i] = merged["alpha_sample"]
        extra: dict[str, Any] = {
            key: value
            for key, value in (
                ("bridge", server.bridge),
                ("tunnel_ip", server.tunnel_ip),
                ("vm_ports", server.vm_ports),
                ("guard", server.guard),  # the operator's floors (``cosample.plan.guard``)
            )
            if value is not None
        }
        if "vm_ports" in extra:
            extra["vm_ports"] = list(extra["vm_ports"])
        if extra:
            extras[server.name] = extra
    sflow = model.sflow.model_dump(exclude_none=True) if model.sflow else {}
    names = tuple(s.name for s in model.servers)

    def fail(location, what, value=None):
        return problem(
            location, what, value, where=source, name=names[location[1]], error=InventoryError
        )

    domains = observation_domains(
        {
            "name": list(names),
            "observation_domain": [s.observation_domain for s in model.servers],
            "tunnel_ip": [s.tunnel_ip for s in model.servers],
        },
        alpha_sample,
        fail,
    )
    _check_services(model, set(names), source)
    try:
        appmon_cost = appmon_costs(model.appmon_cost, {}, base_dir, source)
    except PlannerError as exc:
        raise InventoryError(str(exc)) from None
    return Inventory(
        model.name,
        names,
        capacity,
        alpha,
        beta,
        extras,
        sflow,
        services=tuple(model.services),
        appmon_cost=appmon_cost,
        analysis_hosts=model.analysis_hosts,
        appmon_order=model.appmon_order,
        alpha_sample=None if domains is None else alpha_sample,
        observation_domain=domains,
        ipfix=None if model.ipfix is None else model.ipfix.model_dump(exclude_none=True),
    )


def _check_services(model: InventoryModel, names: set[str], source: str) -> None:
    """Each service on a known server, each address and port once."""
    seen: dict[tuple[str, int], int] = {}
    for position, service in enumerate(model.services):
        if service.server not in names:
            raise problem(
                ("services", position, "server"),
                "unknown server, not in servers",
                service.server,
                where=source,
                error=InventoryError,
            )
        key = (str(service.address), service.port)
        if key in seen:
            raise problem(
                ("services", position, "port"),
                f"the same address and port as services[{seen[key]}]",
                service.port,
                where=source,
                error=InventoryError,
            )
        seen[key] = position


def _resolve(
    coefficients: Coefficients | DescribedServer | None, base_dir: Path, at: str
) -> dict[str, float]:
    """The calibration file's values, overridden by the explicit ones."""
    if coefficients is None:
        return {}
    values: dict[str, float] = {}
    if coefficients.calibration is not None:
        try:
            values.update(read_coefficients(base_dir / coefficients.calibration, required=()))
        except CalibrationFileError as exc:
            raise InventoryError(f"{at}.calibration: {exc}") from None
    for key in ("capacity_pps", "alpha", "beta", "alpha_sample"):
        value = getattr(coefficients, key)
        if value is not None:
            values[key] = float(value)
    return values
