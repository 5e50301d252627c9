"""The collector's address inventory: which VM addresses live on which server, and agent addresses.

Optional input of the collector (``--inventory FILE``, JSON or YAML, ``format:
cosample.addresses``; distinct from the controller's fleet inventory, which has no tenant
addresses). With it the collector
builds the traffic matrix ``V[src][dst]`` (the source is the server a sample is attributed to,
the destination the server holding the packet's destination address) and knows agents whose
sFlow address is not the server's ``tunnel_ip``; its ``agent_ip`` entries are also what lets the
collector attribute samples before any plan exists (``attribution.planless``). Declared once
as a pydantic model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from cosample.collector.errors import CollectorError
from cosample.validation import IpAddress, Strict, read_document, validate

INVENTORY_FORMAT = "cosample.addresses"


def _mac(value: str) -> str:
    parts = value.lower().replace("-", ":").split(":")
    if len(parts) != 6 or not all(
        len(p) == 2 and all(c in "0123456789abcdef" for c in p) for p in parts
    ):
        raise ValueError("expected a MAC address like 02:00:00:00:00:01")
    return ":".join(parts)


MacAddress = Annotated[str, AfterValidator(_mac)]


class ServerEntry(Strict):
    """One server: its sFlow agent address (when not its tunnel IP) and its VMs' addresses."""

    agent_ip: IpAddress | None = None
    vm_addresses: list[IpAddress] = Field(default_factory=list)
    vm_macs: list[MacAddress] = Field(default_factory=list)


class Inventory(Strict):
    format: Annotated[str, Field(pattern=f"^{INVENTORY_FORMAT}$")] = INVENTORY_FORMAT
    format_version: Annotated[int, Field(ge=1, le=1)] = 1
    servers: dict[str, ServerEntry]

    def server_of_address(self) -> dict[str, str]:
        """VM IP or MAC -> server; an address claimed by two servers is an error."""
        out: dict[str, str] = {}
        for name, entry in self.servers.items():
            for address in [*entry.vm_addresses, *entry.vm_macs]:
                if out.setdefault(address, name) != name:
                    raise CollectorError(
                        f"inventory: servers.{name}: address {address} is "
                        f"also listed under {out[address]}"
                    )
        return out

    def server_of_agent(self) -> dict[str, str]:
        """sFlow agent address -> server (servers with an ``agent_ip``); an address given to two
        servers is an error."""
        out: dict[str, str] = {}
        for name, entry in self.servers.items():
            if entry.agent_ip and out.setdefault(entry.agent_ip, name) != name:
                raise CollectorError(
                    f"inventory: servers.{name}: agent_ip {entry.agent_ip} is "
                    f"also the agent of {out[entry.agent_ip]}"
                )
        return out


def read_inventory(path: str | Path) -> Inventory:
    """Load and validate an inventory file (``.yaml``/``.yml`` as YAML, anything else JSON)."""
    data = read_document(path, "inventory", error=CollectorError)
    inventory = validate(Inventory, data, where=str(path), error=CollectorError)
    inventory.server_of_address()
    inventory.server_of_agent()
    return inventory
