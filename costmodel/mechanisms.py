"""Turn a sampling or mirroring mechanism on at rate ``s``, and off again, on an OVS server.

- ``sflow``: OVS sFlow on the bridge, 1-in-N with ``N = round(1/s)``, to a UDP collector. The row
  we create is tagged ``external_ids:cosample=costmodel``; a bridge whose sFlow row is not ours
  is refused, never overwritten.
- ``mirror``: a per-packet probabilistic copy of the sender's port to a target device with a tc
  classic-BPF random classifier plus ``mirred`` (``cosample.dataplane.tcmirror``) at an owned
  prio/handle; ``clsact`` is removed only if we added it. ``mirror_vxlan`` is the same into a
  VXLAN device (what the agents deploy toward a receiving server), at the next prio.

``set_rate`` returns the rate actually configured (1/N for sFlow, T/2^32 for the mirror), which
the harness records. Argument builders are pure; the classes are the thin layer that runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cosample.costmodel.errors import HarnessError
from cosample.dataplane.run import CommandError, run
from cosample.dataplane.tcmirror import (
    bpf_random_bytecode,
    clsact_add_argv,
    clsact_delete_argv,
    filter_delete_argv,
    match_probability,
    mirror_filter_argv,
)

TAG = "external_ids:cosample=costmodel"
MAX_SAMPLING_N = 2**32 - 1
#: Our tc filter's slot on the sender's port: high enough to stay out of the agents' way.
MIRROR_PRIO, MIRROR_HANDLE = 0xC057, 1


class Mechanism(Protocol):
    name: str

    def set_rate(self, rate: float) -> float: ...

    def clear(self) -> None: ...


# pure decisions -------------------------------------------------------------------------------
def sampling_n(rate: float) -> int | None:
    """sFlow's 1-in-N for a sampled fraction ``rate``; None means sFlow off (rate 0)."""
    if not 0.0 <= rate <= 1.0:
        raise HarnessError(f"sampling rate must be in [0, 1], got {rate!r}")
    if rate == 0.0:
        return None
    return min(max(1, round(1.0 / rate)), MAX_SAMPLING_N)


def sflow_create_args(
    bridge: str,
    target: str,
    n: int,
    agent: str = "127.0.0.1",
    header_bytes: int = 128,
    polling_s: int = 0,
) -> list[str]:
    """``ovs-vsctl`` arguments creating a tagged sFlow row and attaching it to ``bridge`` in one
    transaction; ovs-vsctl prints the new row's UUID. The bridge's ``sflow`` column holds at most
    one row and ``add`` refuses to exceed that, so the whole transaction fails, changing nothing,
    when the bridge already has sFlow (ours or someone else's)."""
    return [
        "--",
        "--id=@s",
        "create",
        "sflow",
        f"agent={agent}",
        f'targets="{target}"',
        f"sampling={n}",
        f"header={header_bytes}",
        f"polling={polling_s}",
        TAG,
        "--",
        "add",
        "bridge",
        bridge,
        "sflow",
        "@s",
    ]


def sflow_update_args(row: str, n: int) -> list[str]:
    return ["set", "sflow", row, f"sampling={n}"]


def sflow_detach_args(bridge: str, row: str) -> list[str]:
    """Detach the sFlow row ``row`` from ``bridge``, and nothing else: if the bridge's sFlow is
    another row by now, ``remove`` leaves it. The unreferenced row is garbage-collected by OVSDB."""
    return ["remove", "bridge", bridge, "sflow", row]


# effects --------------------------------------------------------------------------------------
class SflowSampling:
    """sFlow on a bridge; ``vsctl`` runs ``ovs-vsctl`` with the given arguments."""

    name = "sflow"

    def __init__(
        self,
        vsctl: Callable[..., str],
        bridge: str,
        target: str,
        agent: str = "127.0.0.1",
        header_bytes: int = 128,
    ) -> None:
        self.vsctl, self.bridge, self.target = vsctl, bridge, target
        self.agent, self.header_bytes = agent, header_bytes
        self.row: str | None = None

    def _current_row(self) -> str | None:
        row = self.vsctl("get", "bridge", self.bridge, "sflow").strip()
        return None if row in ("", "[]") else row

    def set_rate(self, rate: float) -> float:
        """One ``ovs-vsctl`` call per change (a calibration switches sFlow on and off every
        phase, and each call waits for ovs-vswitchd to reconfigure)."""
        n = sampling_n(rate)
        if n is None:
            self.clear()
            return 0.0
        if self.row is not None:
            self.vsctl(*sflow_update_args(self.row, n))
            return 1.0 / n
        try:
            self.row = self.vsctl(
                *sflow_create_args(self.bridge, self.target, n, self.agent, self.header_bytes)
            ).strip()
        except CommandError:
            self.row = self._leftover_row()  # the bridge has sFlow: ours from before, or refused
            self.vsctl(*sflow_update_args(self.row, n))
        return 1.0 / n

    def _leftover_row(self) -> str:
        """The bridge's sFlow row if cosample created it (left by an earlier calibration);
        anyone else's is refused, never overwritten."""
        existing = self._current_row()
        if existing is None:
            raise HarnessError(f"cannot create an sFlow row on bridge {self.bridge}")
        tag = self.vsctl("--if-exists", "get", "sflow", existing, "external_ids:cosample")
        if tag.strip().strip('"') != "costmodel":
            raise HarnessError(
                f"bridge {self.bridge} already has an sFlow configuration (row {existing}) "
                f"that cosample did not create; remove it or calibrate on another bridge"
            )
        return existing

    def clear(self) -> None:
        if self.row is not None:
            self.vsctl(*sflow_detach_args(self.bridge, self.row))
            self.row = None


class TcMirror:
    """A random mirror on ``device``'s ingress (what the VM behind it sends) to ``target``."""

    name = "mirror"

    def __init__(
        self,
        device: str,
        target: str,
        prio: int = MIRROR_PRIO,
        handle: int = MIRROR_HANDLE,
        timeout: float = 10.0,
        name: str = "mirror",
    ) -> None:
        self.device, self.target, self.prio, self.handle = device, target, prio, handle
        self.name = name
        self.timeout = timeout
        self.created_clsact = False
        self.installed = False

    def _has_clsact(self) -> bool:
        shown = run(["tc", "qdisc", "show", "dev", self.device], timeout=self.timeout).stdout
        return "clsact" in shown

    def set_rate(self, rate: float) -> float:
        if not 0.0 <= rate <= 1.0:
            raise HarnessError(f"mirror rate must be in [0, 1], got {rate!r}")
        if rate == 0.0:
            self._remove_filter()
            return 0.0
        if not self.created_clsact and not self._has_clsact():
            run(clsact_add_argv(self.device), timeout=self.timeout)
            self.created_clsact = True
        run(
            mirror_filter_argv(self.device, self.target, rate, prio=self.prio, handle=self.handle),
            timeout=self.timeout,
        )
        self.installed = True
        return match_probability(bpf_random_bytecode(rate))

    def _remove_filter(self) -> None:
        if self.installed:
            run(
                filter_delete_argv(self.device, prio=self.prio, handle=self.handle),
                timeout=self.timeout,
                check=False,
            )
            self.installed = False

    def clear(self) -> None:
        """Remove our filter, and ``clsact`` if we added it (tolerates a vanished device)."""
        try:
            self._remove_filter()
            if self.created_clsact:
                run(clsact_delete_argv(self.device), timeout=self.timeout, check=False)
                self.created_clsact = False
        except CommandError:
            pass
