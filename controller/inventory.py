"""The inventory: what the controller knows about the fleet before measuring anything.

Servers, their bridges, tunnel addresses and VM ports, and each server's capacity and cost
coefficients, given directly or through a calibration JSON (``cosample fit -o``) per server or
per class of identical servers. No traffic numbers: those are measured every cycle. Declared
once as pydantic models (``cosample.validation``); format in docs/formats.md.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import AfterValidator, Field, model_validator

from cosample.controller.errors import InventoryError
from cosample.validation import InterfaceName, Strict, validate

FORMAT = "cosample.inventory"

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s/]+$")]


def _ip(text: str) -> str:
    return str(ipaddress.ip_address(text))


IpAddress = Annotated[str, AfterValidator(_ip)]


class Coefficients(Strict):
    """What a server costs: capacity and coefficients, directly or from a calibration file."""

    calibration: str | None = None
    capacity_pps: NonNegative | None = None
    alpha: Positive | None = None
    beta: Positive | None = None


class ServerClass(Coefficients):
    """Coefficients shared by identical servers (one calibration per hardware class)."""


class Server(Coefficients):
    """One OVS server; its own fields override its class's."""

    name: Name
    server_class: Name | None = Field(default=None, alias="class")
    bridge: InterfaceName | None = None
    tunnel_ip: IpAddress | None = None
    vm_ports: list[InterfaceName] | None = None


class Sflow(Strict):
    """Copied into every plan: where the bridges send sFlow, and how."""

    collector: str | None = None
    agent: str | None = None
    header_bytes: Annotated[int, Field(ge=0)] | None = None
    polling_s: Annotated[int, Field(ge=0)] | None = None


class InventoryModel(Strict):
    """The inventory file (JSON or YAML)."""

    format: Literal["cosample.inventory"] = FORMAT
    format_version: Literal[1] = 1
    name: Name = "datacentre"
    cost: Coefficients | None = None
    classes: dict[Name, ServerClass] = {}
    servers: list[Server] = Field(min_length=1)
    sflow: Sflow | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "InventoryModel":
        seen: dict[str, int] = {}
        tunnels: dict[str, str] = {}
        for position, server in enumerate(self.servers):
            if server.name in seen:
                raise ValueError(f"servers[{position}].name: duplicate server {server.name!r} "
                                 f"(also servers[{seen[server.name]}])")
            seen[server.name] = position
            if server.server_class is not None and server.server_class not in self.classes:
                raise ValueError(f"servers[{position}].class: unknown class "
                                 f"{server.server_class!r} (classes: {sorted(self.classes)})")
            if server.tunnel_ip is not None:
                if server.tunnel_ip in tunnels:
                    raise ValueError(f"servers[{position}].tunnel_ip: {server.tunnel_ip} is also "
                                     f"{tunnels[server.tunnel_ip]!r}'s")
                tunnels[server.tunnel_ip] = server.name
        return self


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

    def __post_init__(self) -> None:
        if not self.index:
            object.__setattr__(self, "index", {name: i for i, name in enumerate(self.names)})

    @property
    def size(self) -> int:
        return len(self.names)

    def describe(self) -> dict[str, Any]:
        """The normalised inventory (``cosample controller check``)."""
        return {"name": self.name, "sflow": dict(self.sflow), "servers": [
            {"name": name, "capacity_pps": float(self.capacity_pps[i]),
             "alpha": float(self.alpha[i]), "beta": float(self.beta[i]),
             **dict(self.extras.get(name, {}))} for i, name in enumerate(self.names)]}


def load_inventory(path: str | Path) -> Inventory:
    """Read, validate and resolve an inventory; one ``InventoryError`` naming the file and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"{path}: cannot read inventory: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        document = (yaml.safe_load(text) if path.suffix.lower() in (".yaml", ".yml")
                    else json.loads(text))
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InventoryError(f"{path}: not valid {'YAML' if path.suffix.lower() in ('.yaml', '.yml') else 'JSON'}: "
                             f"{str(exc).splitlines()[0]}") from None
    return inventory_from_dict(document, base_dir=path.parent, source=str(path))


def inventory_from_dict(document: Any, base_dir: str | Path = ".",
                        source: str = "inventory") -> Inventory:
    """Validate a parsed inventory; calibration files are resolved relative to ``base_dir``."""
    model = validate(InventoryModel, document, where=source, error=InventoryError)
    base_dir = Path(base_dir)
    default = _resolve(model.cost, base_dir, f"{source}: cost")
    classes = {name: {**default, **_resolve(cls, base_dir, f"{source}: classes.{name}")}
               for name, cls in model.classes.items()}
    n = len(model.servers)
    capacity, alpha, beta = np.empty(n), np.empty(n), np.empty(n)
    extras: dict[str, dict[str, Any]] = {}
    for i, server in enumerate(model.servers):
        at = f"{source}: servers[{i}] ({server.name})"
        merged = {**(classes[server.server_class] if server.server_class else default),
                  **_resolve(server, base_dir, at)}
        for key, target in (("capacity_pps", capacity), ("alpha", alpha), ("beta", beta)):
            if key not in merged:
                raise InventoryError(f"{at}.{key}: missing (give it, a calibration with it, a "
                                     f"class or the top-level cost)")
            target[i] = merged[key]
        extra = {key: value for key, value in (("bridge", server.bridge),
                                                ("tunnel_ip", server.tunnel_ip),
                                                ("vm_ports", server.vm_ports)) if value is not None}
        if "vm_ports" in extra:
            extra["vm_ports"] = list(extra["vm_ports"])
        if extra:
            extras[server.name] = extra
    sflow = model.sflow.model_dump(exclude_none=True) if model.sflow else {}
    return Inventory(model.name, tuple(s.name for s in model.servers), capacity, alpha, beta,
                     extras, sflow)


def _resolve(coefficients: Coefficients | None, base_dir: Path, at: str) -> dict[str, float]:
    """The calibration file's values, overridden by the explicit ones."""
    if coefficients is None:
        return {}
    values: dict[str, float] = {}
    if coefficients.calibration is not None:
        from cosample.costmodel.coefficients import CalibrationFileError, read_coefficients

        try:
            values.update(read_coefficients(base_dir / coefficients.calibration, required=()))
        except CalibrationFileError as exc:
            raise InventoryError(f"{at}.calibration: {exc}") from None
    for key in ("capacity_pps", "alpha", "beta"):
        value = getattr(coefficients, key)
        if value is not None:
            values[key] = float(value)
    return values
