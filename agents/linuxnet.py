"""The Linux side of a real host: mirror VXLAN devices (``ip``) and tc mirror filters (``tc``).

Ownership is by mark or ledger (``ledger.Ledger``), never by name alone: a mirror device is the
agent's when its ``ifalias`` starts with ``cosample-owner=agent`` or the ledger lists it (it is
entered there before ``ip link add``, so a run killed before tagging still finds it); a tc filter
is the agent's when it sits in the agent's prio range *and* its mirred action carries the
agent's cookie; a ``clsact`` qdisc is the agent's when the ledger lists it (entered before it is
added). A foreign filter inside the agent's prio range, or a foreign ``ingress`` qdisc (which
excludes ``clsact``), makes that interface a conflict: reported, and left alone. Filters are
written with ``tc filter replace`` at a fixed prio/handle, so writing twice is harmless.

The kernel application mirror's filters (``kernel_mirror``) are the agent's when they sit in
their own prio range (``tcmirror.KERNEL_MIRROR_PRIO_BASE``, either hook) *and* their cookie
starts with ``KERNEL_MIRROR_COOKIE_TAG``; the interfaces they were written on are in the ledger
(``kernel_mirrors``) before the first one is written, so they are found again after the plan
drops them. Their bytecode is the sniffer's filter compiled here by ``tcpdump -y EN10MB -ddd``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cosample.agents import commands as c
from cosample.agents.appmon_reconcile import RemoveKernelMirrorFilter, SetKernelMirrorFilter
from cosample.agents.errors import HostError
from cosample.agents.ledger import Ledger
from cosample.agents.state import (
    ALIAS_PREFIX,
    FILTER_COOKIE,
    FILTER_HANDLE,
    PRIO_BASE,
    PRIO_COUNT,
    ObservedDevice,
    ObservedFilter,
    ObservedKernelFilter,
    ObservedLink,
)
from cosample.dataplane.run import CommandError, run
from cosample.dataplane.tcmirror import (
    KERNEL_MIRROR_COOKIE_TAG,
    KERNEL_MIRROR_HANDLE,
    KERNEL_MIRROR_PRIO_BASE,
    KERNEL_MIRROR_PRIO_COUNT,
    TcMirrorError,
    bytecode_from_ddd,
    clsact_add_argv,
    clsact_delete_argv,
    filter_delete_argv,
    mirror_filter_argv,
    selective_filter_argv,
)

KERNEL_LEDGER = "kernel_mirrors"


class LinuxSide:
    """``ip``/``tc`` in the agent's network namespace."""

    def __init__(self, device_prefix: str, ledger: Ledger, timeout_s: float = 10.0) -> None:
        self.device_prefix = device_prefix
        self.ledger = ledger
        self.timeout_s = timeout_s

    # observe ----------------------------------------------------------------------------------
    def observe(
        self, names: Iterable[str], remotes: Iterable[str] = ()
    ) -> tuple[dict[str, ObservedLink], tuple[ObservedDevice, ...], frozenset[str], frozenset[str]]:
        """(links, owned devices, names of other interfaces, underlay interfaces)."""
        present = {link["ifname"] for link in self.ip_json(["ip", "-j", "link", "show"])}
        devices = self.devices()
        foreign = frozenset(present - {d.name for d in devices})
        return self.links(names, present), devices, foreign, self.underlay(remotes)

    def links(
        self, names: Iterable[str], present: set[str] | None = None
    ) -> dict[str, ObservedLink]:
        """The given interfaces, and those where the agent added clsact, that exist: their
        clsact state and the agent's filters (so filters on a former VM port are found too)."""
        if present is None:
            present = {link["ifname"] for link in self.ip_json(["ip", "-j", "link", "show"])}
        owned = self.ledger.names("clsacts")
        out = {}
        also = self.ledger.names(KERNEL_LEDGER)
        for name in sorted((set(names) | owned | also) & present):
            qdiscs = self.ip_json(["tc", "-j", "qdisc", "show", "dev", name], missing_ok=True)
            kinds = {q.get("kind") for q in qdiscs}
            clsact = "clsact" in kinds
            filters, kernel, foreign, intruders = self._filters(name) if clsact else ((), (), 0, 0)
            conflict = None
            if "ingress" in kinds:
                conflict = "a foreign ingress qdisc is attached (it excludes clsact)"
            elif intruders:
                conflict = (
                    f"{intruders} foreign tc filter(s) in the agent's prio ranges "
                    f"{PRIO_BASE}..{PRIO_BASE + PRIO_COUNT - 1}, "
                    f"{KERNEL_MIRROR_PRIO_BASE}.."
                    f"{KERNEL_MIRROR_PRIO_BASE + KERNEL_MIRROR_PRIO_COUNT - 1}"
                )
            out[name] = ObservedLink(
                name,
                clsact,
                filters,
                clsact_owned=name in owned,
                foreign_filters=foreign,
                conflict=conflict,
                kernel_filters=kernel,
            )
        return out

    def devices(self) -> tuple[ObservedDevice, ...]:
        """The agent's mirror VXLAN devices (tagged, or created and listed in the ledger)."""
        listed = self.ledger.names("devices")
        found = []
        for link in self.ip_json(["ip", "-j", "-d", "link", "show", "type", "vxlan"]):
            name, alias = link["ifname"], link.get("ifalias", "")
            if not (alias.startswith(ALIAS_PREFIX) or (not alias and name in listed)):
                continue
            data = link.get("linkinfo", {}).get("info_data", {})
            found.append(
                ObservedDevice(
                    name=name,
                    remote_ip=data.get("remote") or data.get("remote6"),
                    vni=data.get("id"),
                    local_ip=data.get("local") or data.get("local6"),
                    dstport=data.get("port"),
                    up="UP" in link.get("flags", []),
                )
            )
        return tuple(sorted(found, key=lambda d: d.name))

    def underlay(self, remotes: Iterable[str]) -> frozenset[str]:
        """The interfaces the kernel routes tunnel packets to ``remotes`` through."""
        out = set()
        for remote in sorted(set(remotes)):
            result = run(["ip", "-j", "route", "get", remote], timeout=self.timeout_s, check=False)
            if result.returncode == 0 and result.stdout.strip():
                out |= {route["dev"] for route in json.loads(result.stdout) if "dev" in route}
        return frozenset(out)

    def mtus(
        self, names: Iterable[str], remotes: Iterable[str]
    ) -> tuple[dict[str, int], dict[str, tuple[str, int]]]:
        """(MTU of each of ``names`` that exists, remote -> (interface, MTU) of its route; the
        route's own ``mtu`` metric when it has one, which is smaller)."""
        links = {
            link["ifname"]: link["mtu"]
            for link in self.ip_json(["ip", "-j", "link", "show"])
            if isinstance(link.get("mtu"), int)
        }
        paths = {}
        for remote in sorted(set(remotes)):
            result = run(["ip", "-j", "route", "get", remote], timeout=self.timeout_s, check=False)
            if result.returncode != 0 or not result.stdout.strip():
                continue
            for route in json.loads(result.stdout):
                if route.get("dev") in links:
                    metric = [
                        m["mtu"]
                        for m in route.get("metrics", ())
                        if isinstance(m, dict) and isinstance(m.get("mtu"), int)
                    ]
                    paths[remote] = (route["dev"], min([links[route["dev"]], *metric]))
        return {name: links[name] for name in names if name in links}, paths

    # apply ------------------------------------------------------------------------------------
    def apply(self, command: c.Command) -> None:
        if isinstance(command, c.AddMirrorDevice):
            exists = self.exists(command.name)
            if exists and command.replace:
                self.output(["ip", "link", "del", command.name])
                exists = False
            if exists and command.name not in self._owned_device_names():
                raise HostError(
                    f"interface {command.name} exists and is not the agent's; left alone"
                )
            if not exists:
                self.ledger.add("devices", command.name)  # before it exists: never orphaned
                argv = [
                    "ip",
                    "link",
                    "add",
                    command.name,
                    "type",
                    "vxlan",
                    "id",
                    command.vni,
                    "remote",
                    command.remote_ip,
                    "dstport",
                    command.dstport,
                ]
                if command.local_ip:
                    argv += ["local", command.local_ip]
                try:
                    self.output(argv)
                except HostError:
                    self.ledger.discard("devices", command.name)  # it was never made
                    raise
            self.output(
                [
                    "ip",
                    "link",
                    "set",
                    command.name,
                    "alias",
                    f"{ALIAS_PREFIX} peer={command.peer}",
                    "up",
                ]
            )
        elif isinstance(command, c.RemoveMirrorDevice):
            if self.exists(command.name):
                if command.name not in self._owned_device_names():
                    raise HostError(f"interface {command.name} is not the agent's; not removed")
                self.output(["ip", "link", "del", command.name])
            self.ledger.discard("devices", command.name)
        elif isinstance(command, c.AddClsact):
            qdiscs = self.ip_json(["tc", "-j", "qdisc", "show", "dev", command.device])
            if not any(q.get("kind") == "clsact" for q in qdiscs):
                self.ledger.add("clsacts", command.device)  # before it exists
                self.output(clsact_add_argv(command.device))
        elif isinstance(command, c.RemoveClsact):
            if command.device in self.ledger.names("clsacts"):
                result = run(
                    clsact_delete_argv(command.device), timeout=self.timeout_s, check=False
                )
                if (
                    result.returncode != 0
                    and "Cannot find" not in result.stderr
                    and "Invalid handle" not in result.stderr
                ):
                    raise HostError(
                        f"tc: removing clsact from {command.device}: {result.stderr.strip()}"
                    )
                self.ledger.discard("clsacts", command.device)
        elif isinstance(command, c.SetMirrorFilter):
            self.output(
                mirror_filter_argv(
                    command.device,
                    command.target,
                    command.probability,
                    prio=command.prio,
                    handle=FILTER_HANDLE,
                    cookie=FILTER_COOKIE,
                )
            )
        elif isinstance(command, c.RemoveMirrorFilter):
            result = run(
                filter_delete_argv(command.device, prio=command.prio, handle=FILTER_HANDLE),
                timeout=self.timeout_s,
                check=False,
            )
            if (
                result.returncode != 0
                and "not found" not in result.stderr + result.stdout
                and "Cannot find device" not in result.stderr
            ):
                raise HostError(
                    f"tc: removing filter prio {command.prio} on {command.device}: "
                    f"{result.stderr.strip()}"
                )
        elif isinstance(command, SetKernelMirrorFilter):
            self._set_kernel_filter(command)
        elif isinstance(command, RemoveKernelMirrorFilter):
            result = run(
                filter_delete_argv(
                    command.interface,
                    prio=command.prio,
                    handle=KERNEL_MIRROR_HANDLE,
                    direction=command.direction,
                ),
                timeout=self.timeout_s,
                check=False,
            )
            if (
                result.returncode != 0
                and "not found" not in result.stderr + result.stdout
                and "Cannot find device" not in result.stderr
            ):
                raise HostError(
                    f"tc: removing kernel mirror filter prio {command.prio} "
                    f"{command.direction} on {command.interface}: "
                    f"{result.stderr.strip()}"
                )
            if not self.exists(command.interface) or not self._filters(command.interface)[1]:
                self.ledger.discard(KERNEL_LEDGER, command.interface)
        else:
            raise HostError(f"Linux side cannot apply {command!r}")

    def _set_kernel_filter(self, command: SetKernelMirrorFilter) -> None:
        """Compile the filter's expression, refuse an interface that routes to the analysis
        host (it would copy the tunnel's own packets), write the filter."""
        f = command.filter
        if f.interface in self.underlay([f.remote_ip]):
            raise HostError(
                f"kernel mirror: {f.interface} carries the route to the analysis "
                f"host {f.remote_ip}; mirroring it would mirror the tunnel itself; "
                f"refused"
            )
        bytecode = self.compile_filter(f.expression)
        self.ledger.add(KERNEL_LEDGER, f.interface)  # before the filter exists
        self.output(
            selective_filter_argv(
                f.interface,
                f.target,
                bytecode,
                prio=f.prio,
                direction=f.direction,
                handle=KERNEL_MIRROR_HANDLE,
                cookie=f.cookie,
                then_continue=True,
            )
        )

    def compile_filter(self, expression: str) -> str:
        """tc's bytecode for a libpcap ``expression`` (``tcpdump -y EN10MB -ddd``)."""
        text = self.output(["tcpdump", "-y", "EN10MB", "-ddd", expression])
        try:
            return bytecode_from_ddd(text)
        except TcMirrorError as exc:
            raise HostError(f"kernel mirror: compiling {expression!r}: {exc}") from None

    # helpers ----------------------------------------------------------------------------------
    def _filters(
        self, name: str
    ) -> tuple[tuple[ObservedFilter, ...], tuple[ObservedKernelFilter, ...], int, int]:
        """The agent's sFlow mirror filters (ingress hook) and kernel-mirror filters (both
        hooks), how many others there are (both hooks), and how many of those others sit in
        one of the agent's prio ranges."""
        found, kernel, foreign, intruders = [], [], 0, 0
        for hook in ("ingress", "egress"):
            for entry in self.ip_json(
                ["tc", "-j", "filter", "show", "dev", name, hook], missing_ok=True
            ):
                options = entry.get("options")
                if options is None:
                    continue  # the per-prio header line tc prints before the filter itself
                prio = entry["pref"]
                ours_by_prio = hook == "ingress" and PRIO_BASE <= prio < PRIO_BASE + PRIO_COUNT
                kernel_by_prio = (
                    KERNEL_MIRROR_PRIO_BASE
                    <= prio
                    < KERNEL_MIRROR_PRIO_BASE + KERNEL_MIRROR_PRIO_COUNT
                )
                cookie = _cookie(options)
                if ours_by_prio and cookie == FILTER_COOKIE:
                    found.append(ObservedFilter(prio, _bytecode(options), _mirred_target(options)))
                elif (
                    kernel_by_prio
                    and cookie is not None
                    and cookie.startswith(KERNEL_MIRROR_COOKIE_TAG)
                ):
                    kernel.append(
                        ObservedKernelFilter(
                            hook,
                            prio,
                            cookie,
                            _mirred_target(options),
                        )
                    )
                else:
                    foreign += 1
                    intruders += ours_by_prio or kernel_by_prio
        return (
            tuple(sorted(found, key=lambda f: f.prio)),
            tuple(sorted(kernel, key=lambda f: (f.direction, f.prio))),
            foreign,
            intruders,
        )

    def _owned_device_names(self) -> set[str]:
        return {device.name for device in self.devices()}

    def exists(self, name: str) -> bool:
        return (
            run(["ip", "link", "show", "dev", name], timeout=self.timeout_s, check=False).returncode
            == 0
        )

    def output(self, argv: list) -> str:
        """The standard output of ``argv``; a failure is one ``HostError``."""
        try:
            return run(argv, timeout=self.timeout_s).stdout
        except CommandError as exc:
            raise HostError(str(exc)) from None

    def ip_json(self, argv: list[str], missing_ok: bool = False) -> list[dict[str, Any]]:
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


def _cookie(options: dict[str, Any]) -> str | None:
    for action in options.get("actions", []):
        if action.get("kind") == "mirred":
            return action.get("cookie")
    return None


def _mirred_target(options: dict[str, Any]) -> str | None:
    for action in options.get("actions", []):
        if action.get("kind") == "mirred":
            target = action.get("to_dev")
            return None if target in (None, "*") else target
    return None
