"""Calibration load of many UDP flows, or of short ones: what iperf3 cannot make (``-P`` stops at
128 streams, each a connection of its own) and what a flow cache's cost depends on.

``sender`` sends ``rate_pps`` datagrams a second for ``seconds`` (then stops by itself) from a
raw socket in the sending namespace, round-robin over ``flows`` concurrent flows; with
``flow_packets`` K each flow ends after K datagrams and the next 5-tuple (a new source port)
takes its place, so short flows start continuously. Flows differ by UDP source port only
(``FIRST_PORT``..65535, a space of ``PORTS``), so a 5-tuple comes back only after ``PORTS`` flows.
``sink`` binds the destination port in the receiving namespace and never reads: datagrams
are dropped at its full socket instead of drawing ICMP "port unreachable" back through the
switch. Both run as ``python -m cosample.costmodel.flowgen`` through an endpoint's prefix
(``ip netns exec NS``); the sender prints one JSON line (packets, seconds) when it ends.

Pure: the flow schedule (``source_port``), the datagram bytes, how many are due, the argv
builders. Effects: the loops and ``FlowgenClient`` (the harness's ``client`` for this load).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.iperf import BackgroundRun, IperfResult, end_process

FIRST_PORT = 1024
#: Distinct source ports, hence distinct 5-tuples, the generator cycles through.
PORTS = 65536 - FIRST_PORT
#: Most packets sent in one go when the sender falls behind (so a stall does not become a
#: burst of a second's worth).
MAX_BATCH = 256
#: Seconds the sender sleeps when nothing is due (its pacing granularity).
TICK_S = 0.0005


@dataclass(frozen=True)
class FlowProfile:
    """``flows`` concurrent flows, each lasting ``flow_packets`` datagrams (0: the whole run)."""

    flows: int
    flow_packets: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.flows, int) and 1 <= self.flows <= PORTS):
            raise HarnessError(f"flows must be 1..{PORTS}, got {self.flows!r}")
        if not (isinstance(self.flow_packets, int) and self.flow_packets >= 0):
            raise HarnessError(
                f"flow packets must be an integer >= 0 (0: flows last the whole "
                f"run), got {self.flow_packets!r}"
            )

    def flow_of(self, packet: int) -> int:
        """The flow (a running number) that datagram number ``packet`` belongs to."""
        slot = packet % self.flows
        if not self.flow_packets:
            return slot
        generation = packet // self.flows // self.flow_packets
        return generation * self.flows + slot

    def source_port(self, packet: int) -> int:
        return FIRST_PORT + self.flow_of(packet) % PORTS

    def tuple_indices(self, first: int, count: int) -> list[int]:
        """Which prebuilt header (source port ``FIRST_PORT + index``) each of datagrams
        ``first``..``first + count - 1`` uses: ``flow_of`` modulo ``tuples``, in bulk."""
        flows, flow_packets, tuples = self.flows, self.flow_packets, self.tuples
        if not flow_packets:
            return [packet % flows for packet in range(first, first + count)]
        return [
            (packet // flows // flow_packets * flows + packet % flows) % tuples
            for packet in range(first, first + count)
        ]

    def new_flows_per_s(self, rate_pps: float) -> float:
        """Flows started per second at ``rate_pps`` (0 for flows that last the run)."""
        return rate_pps / self.flow_packets if self.flow_packets else 0.0

    @property
    def tuples(self) -> int:
        """Distinct 5-tuples the schedule uses (each gets a prebuilt header)."""
        return self.flows if not self.flow_packets else PORTS


def udp_datagram(
    source: str, destination: str, source_port: int, destination_port: int, payload: bytes
) -> bytes:
    """An IPv4 + UDP datagram for a raw socket with ``IP_HDRINCL``: the kernel fills in the IP
    total length, identification and checksum; the UDP checksum is 0 (none, allowed in IPv4)."""
    udp = struct.pack("!HHHH", source_port, destination_port, 8 + len(payload), 0)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp) + len(payload),
        0,
        0x4000,
        64,
        socket.IPPROTO_UDP,
        0,
        socket.inet_aton(source),
        socket.inet_aton(destination),
    )
    return ip + udp + payload


def due(elapsed_s: float, rate_pps: float, sent: int) -> int:
    """Datagrams to send now so that ``rate_pps`` is kept on average (at most ``MAX_BATCH``)."""
    return max(0, min(MAX_BATCH, math.floor(elapsed_s * rate_pps) - sent))


def sender_argv(
    destination: str,
    port: int,
    rate_pps: float,
    seconds: float,
    profile: FlowProfile,
    payload_bytes: int = 64,
) -> list[str]:
    if not 16 <= payload_bytes <= 1400:
        raise HarnessError(f"UDP payload must be 16..1400 bytes, got {payload_bytes!r}")
    if not (rate_pps > 0 and seconds > 0):
        raise HarnessError(f"rate and duration must be > 0, got {rate_pps!r} pps, {seconds!r} s")
    return [
        sys.executable,
        "-m",
        "cosample.costmodel.flowgen",
        "send",
        destination,
        str(port),
        "--rate",
        f"{rate_pps:g}",
        "--seconds",
        f"{seconds:g}",
        "--flows",
        str(profile.flows),
        "--flow-packets",
        str(profile.flow_packets),
        "--payload",
        str(payload_bytes),
    ]


def sink_argv(port: int, seconds: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cosample.costmodel.flowgen",
        "sink",
        str(port),
        "--seconds",
        f"{seconds:g}",
    ]


def parse_sender_output(text: str) -> IperfResult:
    """The sender's JSON line as an ``IperfResult`` (sent datagrams; losses unknown)."""
    try:
        document = json.loads(text.strip().splitlines()[-1])
        packets, seconds = int(document["packets"]), float(document["seconds"])
        bits = float(document["bits_per_second"])
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise HarnessError(f"flow generator gave no result: {text.strip()[-200:]!r}") from None
    return IperfResult("udp", seconds, bits, packets, None)


# effects --------------------------------------------------------------------------------------
def send(
    destination: str,
    port: int,
    rate_pps: float,
    seconds: float,
    profile: FlowProfile,
    payload_bytes: int,
) -> dict:
    """Send until ``seconds`` have passed (or SIGTERM); return what was sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((destination, port))  # no packet: only picks the source address
        source = probe.getsockname()[0]
    payload = bytes(payload_bytes)
    headers = [
        udp_datagram(source, destination, FIRST_PORT + k, port, payload)
        for k in range(profile.tuples)
    ]
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    target = (destination, 0)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    sent = errors = 0
    start = time.monotonic()
    end = start + seconds
    while not stop:
        now = time.monotonic()
        if now >= end:
            break
        batch = due(now - start, rate_pps, sent)
        if not batch:
            time.sleep(TICK_S)
            continue
        for index in profile.tuple_indices(sent, batch):
            try:
                raw.sendto(headers[index], target)
            except OSError:  # a full queue: counted, the pace goes on
                errors += 1
        sent += batch
    elapsed = time.monotonic() - start
    raw.close()
    frame_bits = (len(headers[0]) + 14) * 8
    return {
        "packets": sent - errors,
        "send_errors": errors,
        "seconds": round(elapsed, 6),
        "bits_per_second": (sent - errors) * frame_bits / elapsed if elapsed > 0 else 0.0,
    }


def sink(port: int, seconds: float) -> None:
    """Hold ``port`` bound (a small buffer, never read) for ``seconds`` or until SIGTERM."""
    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    held.bind(("0.0.0.0", port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(seconds)
    held.close()


class FlowgenClient(BackgroundRun):
    """A sender started in the background, driven by the harness as ``IperfClient`` is."""

    def __init__(self, exec_prefix: Sequence[str], argv: Sequence[str], duration_s: float) -> None:
        super().__init__(exec_prefix, argv, duration_s, "the flow generator")

    def wait(self) -> IperfResult:
        stdout, stderr = self.output()
        if self.process.returncode:
            raise HarnessError(f"flow generator failed: {(stderr or stdout).strip()[-300:]}")
        return parse_sender_output(stdout)


class FlowSink:
    """``sink`` on an endpoint, started on enter and stopped by its PID on exit."""

    def __init__(self, exec_prefix: Sequence[str], port: int, seconds: float) -> None:
        self.argv = [*exec_prefix, *sink_argv(port, seconds)]
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "FlowSink":
        self.process = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        time.sleep(0.5)
        assert self.process.stderr is not None  # (piped above)
        if self.process.poll() is not None:
            error = self.process.stderr.read().decode(errors="replace").strip()
            self.process = None
            raise HarnessError(f"flow sink exited at once: {error[-300:] or 'no message'}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is None:
            return
        end_process(self.process)
        assert self.process.stderr is not None  # (piped by ``__enter__``)
        self.process.stderr.close()
        self.process = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cosample.costmodel.flowgen", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sender = sub.add_parser("send", help="send the load (root: a raw socket)")
    sender.add_argument("destination")
    sender.add_argument("port", type=int)
    sender.add_argument("--rate", type=float, required=True, help="datagrams per second")
    sender.add_argument("--seconds", type=float, required=True)
    sender.add_argument("--flows", type=int, default=1)
    sender.add_argument("--flow-packets", type=int, default=0)
    sender.add_argument("--payload", type=int, default=64)
    holder = sub.add_parser("sink", help="hold the destination port (never read)")
    holder.add_argument("port", type=int)
    holder.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "sink":
            sink(args.port, args.seconds)
            return 0
        sender_argv(
            args.destination,
            args.port,
            args.rate,
            args.seconds,
            profile := FlowProfile(args.flows, args.flow_packets),
            args.payload,
        )
        print(
            json.dumps(
                send(args.destination, args.port, args.rate, args.seconds, profile, args.payload)
            ),
            flush=True,
        )
        return 0
    except (HarnessError, OSError) as exc:
        print(f"flowgen: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
