"""The application-monitoring side of a real host: VXLAN devices (``ip``), their OVS ports,
Mirrors (``ovs-vsctl``) and flows (``ovs-ofctl``).

Reads in one ``ovs-vsctl`` snapshot; writes are idempotent (``--may-exist``/``--if-exists``;
flows of one cookie replaced in one OpenFlow bundle). Before a truncating flow or Mirror is
written, the datapath's features are read (``ovs-appctl dpif/show-dp-features``): without the
truncate action OVS would copy whole packets, so the command is refused with a ``HostError``
and the plan is rejected (docs/appmon-mechanisms.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosample.agents import appmon_reconcile as a
from cosample.agents.appmon_state import (
    APPMON_ALIAS,
    APPMON_COOKIE_MASK,
    APPMON_COOKIE_TAG,
    APPMON_KEY,
    ISOLATION_VLAN,
    TUNNEL_MTU,
    ObservedAppmon,
    ObservedAppmonDevice,
    ObservedAppmonMirror,
    ObservedAppmonPort,
)
from cosample.agents.commands import Command
from cosample.agents.errors import HostError
from cosample.agents.ledger import Ledger
from cosample.agents.linuxnet import LinuxSide
from cosample.agents.ovsdb import OvsdbSide, as_list, ovsdb_string
from cosample.agents.state import OWNER_KEY, OWNER_VALUE
from cosample.dataplane.run import run

LEDGER_KIND = "appmon_devices"


class AppmonSide:
    """Application monitoring on this host, beside ``OvsdbSide`` and ``LinuxSide``."""

    def __init__(self, ovs: OvsdbSide, ledger: Ledger, timeout_s: float = 10.0) -> None:
        self.ovs = ovs
        self.ledger = ledger
        self.linux = LinuxSide("", ledger, timeout_s)  # for its ip helpers only
        self.timeout_s = timeout_s

    # observe ------------------------------------------------------------------------------------
    def observe(self, bridge: str) -> ObservedAppmon:
        links = self.linux.ip_json(["ip", "-j", "-d", "link", "show"])
        devices = self._devices(links)
        mine = {d.name for d in devices}
        bridges, ports, ifaces, mirrors = self.ovs.tables(
            ("Bridge", "_uuid,name,ports,mirrors"),
            ("Port", "_uuid,name,interfaces,external_ids,tag"),
            ("Interface", "_uuid,name,ofport,ofport_request,external_ids"),
            (
                "Mirror",
                "_uuid,name,external_ids,select_src_port,select_dst_port,output_port,snaplen",
            ),
        )
        port_names = {p["_uuid"]: p["name"] for p in ports}
        port_bridge = {uuid: b["name"] for b in bridges for uuid in as_list(b["ports"])}
        iface_by_name = {i["name"]: i for i in ifaces}
        owned_ports, used = [], set()
        for port in ports:
            iface = iface_by_name.get(port["name"], {})
            ofport = _ofport(iface)
            if port_bridge.get(port["_uuid"]) == bridge and ofport:
                used.add(ofport)
            if _owned(port["external_ids"]) and port["_uuid"] in port_bridge:
                owned_ports.append(
                    ObservedAppmonPort(
                        port_bridge[port["_uuid"]],
                        port["name"],
                        port["external_ids"][APPMON_KEY],
                        ofport,
                        port["tag"] if isinstance(port["tag"], int) else None,
                    )
                )
        mirror_bridge = {uuid: b["name"] for b in bridges for uuid in as_list(b["mirrors"])}
        owned_mirrors = tuple(
            ObservedAppmonMirror(
                mirror_bridge[m["_uuid"]],
                m["_uuid"],
                m["name"],
                frozenset(port_names.get(u, u) for u in as_list(m["select_src_port"])),
                frozenset(port_names.get(u, u) for u in as_list(m["select_dst_port"])),
                port_names.get(m["output_port"]) if m["output_port"] else None,
                m["snaplen"] if isinstance(m["snaplen"], int) and m["snaplen"] else None,
            )
            for m in mirrors
            if _owned(m["external_ids"]) and m["_uuid"] in mirror_bridge
        )
        flow_bridges = {bridge} | {p.bridge for p in owned_ports} | self.ledger.names("bridges")
        flows: dict[tuple[str, int], frozenset[str]] = {}
        for name in sorted(flow_bridges & {b["name"] for b in bridges}):
            for cookie, text in self._flows(name):
                flows[(name, cookie)] = flows.get((name, cookie), frozenset()) | {text}
        return ObservedAppmon(
            devices=devices,
            ports=tuple(owned_ports),
            mirrors=owned_mirrors,
            flows=flows,
            used_ofports=frozenset(used),
            foreign_links=frozenset(link["ifname"] for link in links) - mine,
        )

    def _devices(self, links: list[dict[str, Any]]) -> tuple[ObservedAppmonDevice, ...]:
        listed = self.ledger.names(LEDGER_KIND)
        found = []
        for link in links:
            info = link.get("linkinfo", {})
            name, alias = link["ifname"], link.get("ifalias", "")
            if info.get("info_kind") != "vxlan" or not (
                alias.startswith(APPMON_ALIAS) or (not alias and name in listed)
            ):
                continue
            data = info.get("info_data", {})
            found.append(
                ObservedAppmonDevice(
                    name,
                    data.get("remote") or data.get("remote6"),
                    data.get("id"),
                    data.get("local") or data.get("local6"),
                    data.get("port"),
                    "UP" in link.get("flags", []),
                )
            )
        return tuple(sorted(found, key=lambda d: d.name))

    def _flows(self, bridge: str) -> list[tuple[int, str]]:
        output = self.ovs.ofctl(
            "--no-stats",
            "--no-names",
            "dump-flows",
            self.ovs.management_target(bridge),
            f"cookie={APPMON_COOKIE_TAG:#x}/{APPMON_COOKIE_MASK:#x}",
        )
        out = []
        for line in output.splitlines():
            line = line.strip()
            if not line.startswith("cookie="):
                continue
            cookie, _, rest = line.partition(", ")
            out.append((int(cookie.removeprefix("cookie="), 16), rest.strip()))
        return out

    # apply --------------------------------------------------------------------------------------
    def apply(self, command: Command) -> None:
        tag = [f"external_ids:{OWNER_KEY}={ovsdb_string(OWNER_VALUE)}"]
        if isinstance(command, a.AddAppmonDevice):
            self._add_device(command)
        elif isinstance(command, a.RemoveAppmonDevice):
            if self.linux.exists(command.name):
                if command.name not in {
                    d.name
                    for d in self._devices(self.linux.ip_json(["ip", "-j", "-d", "link", "show"]))
                }:
                    raise HostError(f"interface {command.name} is not the agent's; not removed")
                self.linux.output(["ip", "link", "del", command.name])
            self.ledger.discard(LEDGER_KIND, command.name)
        elif isinstance(command, a.AddAppmonPort):
            self.ledger.add("bridges", command.bridge)
            peer = f"external_ids:{APPMON_KEY}={ovsdb_string(command.peer)}"
            self.ovs.vsctl(
                "--may-exist",
                "add-port",
                command.bridge,
                command.name,
                "--",
                "set",
                "Interface",
                command.name,
                f"ofport_request={int(command.ofport)}",
                *tag,
                peer,
                "--",
                "set",
                "Port",
                command.name,
                f"tag={ISOLATION_VLAN}",
                *tag,
                peer,
            )
        elif isinstance(command, a.SetAppmonPortTag):
            value = f"tag={ISOLATION_VLAN}" if command.isolated else "tag=[]"
            self.ovs.vsctl("--if-exists", "set", "Port", command.name, value)
        elif isinstance(command, a.RemoveAppmonPort):
            self.ovs.vsctl("--if-exists", "del-port", command.bridge, command.name)
        elif isinstance(command, a.SetAppmonFlows):
            if command.truncates:
                self._require_truncate(command.bridge)
            lines = [f"delete cookie={command.cookie:#x}/-1"]
            lines += [
                f"add cookie={command.cookie:#x},{flow.replace(' actions=', ',actions=')}"
                for flow in command.flows
            ]
            argv = [
                "ovs-ofctl",
                f"--timeout={max(1, int(self.timeout_s))}",
                "--bundle",
                "add-flows",
                self.ovs.management_target(command.bridge),
                "-",
            ]
            result = run(
                argv, timeout=self.timeout_s + 2, check=False, input_text="\n".join(lines) + "\n"
            )
            if result.returncode != 0:
                raise HostError(f"OpenFlow: {' '.join(argv)}: {result.stderr.strip()}")
        elif isinstance(command, a.RemoveAppmonFlows):
            self.ovs.ofctl(
                "del-flows",
                self.ovs.management_target(command.bridge),
                f"cookie={command.cookie:#x}/-1",
            )
        elif isinstance(command, a.SetAppmonMirror):
            self._set_mirror(command, tag)
        elif isinstance(command, a.RemoveAppmonMirror):
            self.ovs.vsctl(
                "--if-exists", "remove", "Bridge", command.bridge, "mirrors", command.uuid
            )
            self._purge()
        else:
            raise HostError(f"appmon side cannot apply {command!r}")

    def _add_device(self, command: a.AddAppmonDevice) -> None:
        d = command.device
        exists = self.linux.exists(d.name)
        mine = {
            x.name for x in self._devices(self.linux.ip_json(["ip", "-j", "-d", "link", "show"]))
        }
        if exists and d.name not in mine:
            raise HostError(f"interface {d.name} exists and is not the agent's; left alone")
        if exists and command.replace:
            self.linux.output(["ip", "link", "del", d.name])
            exists = False
        if not exists:
            self.ledger.add(LEDGER_KIND, d.name)  # before it exists: never orphaned
            try:
                self.linux.output(
                    [
                        "ip",
                        "link",
                        "add",
                        d.name,
                        "type",
                        "vxlan",
                        "id",
                        d.vni,
                        "remote",
                        d.remote_ip,
                        "local",
                        d.local_ip,
                        "dstport",
                        d.dstport,
                    ]
                )
            except HostError:
                self.ledger.discard(LEDGER_KIND, d.name)
                raise
        # no IPv6 address: the kernel would send its own neighbour discovery into the tunnel
        argv = [
            "ip",
            "link",
            "set",
            d.name,
            "addrgenmode",
            "none",
            "alias",
            f"{APPMON_ALIAS} peer={d.peer}",
        ]
        if d.attach:
            argv += ["mtu", str(TUNNEL_MTU)]
        self.linux.output(argv + ["up"])

    def _set_mirror(self, command: a.SetAppmonMirror, tag: list[str]) -> None:
        if command.snaplen:
            self._require_truncate(command.bridge)
        ports = self.ovs.tables(("Bridge", "name,ports"), ("Port", "_uuid,name"))
        on_bridge = {
            p["name"]
            for p in ports[1]
            if any(
                b["name"] == command.bridge and p["_uuid"] in as_list(b["ports"]) for b in ports[0]
            )
        }
        missing = [name for name in command.ports if name not in on_bridge]
        if missing:
            raise HostError(
                f"port mirror: {', '.join(missing)} not a port of bridge "
                f"{command.bridge}; the plan's appmon interface must be the VM's "
                f"port on this bridge"
            )
        underlay = self.linux.underlay([command.remote_ip]) if command.remote_ip else set()
        if underlay & set(command.ports):
            raise HostError(
                f"port mirror: {', '.join(sorted(underlay & set(command.ports)))} "
                f"carries the route to the analysis host {command.remote_ip}; "
                f"mirroring it would mirror the tunnel itself; refused"
            )
        ids = [f"@p{k}" for k in range(len(command.ports))]
        argv: list[str] = []
        for name, ref in zip(command.ports, ids):
            argv += ["--", f"--id={ref}", "get", "Port", name]
        argv += ["--", "--id=@o", "get", "Port", command.output]
        fields = [
            f"select_src_port={','.join(ids)}",
            f"select_dst_port={','.join(ids)}",
            "output_port=@o",
            f"snaplen={int(command.snaplen)}" if command.snaplen else "snaplen=[]",
        ]
        if command.uuid:
            argv += ["--", "set", "Mirror", command.uuid, *fields]
        else:
            argv += [
                "--",
                "--id=@m",
                "create",
                "Mirror",
                f"name={ovsdb_string(command.name)}",
                *fields,
                *tag,
                f"external_ids:{APPMON_KEY}={ovsdb_string(command.peer)}",
                "--",
                "add",
                "Bridge",
                command.bridge,
                "mirrors",
                "@m",
            ]
        self.ovs.vsctl(*argv)
        self._purge()

    def _purge(self) -> None:
        """Drop the datapath's cached flows after a Mirror change: OVS 3.1 did not revalidate
        them, and kept copying whole frames for seconds after ``snaplen`` was set on a Mirror
        (docs/appmon-mechanisms.md). They are rebuilt from the next packets."""
        self.ovs_appctl("revalidator/purge")

    def _require_truncate(self, bridge: str) -> None:
        """A ``HostError`` unless this bridge's datapath has OVS's truncate action."""
        features = self.ovs_appctl("dpif/show-dp-features", bridge)
        if features is None:
            return  # no control socket found: OVS checks at translation (logs, copies whole)
        line = next((x for x in features.splitlines() if x.startswith("Truncate action")), "")
        if not line.endswith("Yes"):
            raise HostError(
                f"bridge {bridge}: the datapath has no truncate action "
                f"({line or 'not reported'}); truncated application mirrors "
                f"(truncate_bytes) cannot work here; refused"
            )

    def ovs_appctl(self, *args: str) -> str | None:
        """``ovs-appctl`` to ovs-vswitchd in the run directory, or None if no socket is found."""
        rundir = Path(self.ovs.rundir)
        target = rundir / "ovs-vswitchd.ctl"
        if not target.exists():
            try:
                pid = (rundir / "ovs-vswitchd.pid").read_text().strip()
            except OSError:
                return None
            target = rundir / f"ovs-vswitchd.{pid}.ctl"
        if not target.exists():
            return None
        return self.linux.output(["ovs-appctl", "-t", str(target), *args])


def _owned(ids: dict[str, str]) -> bool:
    return ids.get(OWNER_KEY) == OWNER_VALUE and APPMON_KEY in ids


def _ofport(iface: dict[str, Any]) -> int | None:
    ofport = iface.get("ofport")
    if isinstance(ofport, int) and ofport > 0:
        return ofport
    request = iface.get("ofport_request")
    return request if isinstance(request, int) and request > 0 else None
