"""Collector benchmark: sustained ingest with < 0.1 % loss on one core, beside pmacct's sfacctd.

A realistic stream (OVS's layout: ~7 flow samples of 128-byte headers per datagram; senders
sampling 1-in-64 and mirroring a share to receivers that sample the copies 1-in-1 and report
them with tunnel records) is replayed over loopback at increasing rates, each for
``--seconds``, from this process pinned to one core, to each collector pinned to the other:
``cosample collector run`` (its samples counter read by a real scrape of ``/metrics``) and
``sfacctd`` (samples counted per agent without renormalisation), same stream, same pacing, same
receive buffer, one after the other at every rate, in the same run. A collector's rate is the
highest step it received with less than 0.1 % loss. On a shared machine that rate depends on
the load, so each step also records the CPU seconds the collector's processes used: samples per
CPU second is what one core sustains when it is not shared, compared side by side. Memory per tracked server and per tracked
server pair is measured with tracemalloc on the estimator's state.

Replay side by side (experiments/bench_replay.py, also alone with ``--replay-only``): a capture
of the project's corpus (tests/data/sflow, renumbered as its agents would send it) and one of
many agents, each with its plan, read by ``sfacctd`` and by ``cosample collector replay`` with
and without ``--plan``, and by the daemon's estimator in this process (alone, and after its
admission check); CPU seconds of each, alternating, best of ``--repeats``. ``--baseline`` adds
our rows with the compiled parts (collector/_sflow.c) switched off, in the same run. Every
daemon or command started here is stopped on any exit, and dies with this process
(``PR_SET_PDEATHSIG``).

    python -m cosample.experiments.bench_collector [--quick] [--csv FILE] [--replay-only]
        [--baseline] [--baseline-tree DIR] [--repeats N] [--replay-datagrams N]
        [--many-datagrams N] [--agents N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path

import pandas as pd

from cosample.collector.attribution import build
from cosample.collector.decode import parse_datagram
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory
from cosample.experiments.bench_replay import die_with_parent
from cosample.lab.agentsource import AgentSender
from cosample.lab.pmacct import Sfacctd, free_udp_port, sfacctd_available
from cosample.lab.sflowstream import simulate, vm_address
from cosample.plan.document import plan_from_dict
from cosample.plan.formats import FORMAT_VERSION, PLAN_FORMAT
from cosample.times import format_time

RATES = (20_000, 40_000, 60_000, 80_000, 100_000, 120_000, 150_000, 200_000, 300_000, 400_000)
QUICK_RATES = (5_000, 10_000)
LOSS_LIMIT = 0.001
RECEIVE_BUFFER = 4 << 20
SENDER_CORE, COLLECTOR_CORE = 0, 1


def plan_document(servers: int) -> dict:
    """Every fourth server a receiver (1-in-1); the others sample 1-in-64 and mirror 25 %."""
    now = time.time()
    stamp = format_time
    hosts = {}
    names = [f"s{k}" for k in range(servers)]
    receivers = names[::4]
    for k, name in enumerate(names):
        receiver = name in receivers
        target = receivers[(k // 4) % len(receivers)] if not receiver else None
        hosts[name] = {
            "role": "receiver" if receiver else "sender",
            "local_rate": 1.0 if receiver else 1 / 64,
            "sflow_sampling": 1 if receiver else 64,
            "mirrors": [] if receiver else [{"to": target, "rate": 0.25}],
            "receives": [],
            "tunnel_ip": f"172.30.{k // 250}.{k % 250 + 1}",
            # the sFlow agent sends from a loopback address: the collector admits a
            # datagram only from the agent address it names
            "agent_ip": f"127.30.{k // 250}.{k % 250 + 1}",
        }
    for name, host in hosts.items():
        for mirror in host["mirrors"]:
            hosts[mirror["to"]]["receives"].append({"from": name, "rate": mirror["rate"]})
    return {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "version": 1,
        "created": stamp(now - 3600),
        "expires": stamp(now + 86400),
        "plan_id": "b" * 64,
        "hosts": hosts,
    }


def make_stream(servers: int, samples: int, seed: int = 0):
    """About ``samples`` flow samples over 10 s: receivers' own traffic and the senders'."""
    document = plan_document(servers)
    plan = plan_from_dict(document)
    per_sender = samples / (servers * 0.75) / (1 / 64 + 0.25)
    packets = {
        name: int(per_sender if host.mirrors else per_sender / 20)
        for name, host in plan.hosts.items()
    }
    stream = simulate(plan, packets, duration_s=10.0, seed=seed)
    counts = [len(parse_datagram(data).flow_samples) for _, data in stream.datagrams]
    return document, [data for _, data in stream.datagrams], counts


def send(
    datagrams: list[bytes], counts: list[int], target: tuple[str, int], rate: float, seconds: float
) -> int:
    """Replay the datagrams (cyclically) at ``rate`` samples/s for ``seconds``; samples sent."""
    sender = AgentSender()
    sent, index, start = 0, 0, time.perf_counter()
    end = start + seconds
    try:
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            due = rate * (now - start)
            while sent < due:
                sender.send(datagrams[index], target)
                sent += counts[index]
                index = (index + 1) % len(datagrams)
            time.sleep(0.0005)
    finally:
        sender.close()
    return sent


def _pinned(argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(COLLECTOR_CORE), *argv]


class Ours:
    name = "cosample collector"

    def __init__(self, plan_path: Path) -> None:
        self.port, self.http = free_udp_port(), _free_tcp_port()
        self.process = subprocess.Popen(
            _pinned(
                [
                    sys.executable,
                    "-m",
                    "cosample",
                    "collector",
                    "run",
                    "--plan",
                    str(plan_path),
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    "--metrics-port",
                    str(self.http),
                    "--window",
                    "30",
                    "--export-interval",
                    "1",
                    "--name",
                    "bench",
                    "--receive-buffer",
                    str(RECEIVE_BUFFER),
                    "--insecure-unsigned",
                ]
            ),
            stdout=subprocess.DEVNULL,  # its own unsigned plan
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 30
        while self.received() is None:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("cosample collector did not start")
            time.sleep(0.2)

    def received(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("cosample_collector_samples_total "):
                return int(float(line.split()[1]))
        return None

    def settle(self) -> int:
        last, since = self.received(), time.monotonic()
        while time.monotonic() - since < 2.5:
            time.sleep(0.5)
            now = self.received()
            if now != last:
                last, since = now, time.monotonic()
        return last or 0

    def pids(self) -> list[int]:
        return [self.process.pid, *_children(self.process.pid)]  # and its receive process

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class Theirs:
    name = "pmacct sfacctd"

    def __init__(self, directory: Path) -> None:
        self.peer = Sfacctd(
            directory, renormalize=False, receive_buffer=RECEIVE_BUFFER, preexec_fn=die_with_parent
        )
        self.peer.start()
        os.sched_setaffinity(self.peer._process.pid, {COLLECTOR_CORE})
        for child in _children(self.peer._process.pid):
            os.sched_setaffinity(child, {COLLECTOR_CORE})
        self.port = self.peer.port

    def settle(self) -> int:
        return sum(self.peer.settle(quiet_s=3.0).values())

    def pids(self) -> list[int]:
        return [self.peer._process.pid, *_children(self.peer._process.pid)]

    def stop(self) -> None:
        self.peer.stop()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes."""
    ticks, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ingest(rates, seconds: float, servers: int, samples: int, log=print) -> pd.DataFrame:
    document, datagrams, counts = make_stream(servers, samples)
    rows = []
    os.sched_setaffinity(0, {SENDER_CORE})
    with tempfile.TemporaryDirectory(prefix="cosample-bench-") as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps(document))
        for make in (lambda: Ours(plan_path), lambda: Theirs(Path(tmp) / "pmacct")):
            collector = make()
            try:
                before = collector.settle()
                for rate in rates:
                    cpu = cpu_seconds(collector.pids())
                    sent = send(datagrams, counts, ("127.0.0.1", collector.port), rate, seconds)
                    after = collector.settle()
                    cpu = cpu_seconds(collector.pids()) - cpu
                    loss = 1 - (after - before) / sent
                    received, before = after - before, after
                    rows.append(
                        {
                            "collector": collector.name,
                            "offered_samples_per_s": rate,
                            "sent_samples": sent,
                            "sent_samples_per_s": sent / seconds,
                            "received_samples": received,
                            "loss": loss,
                            "cpu_s": cpu,
                            "samples_per_cpu_s": received / cpu if cpu else float("nan"),
                            "load_average": os.getloadavg()[0],
                        }
                    )
                    log(f"{collector.name:>20}: {rate:>7} samples/s offered, loss {loss:.4%}")
                    if loss > LOSS_LIMIT:
                        break
            finally:
                collector.stop()
    return pd.DataFrame(rows)


def in_process(servers: int, samples: int, repeats: int = 3) -> float:
    """Samples per CPU second of ``Estimator.ingest`` alone (no socket), best of ``repeats``:
    what one core does when it is not shared."""
    document, datagrams, counts = make_stream(servers, samples, seed=1)
    best = 0.0
    for _ in range(repeats):
        estimator = Estimator(build(plan_from_dict(document)), window_s=30.0)
        now = time.time()
        start = time.process_time()
        for k, data in enumerate(datagrams):
            estimator.ingest(data, now + k * 1e-4)
        best = max(best, sum(counts) / (time.process_time() - start))
    return best


def memory(quick: bool = False) -> dict[str, float]:
    """Bytes of estimator state per tracked server and per tracked server pair (30 s window)."""

    def state_bytes(servers: int, destinations: int) -> int:
        names = [f"s{k}" for k in range(servers)]
        hosts = {
            n: {
                "role": "receiver",
                "local_rate": 1 / 16,
                "sflow_sampling": 16,
                "mirrors": [],
                "receives": [],
                "tunnel_ip": f"172.31.{k // 250}.{k % 250 + 1}",
            }
            for k, n in enumerate(names)
        }
        document = plan_document(4) | {"hosts": hosts}
        plan = plan_from_dict(document)
        inventory = Inventory(
            servers={n: {"vm_addresses": [vm_address(k, 2)]} for k, n in enumerate(names)}
        )
        table = build(plan, inventory if destinations else None)
        streams = []
        for k, name in enumerate(names):
            for d in range(max(destinations, 1)):
                streams.append((name, names[(k + d) % servers]))
        data = []
        from cosample.collector.encode import SampleSpec, datagram, flow_sample
        from cosample.lab.sflowstream import frame

        for second in range(30):
            for k, (src, dst) in enumerate(streams):
                header, length = frame(vm_address(int(src[1:])), vm_address(int(dst[1:]), 2), 500)
                data.append(
                    (
                        1.7e9 + second,
                        datagram(
                            plan.hosts[src].tunnel_ip,
                            second + 1,
                            0,
                            [flow_sample(SampleSpec(second + 1, 16, 16, header, length))],
                        ),
                    )
                )
        tracemalloc.start()
        estimator = Estimator(table, window_s=30.0)
        base = tracemalloc.get_traced_memory()[0]
        for when, payload in data:
            estimator.ingest(payload, when)
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        return used

    small, large = (50, 200) if quick else (200, 2000)
    per_server = (state_bytes(large, 0) - state_bytes(small, 0)) / (large - small)
    pairs_small, pairs_large = small * 1, small * (10 if quick else 20)
    per_pair = (state_bytes(small, pairs_large // small) - state_bytes(small, 1)) / (
        pairs_large - pairs_small
    )
    return {"bytes_per_server": per_server, "bytes_per_server_pair": per_pair}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two low rates, 1 s each (tests)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per rate (default 8)")
    parser.add_argument(
        "--servers", type=int, default=40, help="servers in the stream (default 40)"
    )
    parser.add_argument("--csv", type=Path, help="write the tidy ingest table here")
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="only the replay side by side (no sockets, one core is enough)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="replay repeats (default 3)")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="replay side by side also with the compiled parts off (before/after)",
    )
    parser.add_argument(
        "--replay-datagrams",
        type=int,
        default=120_000,
        help="datagrams in the corpus capture (default 120000)",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="DIR",
        help="replay side by side also with another revision's commands "
        "(`python -m research.revision REV DIR`, built in DIR/source)",
    )
    parser.add_argument(
        "--many-datagrams",
        type=int,
        default=210_000,
        help="datagrams in the many-agents capture (default 210000)",
    )
    parser.add_argument(
        "--agents",
        type=int,
        default=1_000,
        help="agents in the many-agents capture (default 1000)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally-blocks stop the daemons
    if args.replay_only:
        return _print_replay(args)
    reason = sfacctd_available()
    if reason or len(os.sched_getaffinity(0)) < 2:
        print(
            f"bench_collector: cannot run side by side: {reason or 'needs 2 cores'}",
            file=sys.stderr,
        )
        return 2
    rates = QUICK_RATES if args.quick else RATES
    seconds = 1.0 if args.quick else args.seconds
    table = ingest(rates, seconds, args.servers, 20_000 if args.quick else 150_000)
    if args.csv:
        from cosample.experiments.files import write_csv

        write_csv(table, args.csv)
    best = {
        name: group.loc[group["loss"] < LOSS_LIMIT, "offered_samples_per_s"].max()
        for name, group in table.groupby("collector")
    }
    mem = memory(args.quick)
    bound = in_process(args.servers, 5_000 if args.quick else 50_000)
    print(table.to_string(index=False))
    for name, rate in best.items():
        print(f"{name}: highest offered rate with < 0.1 % loss: {rate} samples/s")
    ours, theirs = best.get("cosample collector"), best.get("pmacct sfacctd")
    if ours and theirs:
        print(f"ratio cosample/sfacctd: {ours / theirs:.2f}")
    print(
        f"in-process ingest (decode, attribute, add; no socket), best of 3: {bound:.0f} "
        f"samples per CPU second; load average {os.getloadavg()[0]:.2f}"
    )
    for name, group in table.groupby("collector"):
        ok = group[group["loss"] < LOSS_LIMIT]
        if len(ok):
            top = ok.loc[ok["offered_samples_per_s"].idxmax()]
            print(
                f"{name}: {top['samples_per_cpu_s']:.0f} samples per CPU second at its highest "
                f"rate with < 0.1 % loss"
            )
    print(
        f"memory: {mem['bytes_per_server']:.0f} bytes per tracked server, "
        f"{mem['bytes_per_server_pair']:.0f} bytes per tracked server pair (30 s window)"
    )
    return _print_replay(args)


def _print_replay(args) -> int:
    """Run and print the replay side by side (experiments/bench_replay.py): per capture, each
    row's best against sfacctd's."""
    if shutil.which("sfacctd") is None:
        print("bench_collector: replay side by side needs sfacctd", file=sys.stderr)
        return 2
    from cosample.experiments.bench_replay import side_by_side, summary

    table = side_by_side(
        6_000 if args.quick else args.replay_datagrams,
        6_000 if args.quick else args.many_datagrams,
        50 if args.quick else args.agents,
        1 if args.quick else args.repeats,
        baseline=args.baseline,
        baseline_tree=args.baseline_tree,
    )
    print(table.to_string(index=False))
    print("\n".join(summary(table)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
