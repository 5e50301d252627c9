"""Local sampling at any probability, for calibration beside sFlow's 1-in-N (issue 24, item 4).

- ``sample_action``: an OpenFlow flow on the sender's port whose actions are
  ``sample(probability=K, collector_set_id=ID, ...),NORMAL`` (``K = round(s * 65535)``), exporting
  IPFIX through a ``Flow_Sample_Collector_Set`` to a UDP counter on 127.0.0.1. OVS's exporter
  caches nothing by default: every sampled packet leaves as one IPFIX message.
  ``sample_action_cached`` is the same with the exporter's flow cache on (``cache_max_flows``,
  ``cache_active_timeout``): samples are aggregated into per-flow records, one message per flow
  and timeout.
- ``tc_sample``: the random tc mirror (``cosample.dataplane.tcmirror``) into a local device that
  a capture process reads (``tcpdump -s 128 -w /dev/null``, memory-mapped ring): the kernel's
  part of a tc-based sampler plus the reading half of the exporter it would need.

Rate 0 removes the flow (the bridge's NORMAL default forwards; in the userspace datapath a
packet's cost is its cached datapath flow's, not the OpenFlow priority that made it). Each
variant has its own flow priority and collector set, so one never replaces the other's. Everything created is tagged
``external_ids:cosample=costmodel`` (the flow: ``COOKIE``) and removed by ``clear``. Argument
builders are pure; the classes are the thin layer that runs them.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
from collections.abc import Callable

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.iperf import end_process
from cosample.dataplane.ipfix import SAMPLE_COLLECTOR_SET_ID, SAMPLE_PROBABILITY_SCALE

#: OpenFlow ``sample`` probabilities are out of this (a 16-bit field; 65535 samples every packet).
SAMPLE_SCALE = SAMPLE_PROBABILITY_SCALE
#: Our flows' cookie and priority on the bridge (above the NORMAL default, out of agents' way);
#: the cached variant's flow is at the next priority.
COOKIE, FLOW_PRIORITY = 0xC05A4E, 40000
#: Our Flow_Sample_Collector_Set's id (the cached variant's: the next one).
COLLECTOR_SET_ID = SAMPLE_COLLECTOR_SET_ID
IPFIX_VERSION = 10
#: The cached exporter's default settings (``cosample calibrate --ipfix-cache-flows``,
#: ``--ipfix-active-timeout``): 1,024 flows, each exported a second after its first sample.
CACHE_MAX_FLOWS, CACHE_ACTIVE_TIMEOUT_S = 1024, 1


# pure decisions -------------------------------------------------------------------------------
def sample_probability(rate: float) -> int:
    """The ``sample`` action's probability (of ``SAMPLE_SCALE``) for a sampled fraction ``rate``."""
    if not 0.0 <= rate <= 1.0:
        raise HarnessError(f"sampling rate must be in [0, 1], got {rate!r}")
    return round(rate * SAMPLE_SCALE)


def sample_flow(port: str, probability: int, slot: int = 0) -> str:
    """``ovs-ofctl add-flow`` text of our flow on ``port`` (variant ``slot``): sample, then
    forward. ``add-flow`` with the same match and priority replaces the flow, so setting it
    twice is harmless."""
    if not 0 < probability <= SAMPLE_SCALE:
        raise HarnessError(f"sample probability must be 1..{SAMPLE_SCALE}, got {probability!r}")
    return (
        f"cookie={COOKIE:#x},priority={FLOW_PRIORITY + slot},in_port={port},"
        f"actions=sample(probability={probability},collector_set_id={COLLECTOR_SET_ID + slot},"
        f"obs_domain_id=1,obs_point_id=1),NORMAL"
    )


def sample_flow_match(port: str, slot: int = 0) -> str:
    """``ovs-ofctl --strict del-flows`` text matching our flow and nothing else."""
    return f"cookie={COOKIE:#x}/-1,priority={FLOW_PRIORITY + slot},in_port={port}"


def collector_set_args(
    bridge: str,
    target: str,
    cached: bool,
    cache_flows: int = CACHE_MAX_FLOWS,
    active_timeout_s: int = CACHE_ACTIVE_TIMEOUT_S,
) -> list[str]:
    """``ovs-vsctl`` arguments creating a tagged IPFIX row and our collector set on ``bridge``
    (with ``cached``, the exporter's cache of ``cache_flows`` flows, each exported
    ``active_timeout_s`` after its first sample or when a new flow needs its place);
    ovs-vsctl prints both rows' UUIDs, the set's last (the IPFIX row goes with it)."""
    ipfix = ["create", "IPFIX", f'targets="{target}"', "external_ids:cosample=costmodel"]
    if cached:
        ipfix += [f"cache_max_flows={cache_flows}", f"cache_active_timeout={active_timeout_s}"]
    return [
        "--",
        "--id=@br",
        "get",
        "Bridge",
        bridge,
        "--",
        "--id=@i",
        *ipfix,
        "--",
        "create",
        "Flow_Sample_Collector_Set",
        f"id={COLLECTOR_SET_ID + cached}",
        "bridge=@br",
        "ipfix=@i",
        "external_ids:cosample=costmodel",
    ]


def ipfix_data_sets(message: bytes) -> int:
    """How many data sets (set id >= 256) an IPFIX message holds; 0 for a template-only one.
    Raises ValueError on a message that is not IPFIX."""
    if len(message) < 16:
        raise ValueError("shorter than an IPFIX header")
    version, length = struct.unpack_from("!HH", message)
    if version != IPFIX_VERSION or length != len(message):
        raise ValueError(f"not an IPFIX message (version {version}, length {length})")
    offset, count = 16, 0
    while offset + 4 <= length:
        set_id, set_length = struct.unpack_from("!HH", message, offset)
        if set_length < 4:
            raise ValueError(f"set of length {set_length} at byte {offset}")
        count += set_id >= 256
        offset += set_length
    return count


# effects --------------------------------------------------------------------------------------
class IpfixCounter:
    """A UDP thread on 127.0.0.1 counting IPFIX messages that carry data (``data_messages``):
    without the exporter's cache, one per sampled packet; with it, one per exported flow record
    (OVS sends each record in a message of its own; ``data_sets`` counts the records, each in a
    set of its own, to check that). Counting only, as for sFlow: decoding in Python would
    compete for the CPU being measured."""

    def __init__(self, receive_buffer: int = 4 << 20) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.setsockopt(
            socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), receive_buffer
        )
        self._socket.settimeout(0.2)
        self.data_messages = self.data_sets = self.malformed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ipfix-counter", daemon=True)

    @property
    def target(self) -> str:
        host, port = self._socket.getsockname()
        return f"{host}:{port}"

    def __enter__(self) -> "IpfixCounter":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._socket.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._socket.recv(65535)
            except OSError:
                continue
            try:
                sets = ipfix_data_sets(message)
            except ValueError:
                self.malformed += 1
                continue
            self.data_messages += sets > 0
            self.data_sets += sets


class OvsSampleAction:
    """The ``sample`` action on ``port``'s flow; ``vsctl``/``ofctl`` run the OVS tools."""

    def __init__(
        self,
        vsctl: Callable[..., str],
        ofctl: Callable[..., str],
        bridge: str,
        port: str,
        target: str,
        cached: bool = False,
        cache_flows: int = CACHE_MAX_FLOWS,
        active_timeout_s: int = CACHE_ACTIVE_TIMEOUT_S,
    ) -> None:
        self.vsctl, self.ofctl, self.bridge, self.port = vsctl, ofctl, bridge, port
        self.target, self.cached = target, cached
        self.cache = (cache_flows, active_timeout_s)
        self.name = "sample_action_cached" if cached else "sample_action"
        self.slot = int(cached)
        self.collector_set: str | None = None
        self.probability = 0  # 0: our flow is not installed

    def _ensure_collector_set(self) -> None:
        if self.collector_set is not None:
            return
        existing = self.vsctl(
            "--bare",
            "--columns=_uuid,external_ids",
            "find",
            "Flow_Sample_Collector_Set",
            f"id={COLLECTOR_SET_ID + self.slot}",
        ).split()
        if existing:
            raise HarnessError(
                f"bridge {self.bridge}: a Flow_Sample_Collector_Set with id "
                f"{COLLECTOR_SET_ID + self.slot} exists ({' '.join(existing)}); remove it or "
                f"calibrate on another OVS"
            )
        created = self.vsctl(
            *collector_set_args(self.bridge, self.target, self.cached, *self.cache)
        ).split()
        self.collector_set = created[-1]  # ovs-vsctl prints the IPFIX row's UUID, then the set's

    def set_rate(self, rate: float) -> float:
        """Install, change or remove our flow (one ``ovs-ofctl`` call, none when nothing
        changes)."""
        probability = sample_probability(rate)
        if probability == self.probability:
            return probability / SAMPLE_SCALE
        if probability == 0:
            self._remove_flow()
        else:
            self._ensure_collector_set()
            self.ofctl("add-flow", self.bridge, sample_flow(self.port, probability, self.slot))
            self.probability = probability
        return probability / SAMPLE_SCALE

    def _remove_flow(self) -> None:
        if self.probability:
            self.ofctl(
                "del-flows", self.bridge, "--strict", sample_flow_match(self.port, self.slot)
            )
            self.probability = 0

    def clear(self) -> None:
        """Remove our flow and collector set (the IPFIX row is garbage-collected with it)."""
        self._remove_flow()
        if self.collector_set is not None:
            self.vsctl("--if-exists", "destroy", "Flow_Sample_Collector_Set", self.collector_set)
            self.collector_set = None


class CaptureReader:
    """``tcpdump`` reading ``device`` (128-byte snapshots, discarded), the reading half of a
    tc-based sampler's exporter; started on enter, stopped by its PID on exit."""

    def __init__(self, device: str, snaplen: int = 128) -> None:
        self.argv = [
            "tcpdump",
            "-i",
            device,
            "-s",
            str(snaplen),
            "-B",
            "4096",
            "-n",
            "-w",
            "/dev/null",
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "CaptureReader":
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        except FileNotFoundError:
            raise HarnessError("tc_sample needs tcpdump (Debian package 'tcpdump')") from None
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None:
            end_process(self.process)
            self.process = None
