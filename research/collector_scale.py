"""The collector daemon with a 10^5-host plan: does it ingest at its usual rate through a plan change?

``python -m research.collector_scale [--servers 100000] [--baseline 1000]
[--rate 20000] [--before 20] [--after 30]`` runs ``cosample collector run`` twice, side by side
in one invocation: with a plan of ``--baseline`` hosts (the usual rate) and with one of
``--servers`` hosts, both made by the planner's benchmark generator
(``bench_planner.random_datacentre``, solved, ``build_plan``). Each host's agent address is a
loopback address, so one sender process can send every datagram from the agent it names (the
collector's source check). The sender offers ``--rate`` flow samples/s (datagrams of 8 local
samples from up to 1,000 hosts that sample locally, at their planned 1-in-N, with consecutive
sequence numbers) for ``--before`` seconds, then publishes the next plan (another draw of the
generator: another plan for the same hosts, written atomically) and goes on for ``--after``
seconds, longer if the daemon does not run the new plan by then: until it has run it 5 s,
within 300 s of its publication. Once a second it reads the daemon's ``/status`` (its counters, no per-server rows), and
at the end reports per phase (before the change; from the change until the collector runs the new
plan plus 5 s; after) the samples the daemon counted per second against those offered, the
largest backlog (offered minus counted) and the kernel's receive drops. The stream is the same
for both plan sizes; the ratio of the two ingest rates is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import frame, vm_address

SAMPLES_PER_DATAGRAM = 8
SENDERS = 1000


def plan_document(servers: int, version: int, seed: int) -> dict:
    """A solved plan for ``servers`` hosts (``seed``: which traffic), with tunnel and agent
    addresses."""
    from cosample.experiments.bench_planner import random_datacentre
    from cosample.planner.planbytes import plan_id
    from cosample.planner.planfile import build_plan
    from cosample.planner.solvers import solve

    dc = random_datacentre(servers, seed=seed)
    plan = build_plan(dc, solve(dc), version=version, report=False)
    for k, name in enumerate(dc.names):
        host = dict(plan["hosts"][name])
        host["tunnel_ip"] = f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}"
        host["agent_ip"] = f"127.{(k >> 16 & 255) + 1}.{k >> 8 & 255}.{k & 255}"
        plan["hosts"][name] = host
    plan["plan_id"] = plan_id(plan)
    return plan


def write(path: Path, plan: dict) -> int:
    data = orjson.dumps(plan)  # compact JSON, as json.dumps(separators=...) but 10 times faster
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return len(data)


class Stream:
    """Datagrams of 8 local samples per host, sequence numbers patched in place per send."""

    def __init__(self, plan: dict) -> None:
        hosts = [
            (host["agent_ip"], host["sflow_sampling"])
            for host in plan["hosts"].values()
            if host.get("sflow_sampling")
        ][:SENDERS]
        header, length = frame(vm_address(0), vm_address(1, 2), 1000)
        self.templates = []
        for agent, rate in hosts:
            sample = flow_sample(SampleSpec(0, rate, 0, header, length))
            data = bytearray(datagram(agent, 0, 0, [sample] * SAMPLES_PER_DATAGRAM))
            self.templates.append([data, len(sample), rate, 0])
        self.index = 0

    def next(self) -> bytes:
        template = self.templates[self.index]
        self.index = (self.index + 1) % len(self.templates)
        data, size, rate, sent = template
        template[3] = sent + 1
        struct.pack_into("!I", data, 16, (sent + 1) & 0xFFFFFFFF)  # datagram sequence
        for k in range(SAMPLES_PER_DATAGRAM):
            number = sent * SAMPLES_PER_DATAGRAM + k + 1
            struct.pack_into("!I", data, 28 + k * size + 8, number & 0xFFFFFFFF)
            struct.pack_into("!I", data, 28 + k * size + 20, (number * rate) & 0xFFFFFFFF)
        return bytes(data)


def status(http: tuple[str, int]) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://{http[0]}:{http[1]}/status", timeout=2) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


#: Total seconds from the publication for the daemon to run the new plan; until then the stream
#: goes on past ``after_s`` (a loaded machine parsed a 10^5-host plan in 39 s).
SWITCH_DEADLINE_S = 300.0
#: Seconds the stream goes on after the new plan is in force.
AFTER_SWITCH_S = 5.0


def run(
    servers: int,
    rate: float,
    before_s: float,
    after_s: float,
    work: Path,
    switch_deadline_s: float = SWITCH_DEADLINE_S,
) -> dict:
    """One daemon, one plan size: the timeline and the phases' figures. The stream lasts
    ``before_s + after_s`` and, when the new plan is not in force by then, until it is plus
    ``AFTER_SWITCH_S`` (at most ``switch_deadline_s`` after its publication)."""
    path, log = work / f"plan-{servers}.json", work / f"collector-{servers}.log"
    first, second = plan_document(servers, 1, seed=1), plan_document(servers, 2, seed=2)
    plan_bytes = write(path, first)
    stream = Stream(first)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "collector",
            "run",
            "--plan",
            str(path),
            "--insecure-unsigned",
            "--listen",
            "127.0.0.1:0",
            "--metrics-port",
            "0",
            "--name",
            f"scale-{servers}",
            "--window",
            "30",
            "--export-interval",
            "1",
            "--plan-interval",
            "5",
            "--plan-timeout",
            "30",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        listen, http = _addresses(process, log)
        began = time.monotonic()
        while (now := status(http)) is None or now["plan_version"] != 1:
            if time.monotonic() - began > 300:
                raise RuntimeError(f"the collector did not run plan 1 within 300 s: {now}")
            time.sleep(0.5)
        first_read_s = time.monotonic() - began
        timeline, change_at, switched_at = [], None, None
        with AgentSender() as sender:
            start = time.monotonic()
            sent_samples, next_status = 0, start
            while _streaming(
                elapsed := time.monotonic() - start,
                before_s + after_s,
                switched_at,
                before_s + switch_deadline_s,
            ):
                if change_at is None and elapsed >= before_s:
                    write(path, second)
                    change_at = elapsed
                while sent_samples < rate * elapsed:
                    sender.send(stream.next(), listen)
                    sent_samples += SAMPLES_PER_DATAGRAM
                if time.monotonic() >= next_status:
                    now = status(http) or {}
                    timeline.append(
                        {
                            "t": round(elapsed, 2),
                            "sent": sent_samples,
                            "counted": now.get("samples"),
                            "version": now.get("plan_version"),
                            "kernel_drops": now.get("kernel_receive_drops"),
                        }
                    )
                    if switched_at is None and now.get("plan_version") == 2:
                        switched_at = elapsed
                    next_status += 1.0
                time.sleep(0.001)
        end = elapsed
        final = _settle(http, sent_samples)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return {
        "servers": servers,
        "plan_mb": round(plan_bytes / 1e6, 1),
        "first_read_s": round(first_read_s, 1),
        "change_at_s": change_at,
        "switched_after_s": None if switched_at is None else round(switched_at - change_at, 1),
        "sent": sent_samples,
        "counted": final.get("samples"),
        "kernel_drops": final.get("kernel_receive_drops"),
        "timeline": timeline,
        "streamed_s": round(end, 1),
        "phases": _phases(timeline, change_at, switched_at, end),
        "final": final,
        "log": log.read_text().splitlines()[-20:],
    }


def _streaming(elapsed: float, planned: float, switched_at: float | None, deadline: float) -> bool:
    """Whether the stream goes on: for ``planned`` seconds, then until the new plan has run
    ``AFTER_SWITCH_S`` (``switched_at``), but never past ``deadline``."""
    if elapsed < planned:
        return True
    return elapsed < deadline and (switched_at is None or elapsed < switched_at + AFTER_SWITCH_S)


def _addresses(process: subprocess.Popen, log: Path) -> tuple[tuple[str, int], tuple[str, int]]:
    """The daemon's sFlow and HTTP addresses, from the line it logs when it listens."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        for line in log.read_text().splitlines():
            if "sFlow on" in line:
                sflow, http = line.split("sFlow on ", 1)[1].split(", HTTP on ")
                host, port = sflow.rsplit(":", 1)
                http_host, http_port = http.strip().rsplit(":", 1)
                return (host, int(port)), (http_host, int(http_port))
        time.sleep(0.2)
    raise RuntimeError(f"the collector did not listen: {log.read_text()[-2000:]}")


def _settle(http: tuple[str, int], sent: int, timeout_s: float = 60.0) -> dict:
    deadline, last = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        last = status(http) or last
        if last.get("samples", 0) + 0 >= sent:
            break
        time.sleep(0.5)
    return last


def _phases(
    timeline: list[dict], change_at: float, switched_at: float | None, end: float
) -> list[dict]:
    """Counted and offered samples/s per phase, and the largest backlog in it."""
    settled = (switched_at if switched_at is not None else end) + 5.0
    bounds = (
        ("before the change", 0.0, change_at),
        ("change, until 5 s after the switch", change_at, min(settled, end)),
        ("after", min(settled, end), end),
    )
    out = []
    for name, low, high in bounds:
        rows = [row for row in timeline if low <= row["t"] <= high and row["counted"] is not None]
        if len(rows) < 2:
            continue
        span = rows[-1]["t"] - rows[0]["t"]
        out.append(
            {
                "phase": name,
                "seconds": round(span, 1),
                "offered_per_s": round((rows[-1]["sent"] - rows[0]["sent"]) / span),
                "counted_per_s": round((rows[-1]["counted"] - rows[0]["counted"]) / span),
                "largest_backlog": max(row["sent"] - row["counted"] for row in rows),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=20_000.0, help="samples/s offered")
    parser.add_argument("--before", type=float, default=20.0)
    parser.add_argument("--after", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cosample-collector-scale-") as folder:
        results = [
            run(n, args.rate, args.before, args.after, Path(folder))
            for n in (args.baseline, args.servers)
        ]
    for result in results:
        print(
            f"{result['servers']} hosts: plan {result['plan_mb']} MB, first read "
            f"{result['first_read_s']} s, new plan in force {result['switched_after_s']} s "
            f"after its publication; sent {result['sent']}, counted {result['counted']}, "
            f"kernel drops {result['kernel_drops']}"
        )
        for phase in result["phases"]:
            print(
                f"  {phase['phase']:<36} {phase['seconds']:>5} s  offered "
                f"{phase['offered_per_s']:>7}/s  counted {phase['counted_per_s']:>7}/s  "
                f"largest backlog {phase['largest_backlog']} samples"
            )
    usual, large = results
    for a, b in zip(usual["phases"], large["phases"]):
        print(
            f"ratio {large['servers']}/{usual['servers']} hosts, {a['phase']}: counted/s "
            f"{b['counted_per_s'] / max(a['counted_per_s'], 1):.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
