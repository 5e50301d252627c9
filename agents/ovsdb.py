"""The OVS side of a real host: read and change OVSDB with ``ovs-vsctl``, flows with ``ovs-ofctl``.

One ``ovs-vsctl`` invocation reads bridge, ports, interfaces and sFlow rows together (a
consistent snapshot); every write is one ``ovs-vsctl`` transaction with ``--may-exist`` /
``--if-exists``, so repeating it is harmless. Rows created here carry
``external_ids:cosample-owner=agent``; rows without that tag are never changed.

Values reach OVSDB typed, never spliced into its syntax: every string goes through
``ovsdb_string`` (a JSON string literal, which ``ovs-vsctl`` reads as exactly one string atom
whatever it contains), every integer through ``int``. A collector such as
``'127.0.0.1:1","192.0.2.66:6343'`` therefore stays one (invalid) target instead of two.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cosample.agents import commands as c
from cosample.agents.appmon_state import APPMON_KEY
from cosample.agents.errors import HostError
from cosample.agents.state import (
    COOKIE_MASK,
    COOKIE_TAG,
    OWNER_KEY,
    OWNER_VALUE,
    PEER_KEY,
    ObservedElsewhere,
    ObservedFlow,
    ObservedPort,
    ObservedSflow,
    SflowSettings,
)
from cosample.dataplane.run import CommandError, run


class OvsdbSide:
    """``ovs-vsctl``/``ovs-ofctl`` against one OVSDB remote and its run directory."""

    def __init__(self, remote: str, rundir: str, timeout_s: float = 10.0) -> None:
        self.remote = remote
        self.rundir = rundir
        self.timeout_s = timeout_s

    # observe ----------------------------------------------------------------------------------
    def observe(
        self, bridge: str, others: Iterable[str] = ()
    ) -> tuple[bool, ObservedSflow | None, tuple[ObservedPort, ...], tuple[ObservedElsewhere, ...]]:
        """(bridge exists, its sFlow row, its ports, what the agent owns on other bridges) in
        one snapshot. Other bridges are those in ``others`` (the ledger) and any bridge with a
        row marked as the agent's."""
        tables = self.tables(
            ("Bridge", "_uuid,name,ports,sflow"),
            ("Port", "_uuid,name,interfaces,external_ids"),
            ("Interface", "_uuid,name,type,ofport,ofport_request,options,external_ids"),
            ("sFlow", "_uuid,agent,external_ids,header,polling,sampling,targets"),
        )
        rows = {row["name"]: row for row in tables[0]}
        elsewhere = []
        for name in sorted(set(rows) | set(others)):
            if name == bridge:
                continue
            if name not in rows:
                elsewhere.append(ObservedElsewhere(name))  # gone: nothing left to remove
                continue
            sflow, ports = self._bridge(rows[name], tables)
            owned_ports = tuple(p.name for p in ports if p.owned)
            owned_sflow = sflow.uuid if sflow is not None and sflow.owned else None
            if name in others or owned_ports or owned_sflow:
                elsewhere.append(
                    ObservedElsewhere(
                        name, owned_sflow, owned_ports, tuple(f.cookie for f in self.flows(name))
                    )
                )
        if bridge not in rows:
            return False, None, (), tuple(elsewhere)
        sflow, ports = self._bridge(rows[bridge], tables)
        return True, sflow, ports, tuple(elsewhere)

    def _bridge(
        self, row: dict[str, Any], tables: list[list[dict[str, Any]]]
    ) -> tuple[ObservedSflow | None, tuple[ObservedPort, ...]]:
        port_ids = set(as_list(row["ports"]))
        interfaces = {i["_uuid"]: i for i in tables[2]}
        ports = []
        for port in tables[1]:
            if port["_uuid"] not in port_ids:
                continue
            iface = next(
                (
                    interfaces[u]
                    for u in as_list(port["interfaces"])
                    if u in interfaces and interfaces[u]["name"] == port["name"]
                ),
                None,
            )
            if iface is None:
                continue
            ids = iface["external_ids"]
            if APPMON_KEY in ids or APPMON_KEY in port["external_ids"]:
                continue  # an application-monitoring tunnel: agents/appmon_host.py
            # Before ovs-vswitchd assigns the port (or while it is down), trust the request.
            ofport = iface["ofport"] if isinstance(iface["ofport"], int) else None
            if (ofport is None or ofport < 1) and isinstance(iface["ofport_request"], int):
                ofport = iface["ofport_request"]
            ports.append(
                ObservedPort(
                    name=port["name"],
                    type=iface["type"],
                    ofport=ofport,
                    owned=ids.get(OWNER_KEY) == OWNER_VALUE
                    and port["external_ids"].get(OWNER_KEY) == OWNER_VALUE,
                    options=dict(iface["options"]),
                    peer=ids.get(PEER_KEY),
                )
            )
        sflow = None
        sflow_id = row["sflow"]
        for sflow_row in tables[3]:
            if sflow_row["_uuid"] == sflow_id:
                sflow = _sflow(sflow_row)
        return sflow, tuple(sorted(ports, key=lambda p: p.name))

    def flows(self, bridge: str) -> tuple[ObservedFlow, ...]:
        """The agent's flows (cookie tag) on ``bridge``."""
        output = self.ofctl(
            "--no-names",
            "dump-flows",
            self.management_target(bridge),
            f"cookie={COOKIE_TAG:#x}/{COOKIE_MASK:#x}",
        )
        return tuple(flow for line in output.splitlines() if (flow := parse_flow(line)))

    # apply ------------------------------------------------------------------------------------
    def apply(self, command: c.Command) -> None:
        tag = f"external_ids:{OWNER_KEY}={ovsdb_string(OWNER_VALUE)}"
        if isinstance(command, c.SetSflow):
            s = command.settings
            fields = [
                f"targets={ovsdb_string(s.target)}",
                f"sampling={int(s.sampling)}",
                f"header={int(s.header_bytes)}",
                f"polling={int(s.polling_s)}",
                f"agent={ovsdb_string(s.agent)}" if s.agent else "agent=[]",
            ]
            if command.uuid:
                self.vsctl("set", "sFlow", command.uuid, *fields)
            else:
                self.vsctl(
                    "--",
                    "--id=@s",
                    "create",
                    "sFlow",
                    *fields,
                    tag,
                    "--",
                    "set",
                    "Bridge",
                    command.bridge,
                    "sflow=@s",
                )
        elif isinstance(command, c.RemoveSflow):
            # The bridge's sflow column refers to the row; clearing it lets OVSDB collect it.
            self.vsctl("--if-exists", "clear", "Bridge", command.bridge, "sflow")
        elif isinstance(command, c.AddTunnelPort):
            options = [f"options:{key}={ovsdb_string(value)}" for key, value in command.options]
            self.vsctl(
                "--may-exist",
                "add-port",
                command.bridge,
                command.name,
                "--",
                "set",
                "Interface",
                command.name,
                "type=vxlan",
                *options,
                f"ofport_request={int(command.ofport)}",
                tag,
                f"external_ids:{PEER_KEY}={ovsdb_string(command.peer)}",
                "--",
                "set",
                "Port",
                command.name,
                tag,
            )
        elif isinstance(command, c.RemoveTunnelPort):
            self.vsctl("--if-exists", "del-port", command.bridge, command.name)
        elif isinstance(command, c.AddDropFlow):
            self.ofctl(
                "add-flow",
                self.management_target(command.bridge),
                f"cookie={command.cookie:#x},priority={command.priority},"
                f"in_port={command.in_port},actions=drop",
            )
        elif isinstance(command, c.RemoveDropFlow):
            self.ofctl(
                "del-flows",
                self.management_target(command.bridge),
                f"cookie={command.cookie:#x}/-1",
            )
        else:
            raise HostError(f"OVSDB side cannot apply {command!r}")

    # the tools, public for the application-monitoring side (agents/appmon_host.py) -----------
    def management_target(self, bridge: str) -> str:
        return f"unix:{self.rundir}/{bridge}.mgmt"

    def vsctl(self, *args: str) -> str:
        argv = [
            "ovs-vsctl",
            f"--db={self.remote}",
            f"--timeout={max(1, int(self.timeout_s))}",
            *args,
        ]
        try:
            return run(argv, timeout=self.timeout_s + 2).stdout
        except CommandError as exc:
            raise HostError(f"OVSDB at {self.remote}: {exc}; is ovsdb-server running?") from None

    def ofctl(self, *args: str) -> str:
        argv = ["ovs-ofctl", f"--timeout={max(1, int(self.timeout_s))}", *args]
        try:
            return run(argv, timeout=self.timeout_s + 2).stdout
        except CommandError as exc:
            raise HostError(f"OpenFlow: {exc}; is ovs-vswitchd running?") from None

    def tables(self, *tables: tuple[str, str]) -> list[list[dict[str, Any]]]:
        args = ["--format=json"]
        for table, columns in tables:
            args += ["--", f"--columns={columns}", "list", table]
        output = self.vsctl(*args)
        decoder, position = json.JSONDecoder(), 0
        results: list[list[dict[str, Any]]] = []
        while len(results) < len(tables):
            while position < len(output) and output[position].isspace():
                position += 1
            document, position = decoder.raw_decode(output, position)
            results.append(
                [
                    {name: _value(cell) for name, cell in zip(document["headings"], row)}
                    for row in document["data"]
                ]
            )
        return results


def ovsdb_string(value: str) -> str:
    """``value`` as one OVSDB string atom in ``ovs-vsctl`` syntax: a JSON string literal."""
    return json.dumps(str(value))


def parse_flow(line: str) -> ObservedFlow | None:
    """One ``ovs-ofctl dump-flows`` line, or None for headers."""
    line = line.strip()
    if not line.startswith("cookie="):
        return None
    fields, _, actions = line.partition(" actions=")
    values = {}
    for part in fields.replace(" ", "").split(","):
        key, _, value = part.partition("=")
        values[key] = value
    in_port = values.get("in_port")
    return ObservedFlow(
        cookie=int(values["cookie"], 16),
        in_port=int(in_port) if in_port and in_port.isdigit() else None,
        priority=int(values.get("priority", "32768")),
        actions=actions.strip(),
    )


def _sflow(row: dict[str, Any]) -> ObservedSflow:
    targets = as_list(row["targets"])
    settings = SflowSettings(
        target=targets[0] if len(targets) == 1 else ",".join(sorted(targets)),
        sampling=row["sampling"] if isinstance(row["sampling"], int) else 0,
        agent=row["agent"] or None,
        header_bytes=row["header"] if isinstance(row["header"], int) else -1,
        polling_s=row["polling"] if isinstance(row["polling"], int) else -1,
    )
    return ObservedSflow(row["_uuid"], row["external_ids"].get(OWNER_KEY) == OWNER_VALUE, settings)


def _value(cell: Any) -> Any:
    """OVSDB JSON cell -> Python: uuid -> str, map -> dict, set -> list (empty set -> None)."""
    if isinstance(cell, list) and len(cell) == 2 and cell[0] in ("uuid", "named-uuid"):
        return cell[1]
    if isinstance(cell, list) and len(cell) == 2 and cell[0] == "map":
        return {key: _value(value) for key, value in cell[1]}
    if isinstance(cell, list) and len(cell) == 2 and cell[0] == "set":
        items = [_value(item) for item in cell[1]]
        return items or None
    return cell


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
