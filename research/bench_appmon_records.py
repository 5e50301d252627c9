"""The records receiver's part of ``bench_appmon_saturation`` (the off-site sniffer's analysis
host: ``appmon run --receive-records`` with the pair's key and the sender's address), and the
helpers both parts use: a process's CPU seconds, the analyser's windows, pinning.

Datagrams of about 75 answered requests each are made ahead with base times from 0 and dated as
they are sent (``redate``: the base moved, the tag computed again), so every record is as fresh
as a sniffer's and the sender spends a few microseconds per datagram, not per record.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from cosample.appmon.records import TAG_BYTES, RecordBuffer, tag

#: Idle seconds after a step: its last window closes before the next step starts.
SETTLE_S = 2.5
BASE = struct.Struct("!Q")  # a records datagram's base time (µs), at byte 20 of its header


def redate(template: bytes, start: float, key: bytes) -> bytes:
    """A records datagram made with base times from 0, moved to ``start`` and tagged again."""
    body = bytearray(template[:-TAG_BYTES])
    BASE.pack_into(body, 20, BASE.unpack_from(body, 20)[0] + round(start * 1e6))
    return bytes(body) + tag(key, bytes(body))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def windows(state: Path) -> list[dict]:
    path = state / "windows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def pin(pid: int, core: int | None) -> None:
    if core is not None and 0 <= core < (os.cpu_count() or 1):
        os.sched_setaffinity(pid, {core})


def favour(pid: int, nice: int) -> None:
    """``nice`` below 0: a larger share of its core for process ``pid``, which leads a session
    of its own: its nice value and its session's scheduling group's (with autogroups on, as
    here, a process's nice value weighs only against its own session's processes)."""
    if not nice:
        return
    if os.getsid(pid) != pid:
        raise ValueError(f"favour: process {pid} does not lead a session of its own")
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    group = Path(f"/proc/{pid}/autogroup")
    if group.exists():
        group.write_text(str(nice))


def records_settled(state: Path, known: int, timeout_s: float = 60.0) -> list[dict]:
    """The windows once two closed in a row with no record datagram (the receiver has read what
    the socket held)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S / 2)
        got = windows(state)
        new = got[known:]
        if (
            len(new) >= 3
            and not any(w.get("record_datagrams") for w in new[-2:])
            and any(w.get("record_datagrams") for w in new)
        ):
            return got
    sys.exit("bench_appmon_saturation: the records receiver did not settle within 60 s")


def records_part(args, scratch: Path) -> list[dict]:
    """The receiver of compact records at rising record rates (loopback, authenticated)."""
    key = bytes(range(32))
    key_file = scratch / "record.key"
    key_file.write_text(key.hex())
    key_file.chmod(0o600)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = scratch / "records"
    receiver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "appmon",
            "run",
            "--receive-records",
            f"127.0.0.1:{port}",
            "--records-from",
            "127.0.0.2",
            "--record-key",
            str(key_file),
            "--window",
            "1s",
            "--state-dir",
            str(state),
            "--name",
            "records",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a scheduling group of its own (``favour``)
    )
    rows = []
    try:
        while b"receiving records" not in receiver.stderr.readline():
            if receiver.poll() is not None:
                sys.exit("bench_appmon_saturation: the records receiver did not start")
        pin(receiver.pid, args.analyser_core)
        favour(receiver.pid, args.analyser_nice)
        service = (socket.inet_aton("10.77.0.2"), 80)
        out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        out.bind(("127.0.0.2", 0))
        buffer = RecordBuffer(Counter(), rate=1e9, key=key)
        for rate in args.record_rates:  # records per second: a request and its response are two
            before = windows(state)
            count = int(rate * args.step_seconds)
            # made ahead from a base time of 0, then dated as they are sent (``redate``)
            templates = []
            for number in range(count // 2):
                at = 2 * number / rate
                buffer.request(service, at)
                buffer.response(service, at + 0.001, 200, 0.001)
                if len(buffer.ready) > 100:
                    templates += buffer.take()
            templates += buffer.take(partial=True)
            before_cpu = cpu_seconds(receiver.pid)
            started = time.time()
            for data in templates:
                offset = BASE.unpack_from(data, 20)[0] / 1e6
                wait = started + offset - time.time()
                if wait > 0.0005:
                    time.sleep(wait)
                try:
                    out.sendto(redate(data, started, key), ("127.0.0.1", port))
                except OSError:
                    pass
            seconds = time.time() - started
            after = records_settled(state, len(before))
            cpu = cpu_seconds(receiver.pid) - before_cpu
            mine = after[len(before) :]
            taken = sum(s["requests"] + s["responses"] for w in mine for s in w["services"])
            lost = sum(w.get("record_datagrams_lost") or 0 for w in mine)
            refused = sum(  # records that came too late for their window, or found no room
                after[-1]["dropped"].get(name, 0)
                - (before[-1]["dropped"].get(name, 0) if before else 0)
                for name in ("records_late", "records_pending_full")
            )
            row = {
                "offered": rate,
                "sent_per_s": count / seconds,
                "datagrams": len(templates),
                "taken": taken,
                "datagrams_lost": lost,
                "records_refused": refused,
                "losses": lost + refused,
                "us_per_record": cpu / max(1, taken) * 1e6,
                "core_share": cpu / max(1, taken) * count / seconds,
                "load": os.getloadavg()[0],
            }
            rows.append(row)
            print(
                f"{rate:>9,.0f} {row['sent_per_s']:>10,.0f} {len(templates):>9,} {taken:>10,} "
                f"{lost:>8,} {refused:>8,} {row['us_per_record']:>9.2f} {row['core_share']:>7.0%} "
                f"{row['load']:>5.1f}",
                flush=True,
            )
            if (lost or refused) and not args.keep_going:
                break
        out.close()
    finally:
        if receiver.poll() is None:
            receiver.terminate()
            receiver.wait(timeout=30)
    return rows
