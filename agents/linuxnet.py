"""The Linux side of a real host: mirror VXLAN devices (``ip``) and tc mirror filters (``tc``).

Mirror devices are the agent's own when their ``ifalias`` starts with ``cosample-owner=agent``
or, should a run have died between ``ip link add`` and tagging, when their name carries the
agent's device prefix and no alias. tc filters are the agent's own by priority
(``PRIO_BASE`` .. ``+PRIO_COUNT`` on a VM port's ingress hook); they are written with
``tc filter replace`` at a fixed prio/handle, so writing twice is harmless. A ``clsact`` qdisc
has no tag of its own: the agent notes in a ledger file (state dir) the interfaces where it added
one, written before the qdisc is added, and removes only those, and only when no filter of
anyone else remains on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cosample.agents import commands as c
from cosample.agents.errors import HostError
from cosample.files import write_bytes_atomic
from cosample.agents.state import (ALIAS_PREFIX, FILTER_HANDLE, PRIO_BASE, PRIO_COUNT,
                                   ObservedDevice, ObservedFilter, ObservedLink)
from cosample.dataplane.run import CommandError, run
from cosample.dataplane.tcmirror import (clsact_add_argv, clsact_delete_argv, filter_delete_argv,
                                   mirror_filter_argv)


class LinuxSide:
    """``ip``/``tc`` in the agent's network namespace."""

    def __init__(self, device_prefix: str, ledger: str | Path, timeout_s: float = 10.0) -> None:
        self.device_prefix = device_prefix
        self.ledger = Path(ledger)
        self.timeout_s = timeout_s

    # observe ----------------------------------------------------------------------------------
    def links(self, names: Iterable[str]) -> dict[str, ObservedLink]:
        """The given interfaces, and those where the agent added clsact, that exist: their
        clsact state and the agent's filters (so filters on a former VM port are found too)."""
        present = {link["ifname"] for link in self._json(["ip", "-j", "link", "show"])}
        owned = self._owned_clsacts()
        out = {}
        for name in sorted((set(names) | owned) & present):
            qdiscs = self._json(["tc", "-j", "qdisc", "show", "dev", name], missing_ok=True)
            clsact = any(q.get("kind") == "clsact" for q in qdiscs)
            filters, foreign = self._filters(name) if clsact else ((), 0)
            out[name] = ObservedLink(name, clsact, filters, clsact_owned=name in owned,
                                     foreign_filters=foreign)
        return out

    def devices(self) -> tuple[ObservedDevice, ...]:
        """The agent's mirror VXLAN devices."""
        found = []
        for link in self._json(["ip", "-j", "-d", "link", "show", "type", "vxlan"]):
            name, alias = link["ifname"], link.get("ifalias", "")
            if not (alias.startswith(ALIAS_PREFIX) or
                    (not alias and name.startswith(f"{self.device_prefix}-"))):
                continue
            data = link.get("linkinfo", {}).get("info_data", {})
            found.append(ObservedDevice(
                name=name, remote_ip=data.get("remote"), vni=data.get("id"),
                local_ip=data.get("local"), dstport=data.get("port"),
                up="UP" in link.get("flags", [])))
        return tuple(sorted(found, key=lambda d: d.name))

    # apply ------------------------------------------------------------------------------------
    def apply(self, command: c.Command) -> None:
        if isinstance(command, c.AddMirrorDevice):
            exists = self._exists(command.name)
            if exists and command.replace:
                self._run(["ip", "link", "del", command.name])
                exists = False
            if not exists:
                argv = ["ip", "link", "add", command.name, "type", "vxlan", "id", command.vni,
                        "remote", command.remote_ip, "dstport", command.dstport]
                if command.local_ip:
                    argv += ["local", command.local_ip]
                self._run(argv)
            self._run(["ip", "link", "set", command.name, "alias",
                       f"{ALIAS_PREFIX} peer={command.peer}", "up"])
        elif isinstance(command, c.RemoveMirrorDevice):
            if self._exists(command.name):
                self._run(["ip", "link", "del", command.name])
        elif isinstance(command, c.AddClsact):
            qdiscs = self._json(["tc", "-j", "qdisc", "show", "dev", command.device])
            if not any(q.get("kind") == "clsact" for q in qdiscs):
                self._write_ledger(self._owned_clsacts() | {command.device})
                self._run(clsact_add_argv(command.device))
        elif isinstance(command, c.RemoveClsact):
            if command.device in self._owned_clsacts():
                result = run(clsact_delete_argv(command.device), timeout=self.timeout_s,
                             check=False)
                if result.returncode != 0 and "Cannot find" not in result.stderr \
                        and "Invalid handle" not in result.stderr:
                    raise HostError(f"tc: removing clsact from {command.device}: "
                                    f"{result.stderr.strip()}")
                self._write_ledger(self._owned_clsacts() - {command.device})
        elif isinstance(command, c.SetMirrorFilter):
            self._run(mirror_filter_argv(command.device, command.target, command.probability,
                                         prio=command.prio, handle=FILTER_HANDLE))
        elif isinstance(command, c.RemoveMirrorFilter):
            result = run(filter_delete_argv(command.device, prio=command.prio,
                                            handle=FILTER_HANDLE),
                         timeout=self.timeout_s, check=False)
            if result.returncode != 0 and "not found" not in result.stderr + result.stdout \
                    and "Cannot find device" not in result.stderr:
                raise HostError(f"tc: removing filter prio {command.prio} on {command.device}: "
                                f"{result.stderr.strip()}")
        else:
            raise HostError(f"Linux side cannot apply {command!r}")

    # helpers ----------------------------------------------------------------------------------
    def _filters(self, name: str) -> tuple[tuple[ObservedFilter, ...], int]:
        """The agent's filters on the ingress hook, and how many others there are (both hooks)."""
        found, foreign = [], 0
        for hook in ("ingress", "egress"):
            for entry in self._json(["tc", "-j", "filter", "show", "dev", name, hook],
                                    missing_ok=True):
                prio, options = entry.get("pref"), entry.get("options")
                if options is None:
                    continue  # the per-prio header line tc prints before the filter itself
                if hook == "ingress" and PRIO_BASE <= prio < PRIO_BASE + PRIO_COUNT:
                    found.append(ObservedFilter(prio, _bytecode(options), _mirred_target(options)))
                else:
                    foreign += 1
        return tuple(sorted(found, key=lambda f: f.prio)), foreign

    def _owned_clsacts(self) -> set[str]:
        try:
            return set(json.loads(self.ledger.read_text()))
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as exc:
            raise HostError(f"{self.ledger}: unreadable clsact ledger ({exc})") from None

    def _write_ledger(self, names: set[str]) -> None:
        write_bytes_atomic(self.ledger, (json.dumps(sorted(names)) + "\n").encode(), parents=True)

    def _exists(self, name: str) -> bool:
        return run(["ip", "link", "show", "dev", name], timeout=self.timeout_s,
                   check=False).returncode == 0

    def _run(self, argv: list) -> str:
        try:
            return run(argv, timeout=self.timeout_s).stdout
        except CommandError as exc:
            raise HostError(str(exc)) from None

    def _json(self, argv: list[str], missing_ok: bool = False) -> list[dict[str, Any]]:
        result = run(argv, timeout=self.timeout_s, check=False)
        if result.returncode != 0:
            if missing_ok:
                return []  # the interface went away between two reads
            raise HostError(f"{' '.join(argv)}: {result.stderr.strip()}")
        text = result.stdout.strip()
        return json.loads(text) if text else []


def _bytecode(options: dict[str, Any]) -> str:
    """The ``tc`` bytecode string of a bpf filter, as ``bpf_random_bytecode`` writes it."""
    code = options.get("bytecode", {})
    insns = code.get("insns", [])
    parts = [str(code.get("length", len(insns)))]
    parts += [f"{i['code']} {i['jt']} {i['jf']} {i['k']}" for i in insns]
    return ",".join(parts)


def _mirred_target(options: dict[str, Any]) -> str | None:
    for action in options.get("actions", []):
        if action.get("kind") == "mirred":
            target = action.get("to_dev")
            return None if target in (None, "*") else target
    return None
