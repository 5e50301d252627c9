"""The ``sample`` mechanism on a real host: IPFIX exporter rows (``ovs-vsctl``) and the sample
flow (``ovs-ofctl``), beside ``OvsdbSide``.

Values reach OVSDB typed (``ovsdb_string``, ``int``), as for the sFlow row. Rows created here
carry ``external_ids:cosample-owner=agent``; an unmarked collector set is never changed.
``Flow_Sample_Collector_Set`` is a root table: it is destroyed explicitly, and its ``IPFIX``
row, referenced by nothing else, goes with it.
"""

from __future__ import annotations

from typing import Any

from cosample.agents import sample as s
from cosample.agents.commands import Command
from cosample.agents.errors import HostError
from cosample.agents.ovsdb import OvsdbSide, as_list, ovsdb_string
from cosample.agents.state import OWNER_KEY, OWNER_VALUE
from cosample.dataplane.ipfix import SAMPLE_COLLECTOR_SET_ID


class SampleSide:
    """The agent's IPFIX exporters and sample flow on this host's OVS."""

    def __init__(self, ovs: OvsdbSide) -> None:
        self.ovs = ovs

    def observe(self) -> s.ObservedSample:
        """Collector sets that are the agent's, or that hold the agent's id, on any bridge."""
        bridges, sets, ipfixes = self.ovs.tables(
            ("Bridge", "_uuid,name"),
            ("Flow_Sample_Collector_Set", "_uuid,id,bridge,ipfix,external_ids"),
            ("IPFIX", "_uuid,targets,cache_active_timeout,cache_max_flows"),
        )
        names = {b["_uuid"]: b["name"] for b in bridges}
        rows = {i["_uuid"]: i for i in ipfixes}
        found = []
        for row in sets:
            owned = row["external_ids"].get(OWNER_KEY) == OWNER_VALUE
            if not owned and row["id"] != SAMPLE_COLLECTOR_SET_ID:
                continue
            ipfix_uuid = row["ipfix"] if isinstance(row["ipfix"], str) else None
            found.append(
                s.ObservedExporter(
                    bridge=names.get(row["bridge"], ""),
                    uuid=row["_uuid"],
                    set_id=row["id"],
                    owned=owned,
                    ipfix_uuid=ipfix_uuid,
                    ipfix=_ipfix(rows[ipfix_uuid]) if ipfix_uuid in rows else None,
                )
            )
        return s.ObservedSample(tuple(sorted(found, key=lambda e: (e.bridge, e.uuid))))

    def apply(self, command: Command) -> None:
        if isinstance(command, s.SetSampleExporter):
            fields = _ipfix_fields(command.ipfix)
            if command.ipfix_uuid:
                self.ovs.vsctl("set", "IPFIX", command.ipfix_uuid, *fields)
                return
            tag = f"external_ids:{OWNER_KEY}={ovsdb_string(OWNER_VALUE)}"
            self.ovs.vsctl(
                "--",
                "--id=@br",
                "get",
                "Bridge",
                command.bridge,
                "--",
                "--id=@i",
                "create",
                "IPFIX",
                *fields,
                tag,
                "--",
                "create",
                "Flow_Sample_Collector_Set",
                f"id={SAMPLE_COLLECTOR_SET_ID}",
                "bridge=@br",
                "ipfix=@i",
                tag,
            )
        elif isinstance(command, s.RemoveSampleExporter):
            self.ovs.vsctl("--if-exists", "destroy", "Flow_Sample_Collector_Set", command.uuid)
        elif isinstance(command, s.SetSampleFlow):
            self.ovs.ofctl("add-flow", self.ovs.management_target(command.bridge), command.flow())
        elif isinstance(command, s.RemoveSampleFlow):
            self.ovs.ofctl(
                "del-flows",
                self.ovs.management_target(command.bridge),
                f"cookie={s.SAMPLE_COOKIE:#x}/-1",
            )
        else:
            raise HostError(f"sample side cannot apply {command!r}")


def _ipfix_fields(ipfix: s.IpfixSettings) -> list[str]:
    return [
        f"targets={ovsdb_string(ipfix.target)}",
        f"cache_active_timeout={int(ipfix.cache_active_timeout_s)}",
        f"cache_max_flows={int(ipfix.cache_max_flows)}",
    ]


def _ipfix(row: dict[str, Any]) -> s.IpfixSettings:
    targets = as_list(row["targets"])
    return s.IpfixSettings(
        target=targets[0] if len(targets) == 1 else ",".join(sorted(targets)),
        cache_active_timeout_s=row["cache_active_timeout"]
        if isinstance(row["cache_active_timeout"], int)
        else 0,
        cache_max_flows=row["cache_max_flows"] if isinstance(row["cache_max_flows"], int) else 0,
    )
