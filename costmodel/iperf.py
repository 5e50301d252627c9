"""iperf3 as a load generator: argument lists, a server we start and stop by PID, JSON results.

Every client run has a timeout (its duration plus a margin); iperf3's own ``error`` field
becomes a ``HarnessError`` with iperf3's words. Parsing is pure and tested on recorded output.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cosample.costmodel.errors import HarnessError

PROTOCOLS = ("tcp", "udp")
DEFAULT_PORT = 5271
#: Seconds a client may take beyond its nominal duration (connect, results exchange).
MARGIN_S = 15.0


@dataclass(frozen=True)
class IperfResult:
    """What one iperf3 client run reports (receiver-side numbers where iperf3 has them)."""

    protocol: str
    seconds: float
    bits_per_second: float
    packets: int | None = None  # UDP: datagrams sent
    lost_packets: int | None = None  # UDP: of those, not received
    cpu_sender_pct: float = math.nan
    cpu_receiver_pct: float = math.nan

    @property
    def received_pps(self) -> float:
        """UDP datagrams the iperf3 server received per second (NaN for TCP)."""
        if self.packets is None or self.lost_packets is None or self.seconds <= 0:
            return math.nan
        return (self.packets - self.lost_packets) / self.seconds

    @property
    def lost_percent(self) -> float:
        if not self.packets or self.lost_packets is None:
            return math.nan
        return 100.0 * self.lost_packets / self.packets


#: iperf3's most parallel streams (``-P``).
MAX_STREAMS = 128


def client_argv(
    server_ip: str,
    *,
    port: int = DEFAULT_PORT,
    duration_s: float = 3.0,
    protocol: str = "udp",
    packet_bytes: int = 64,
    bandwidth: str = "0",
    connect_timeout_ms: int = 3000,
    streams: int = 1,
) -> list[str]:
    """``iperf3 -c`` with JSON output; UDP sends ``packet_bytes`` datagrams at ``bandwidth``
    (``0`` = as fast as possible), TCP uses iperf3's default segments (``packet_bytes`` unused);
    ``streams`` > 1 runs that many parallel flows (``-P``; ``bandwidth`` is per stream)."""
    if protocol not in PROTOCOLS:
        raise HarnessError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not duration_s >= 1:
        raise HarnessError(f"iperf3 duration must be >= 1 s, got {duration_s!r}")
    argv = [
        "iperf3",
        "-c",
        server_ip,
        "-p",
        str(port),
        "-t",
        f"{duration_s:g}",
        "-J",
        "--connect-timeout",
        str(connect_timeout_ms),
    ]
    if protocol == "udp":
        if not 16 <= packet_bytes <= 65507:
            raise HarnessError(f"UDP payload must be 16..65507 bytes, got {packet_bytes!r}")
        argv += ["-u", "-l", str(packet_bytes), "-b", str(bandwidth)]
    if not (isinstance(streams, int) and 1 <= streams <= MAX_STREAMS):
        raise HarnessError(f"streams must be 1..{MAX_STREAMS}, got {streams!r}")
    return argv + (["-P", str(streams)] if streams > 1 else [])


def server_argv(
    port: int = DEFAULT_PORT, *, bind: str | None = None, one_off: bool = False
) -> list[str]:
    """``iperf3 -s``; ``bind`` listens on one address only, ``one_off`` serves one client and exits."""
    argv = ["iperf3", "-s", "-p", str(port)]
    if bind is not None:
        argv += ["-B", bind]
    return argv + (["-1"] if one_off else [])


def parse_client_json(text: str, protocol: str) -> IperfResult:
    """An ``IperfResult`` from ``iperf3 -c -J`` output, or a HarnessError with iperf3's reason."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        tail = text.strip().splitlines()[-1:] or ["no output"]
        raise HarnessError(f"iperf3 gave no JSON result: {tail[0][:200]}") from None
    if document.get("error"):
        raise HarnessError(f"iperf3: {document['error']}")
    end = document.get("end") or {}
    cpu = end.get("cpu_utilization_percent") or {}
    sender_pct = float(cpu.get("host_total", math.nan))
    receiver_pct = float(cpu.get("remote_total", math.nan))
    try:
        if protocol == "udp":
            total = end["sum"]
            return IperfResult(
                "udp",
                float(total["seconds"]),
                float(total["bits_per_second"]),
                int(total["packets"]),
                int(total["lost_packets"]),
                cpu_sender_pct=sender_pct,
                cpu_receiver_pct=receiver_pct,
            )
        received = end["sum_received"]
        return IperfResult(
            "tcp",
            float(received["seconds"]),
            float(received["bits_per_second"]),
            cpu_sender_pct=sender_pct,
            cpu_receiver_pct=receiver_pct,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HarnessError(f"iperf3 JSON lacks the {protocol} summary ({exc})") from None


def end_process(process: subprocess.Popen) -> None:
    """Stop a helper process by its handle: SIGTERM, then SIGKILL if it is still there after
    5 s (the harness's servers, sinks and captures)."""
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


class BackgroundRun:
    """A load command started in the background (so the harness can act while load flows), with
    a total timeout: ``output`` collects it or stops it after its timeout; ``stop`` ends it."""

    def __init__(
        self, exec_prefix: Sequence[str], argv: Sequence[str], duration_s: float, what: str
    ) -> None:
        self.argv = [str(part) for part in (*exec_prefix, *argv)]
        self.timeout = duration_s + MARGIN_S
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except FileNotFoundError as exc:
            raise HarnessError(f"cannot start {what}: {exc}") from None

    def output(self) -> tuple[str, str]:
        try:
            return self.process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise HarnessError(
                f"{' '.join(self.argv)}: no result within {self.timeout:g} s"
            ) from None

    def stop(self) -> None:
        """End the run if it is still going (on error or Ctrl-C): SIGTERM, then SIGKILL."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate(timeout=5)


class IperfClient(BackgroundRun):
    """One iperf3 client run in the background; ``wait`` gives its result."""

    def __init__(
        self, exec_prefix: Sequence[str], argv: Sequence[str], protocol: str, duration_s: float
    ) -> None:
        super().__init__(exec_prefix, argv, duration_s, "iperf3 client")
        self.protocol = protocol

    def wait(self) -> IperfResult:
        stdout, stderr = self.output()
        return parse_client_json(stdout or stderr, self.protocol)


def run_client(
    exec_prefix: Sequence[str],
    argv: Sequence[str],
    protocol: str,
    duration_s: float,
    retries: int = 3,
) -> IperfResult:
    """Run a client (through an endpoint's prefix) to the end; retry while the server is busy."""
    for attempt in range(retries + 1):
        client = IperfClient(exec_prefix, argv, protocol, duration_s)
        try:
            return client.wait()
        except HarnessError as exc:
            if "busy" not in str(exc) or attempt == retries:
                raise
            time.sleep(1.0)
        finally:
            client.stop()
    raise AssertionError("unreachable")


class IperfServer:
    """``iperf3 -s`` on an endpoint, started on enter and stopped (by its PID) on exit."""

    def __init__(
        self, exec_prefix: Sequence[str], port: int = DEFAULT_PORT, startup_s: float = 0.5
    ) -> None:
        self.argv = [*exec_prefix, *server_argv(port)]
        self.startup_s = startup_s
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "IperfServer":
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except FileNotFoundError as exc:
            raise HarnessError(f"cannot start iperf3 server: {exc}") from None
        time.sleep(self.startup_s)
        if self.process.poll() is not None:
            error = (
                self.process.stderr.read().decode(errors="replace").strip()
                if self.process.stderr
                else ""
            )
            self.process = None
            raise HarnessError(
                f"iperf3 server exited at once: {error or 'no message'} (is the port in use?)"
            )
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None:
            return
        end_process(self.process)
        if self.process.stderr:
            self.process.stderr.close()
        self.process = None
