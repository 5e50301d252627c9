"""The monitors the application-monitoring comparison runs, and what is read from them.

Each monitor is a process started in a namespace of the rig (``cosample.lab.appmirror``) and
registered with it, so the rig stops it by PID whatever happens: tcpdump writing a file, tshark
computing ``http.time``, and the cosample analyser (``cosample appmon run``) on an interface.
Their CPU is read from ``/proc/PID/stat`` for the process and its descendants (tshark's dumpcap)
over the load period only, so start-up (Python imports, tshark's dissector tables) is not
counted. wrk's report is parsed here too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cosample.experiments.errors import ExperimentError

SERVICE_PORT = 80
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


@dataclass(frozen=True)
class WrkReport:
    requests: int
    requests_per_s: float
    latency_mean_ms: float
    latency_p99_ms: float


def parse_wrk(text: str) -> WrkReport:
    """The numbers of a ``wrk --latency`` report; an error naming what is missing."""

    def find(pattern: str, what: str) -> re.Match:
        match = re.search(pattern, text, re.MULTILINE)
        if not match:
            raise ExperimentError(f"wrk report: no {what} in {text[:400]!r}")
        return match

    def ms(number: str, unit: str) -> float:
        return float(number) * _UNITS[unit]

    latency = find(r"^\s+Latency\s+([\d.]+)(us|ms|s|m)\s", "mean latency")
    p99 = find(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$", "99th percentile")
    return WrkReport(
        requests=int(find(r"^\s+(\d+) requests in", "request count").group(1)),
        requests_per_s=float(find(r"^Requests/sec:\s+([\d.]+)", "Requests/sec").group(1)),
        latency_mean_ms=ms(*latency.groups()),
        latency_p99_ms=ms(*p99.groups()),
    )


def parse_h2load(text: str) -> float:
    """Requests/s of an ``h2load`` report; an error naming what is missing."""
    match = re.search(r"^finished in [\d.]+m?s, ([\d.]+) req/s", text, re.MULTILINE)
    if not match:
        raise ExperimentError(f"h2load report: no req/s in {text[:400]!r}")
    return float(match.group(1))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (0 for a gone process)."""
    total, pending, ticks = 0.0, [pid], os.sysconf("SC_CLK_TCK")
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
    return total


@dataclass
class Monitor:
    """One running monitor; ``result`` after ``stop`` holds what it computed."""

    kind: str
    process: subprocess.Popen
    directory: Path
    result: dict = field(default_factory=dict)
    #: the off-site sniffer's receiver on the analysis node (``process`` is the sender)
    receiver: subprocess.Popen | None = None


def _analyser_argv(
    *options: str, port: int = SERVICE_PORT, protocol: str | None = None
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cosample",
        "appmon",
        "run",
        "--port",
        str(port),
        *(["--protocol", f"{port}={protocol}"] if protocol else []),
        "--window",
        "1h",
        *options,
    ]


def start(
    rig,
    kind: str,
    directory: Path,
    name: str,
    timeout_s: float = 30.0,
    port: int = SERVICE_PORT,
    protocol: str | None = None,
) -> Monitor:
    """Start ``kind`` (tcpdump, tshark, onsite, analysis, offsite) and wait until it captures.
    ``offsite``: the analyser on the server's port sends compact records to another on the
    analysis node, which writes the windows (the seeds' off-site sniffer). The analysers
    watch the service on ``port``, told it speaks ``protocol`` (None: HTTP/1.x, undeclared)."""
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "offsite":
        import secrets

        from cosample.dataplane.tunnels import RECORD_PORT
        from cosample.lab.appmirror import UNDERLAY_ANALYSIS, UNDERLAY_SWITCH

        endpoint = f"{UNDERLAY_ANALYSIS}:{RECORD_PORT}"
        key = directory / "record.key"  # the pair's key, as an agent writes it (0600)
        key.touch(mode=0o600)
        key.write_text(secrets.token_hex(32))
        trust = ("--record-key", str(key))
        receiver = _spawn_waiting(
            rig,
            rig.analysis,
            _analyser_argv(
                "--receive-records",
                endpoint,
                "--records-from",
                UNDERLAY_SWITCH,
                *trust,
                "--name",
                name,
                "--state-dir",
                str(directory / "state"),
            ),
            directory / "receiver",
            "receiving records",
            timeout_s,
        )
        sender = _spawn_waiting(
            rig,
            rig.switch,
            _analyser_argv(
                "--interface",
                rig.server_port,
                "--send-records",
                endpoint,
                "--send-records-from",
                UNDERLAY_SWITCH,
                *trust,
                "--name",
                f"{name}-sender",
                "--state-dir",
                str(directory / "sender-state"),
            ),
            directory,
            "capturing on",
            timeout_s,
        )
        return Monitor(kind, sender, directory, receiver=receiver)
    if kind == "tcpdump":
        namespace, marker = rig.server, "listening on"
        argv = [
            "tcpdump",
            "-i",
            "eth0",
            "-n",
            "-w",
            str(directory / "capture.pcap"),
            f"tcp port {SERVICE_PORT}",
        ]
    elif kind == "tshark":
        namespace, marker = rig.server, "Capturing on"
        argv = [
            "tshark",
            "-i",
            "eth0",
            "-n",
            "-l",
            "-f",
            f"tcp port {SERVICE_PORT}",
            "-Y",
            "http.response",
            "-T",
            "fields",
            "-e",
            "http.time",
            "-e",
            "http.response.code",
        ]
    elif kind in ("onsite", "analysis"):
        namespace, marker = (
            (rig.switch, "capturing on") if kind == "onsite" else (rig.analysis, "capturing on")
        )
        # behind the mirror: where the rig's current mechanism delivers its copies
        interface = (
            rig.server_port if kind == "onsite" else ("vx1" if rig.mechanism[0] == "tc" else "vx0")
        )
        argv = _analyser_argv(
            "--interface",
            interface,
            "--name",
            name,
            "--state-dir",
            str(directory / "state"),
            port=port,
            protocol=protocol,
        )
    else:
        raise ExperimentError(
            f"monitor {kind!r}: expected tcpdump, tshark, onsite, analysis or offsite"
        )
    return Monitor(
        kind, _spawn_waiting(rig, namespace, argv, directory, marker, timeout_s), directory
    )


def _spawn_waiting(
    rig, namespace: str, argv: list[str], directory: Path, marker: str, timeout_s: float
) -> subprocess.Popen:
    """Start ``argv`` (output into ``directory``) and wait for ``marker`` on its stderr."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "stdout", "wb") as out, open(directory / "stderr", "wb") as err:
        process = rig._spawn(namespace, argv, stdout=out, stderr=err)
    deadline = time.monotonic() + timeout_s
    while marker not in (directory / "stderr").read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            rig.stop(process)
            raise ExperimentError(
                f"{argv[0]} did not start within {timeout_s:g} s: "
                f"{(directory / 'stderr').read_text(errors='replace')[-400:]}"
            )
        time.sleep(0.05)
    return process


def stop(rig, monitor: Monitor, service: str) -> dict:
    """Stop the monitor (SIGTERM: each flushes; the off-site sender first, so its last records
    reach the receiver) and read what it computed for ``service``."""
    rig.stop(monitor.process, timeout_s=30)
    if monitor.receiver is not None:
        time.sleep(0.3)
        rig.stop(monitor.receiver, timeout_s=30)
    monitor.result = _READERS[monitor.kind](monitor.directory, service)
    return monitor.result


def _tcpdump(directory: Path, service: str) -> dict:
    err = (directory / "stderr").read_text(errors="replace")
    drops = re.search(r"(\d+) packets? dropped by kernel", err)
    return {
        "capture_bytes": (directory / "capture.pcap").stat().st_size,
        "kernel_drops": int(drops.group(1)) if drops else None,
    }


def _tshark(directory: Path, service: str) -> dict:
    times, errors, responses = [], 0, 0
    for line in (directory / "stdout").read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 2 or not parts[1]:
            continue
        responses += 1
        errors += parts[1].split(",")[0].startswith("5")
        if parts[0]:
            times.append(float(parts[0].split(",")[0]))
    err = (directory / "stderr").read_text(errors="replace")
    drops = re.search(r"(\d+) packets? dropped", err)
    return {
        "monitor_responses": responses,
        "monitor_5xx": errors,
        "monitor_mean_ms": 1e3 * sum(times) / len(times) if times else None,
        "kernel_drops": int(drops.group(1)) if drops else None,
    }


def _analyser(directory: Path, service: str) -> dict:
    path = directory / "state" / "windows.jsonl"
    requests = responses = matched = errors = drops = 0
    total_s = 0.0
    for line in path.read_text().splitlines() if path.exists() else ():
        snap = json.loads(line)
        drops = max(drops, snap["dropped"].get("kernel_drops", 0))
        for entry in snap["services"]:
            if entry["service"] != service:
                continue
            requests += entry["requests"]
            responses += entry["responses"]
            matched += entry["matched"]
            errors += entry["status_classes"]["5xx"]
            if entry["service_time_s"]:
                total_s += entry["service_time_s"]["mean"] * entry["matched"]
    sender = directory / "sender-state" / "windows.jsonl"  # the off-site sniffer's capture side
    for line in sender.read_text().splitlines() if sender.exists() else ():
        drops = max(drops, json.loads(line)["dropped"].get("kernel_drops", 0))
    return {
        "monitor_requests": requests,
        "monitor_responses": responses,
        "monitor_5xx": errors,
        "monitor_mean_ms": 1e3 * total_s / matched if matched else None,
        "kernel_drops": drops,
    }


_READERS = {
    "tcpdump": _tcpdump,
    "tshark": _tshark,
    "onsite": _analyser,
    "analysis": _analyser,
    "offsite": _analyser,
}
