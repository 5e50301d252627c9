"""Controller cycle benchmark: read a snapshot, estimate, plan, decide, sign, write, at 10^4..10^6.

For each size a synthetic collector snapshot is written first (every server sends to itself and
to three random others, the planner benchmark's instance, ``bench_planner.random_datacentre``),
then a fresh process runs three controller cycles on it, as ``cosample controller run`` would:

1. the first cycle publishes (no plan in force yet): read and validate the snapshot, estimate,
   smooth, plan with the exact solver, judge, version, sign with ed25519, write atomically;
2. the second cycle reads a newer snapshot of the same traffic and judges the plan in force
   against the new candidate (no publication: nothing changed);
3. the third reads the traffic moved (each server's own traffic, and all it sends, scaled by a
   factor drawn in [0.6, 1.4]) after the first publication's quiet time: the plan in force
   overloads some servers, and the controller publishes again, as a two-phase plan set (some
   server's load rises while another component of it falls): what every later publication of
   a running controller costs.

Then a controller restarts on the state those cycles left, in a process of its own (the
publication in force read back, its shares computed, served again): its CPU time and peak memory.

Each cycle's wall-clock time is split by step (the controller's own ``timings``), and so is its
CPU time (``<step>_cpu``: the machine is shared, wall-clock time includes waiting for a core); peak memory is the
process's peak resident set (``VmHWM``) with the size after imports beside it.
One process per size, so peaks do not carry over. The controller reads the snapshot in the
collector's binary columnar form (``collector.snapshotbin``; ``--form json``: the JSON form).
The process keeps its freed memory as ``controller run`` has it (``controller.memory``;
``--default-memory``: the C library's and numpy's defaults, ``--compare-memory``: both,
alternating). ``--no-slices``: the target writes the whole plan alone, as ``controller run
--no-slices``; by default it also writes every host's slice, as ``controller run`` does.
``--serve``: the HTTP target on loopback, as ``controller run --serve`` (the slices built in
memory and served on request; a folder holds one file per host: about 10^6 file creations,
tens of seconds of kernel time, at 10^6 hosts).

Beside each figure, its floor, measured in a fresh process of its own on the same files: reading
the snapshot's bytes into its arrays (``np.frombuffer`` on the binary form; orjson and
``np.asarray`` on the JSON form), the exact solver alone on the same data centre, and signing
(ed25519) and writing (with fsync) the published plan's bytes once; the cycle's floor is their
sum (the kept cycle's: read and plan). Peak memory beside the floor process's.

``--compare-compiled N`` times a two-phase plan set's first phase at N servers by the Python
transition and by the compiled one (``cosample/plan/_transition.c``), alternating in one
process, and prints both CPU times and their ratio.

``--baseline-tree DIR`` runs the code of another revision laid out in DIR (``python -m
research.revision REV DIR`` from a clone) on the same snapshot, alternating with the working
tree's ``--repeats`` times, and prints their CPU-time ratios: old and new side by side in one
run, under the same load.

    python -m research.bench_controller [--sizes 10000 100000 1000000] [--csv FILE]
    python -m research.bench_controller --sizes 1000000 --form json
    python -m research.bench_controller --sizes 100000 --baseline-tree DIR --repeats 5
    python -m research.bench_controller --two-phase 100000
    python -m research.bench_controller --compare-compiled 100000 --repeats 3
    python -m research.bench_controller --sizes 1000000 --no-slices --compare-memory
    python -m research.bench_controller --sizes 1000000 --serve --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from cosample.collector.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION
from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.experiments.errors import ExperimentError
from cosample.experiments.othertree import checked
from cosample.times import format_time
from research import ROOT

SIZES = (10_000, 100_000, 1_000_000)
#: What each cycle must do: publish (no plan yet), keep (the same traffic), publish again (the
#: traffic moved: the plan in force overloads some servers)
EXPECTED = {1: "published", 2: "kept", 3: "published"}
REPOSITORY = Path(__file__).resolve().parents[1]
TARGET_SERVERS, TARGET_SECONDS = 100_000, 2.0
LARGE_SERVERS, LARGE_CPU_S = 1_000_000, 5.0  # issue 25: a cycle at 10^6 under 5 s CPU
CHECK_UP_TO = 100_000  # the agents' reader on the published plan (10^6: minutes and gigabytes)
CYCLE_S = 30  # the second cycle's snapshot is this much newer
#: The third cycle's snapshot: the traffic moved (each server's by a factor drawn in MOVED),
#: this much after the first, when the first publication's quiet time is over.
MOVED, MOVED_AFTER_S = (0.6, 1.4), 900
FORMS = {"binary": "bin", "json": "json"}  # --form: the snapshot file's suffix


def write_snapshot(servers: int, path: Path, moment: datetime, seed: int = 0) -> None:
    """The planner benchmark's instance as a collector snapshot (columnar JSON) at ``path``."""
    from cosample.experiments.bench_planner import random_datacentre

    dc = random_datacentre(servers, seed=seed)
    own = np.round(dc.own_pps, 3)
    n = dc.size
    keys = dc.traffic_src.astype(np.int64) * n + dc.traffic_dst  # one entry per pair, as the
    order = np.argsort(keys, kind="stable")  # collector writes them
    keys, values = keys[order], np.round(dc.traffic_pps[order], 3)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    pps = np.add.reduceat(values, starts)
    pairs = keys[starts]
    document = _snapshot_document(dc.names, own, pairs, pps, moment)
    path.write_text(json.dumps(document))
    capacity = {"capacity": dc.capacity_pps.tolist()}
    path.with_suffix(".capacity.json").write_text(json.dumps(capacity))
    later = dict(document, time=format_time(moment + timedelta(seconds=CYCLE_S)))
    path.with_name("snap2.json").write_text(json.dumps(later))
    # the traffic moved: each server's own traffic, and all it sends, by a factor in [0.6, 1.4]
    factor = np.random.default_rng(seed + 1).uniform(*MOVED, n)
    moved = _snapshot_document(
        dc.names,
        np.round(own * factor, 3),
        pairs,
        np.round(pps * factor[pairs // n], 3),
        moment + timedelta(seconds=MOVED_AFTER_S),
    )
    path.with_name("snap3.json").write_text(json.dumps(moved))
    from cosample.collector import snapshotbin
    from cosample.collector.snapshot import parse_snapshot_json

    for name, doc in (("snap.bin", document), ("snap2.bin", later), ("snap3.bin", moved)):
        binary = snapshotbin.encode(parse_snapshot_json(json.dumps(doc).encode()))
        path.with_name(name).write_bytes(binary)


def again_snapshots(
    folder: Path, suffix: str, started: datetime, count: int
) -> list[tuple[int, str]]:
    """``count`` more cycles' snapshots in ``folder`` (their offsets from ``started`` and names),
    ``MOVED_AFTER_S`` apart after the third: the traffic back as it was, moved again, and so on.
    Each overloads some servers under the plan in force, so each cycle publishes two phases: the
    cycle a running controller repeats while its traffic keeps moving, in a process whose heap
    has grown to what such a cycle takes (the third cycle's is its first)."""
    from cosample.collector import snapshotbin

    schedule = []
    for k in range(count):
        later_s, name = MOVED_AFTER_S * (k + 2), f"again{k}"
        moment = started + timedelta(seconds=later_s)
        data = (folder / f"{('snap', 'snap3')[k % 2]}.{suffix}").read_bytes()
        if suffix == FORMS["binary"]:
            data = snapshotbin.encode(snapshotbin.decode(data).model_copy(update={"time": moment}))
        else:
            data = json.dumps({**json.loads(data), "time": format_time(moment)}).encode()
        (folder / f"{name}.{suffix}").write_bytes(data)
        schedule.append((later_s, name))
    return schedule


def _snapshot_document(
    names: list[str], own: np.ndarray, pairs: np.ndarray, pps: np.ndarray, moment: datetime
) -> dict:
    """A collector snapshot (columnar JSON) of servers sending ``own`` packets/s, ``pps`` of
    it to each pair ``src * n + dst`` of ``pairs``."""
    n = len(names)
    table = {
        "name": list(names),
        "packets_per_s": own.tolist(),
        "packets_per_s_ci95_low": (own * 0.97).tolist(),
        "packets_per_s_ci95_high": (own * 1.03).tolist(),
        "bytes_per_s": (own * 800).tolist(),
        "bytes_per_s_ci95_low": (own * 770).tolist(),
        "bytes_per_s_ci95_high": (own * 830).tolist(),
        "samples": [300] * n,
        "samples_per_s": [10.0] * n,
        "local_samples": [300] * n,
        "mirrored_samples": [0] * n,
        "coverage": [0.5] * n,
        "last_sample_age_s": [0.0] * n,
    }
    return {
        "format": SNAPSHOT_FORMAT,
        "format_version": SNAPSHOT_VERSION,
        "collector": "bench",
        "time": format_time(moment),
        "window_s": 30.0,
        "plan": None,
        "servers": table,
        "traffic_pps": {
            "names": list(names),
            "src": (pairs // n).tolist(),
            "dst": (pairs % n).tolist(),
            "pps": pps.tolist(),
        },
        "dropped": {},
    }


def measure(
    servers: int,
    folder: Path,
    form: str = "json",
    slices: bool = True,
    serve: bool = False,
    again: int = 0,
) -> dict:
    """Three cycles on the snapshots in ``folder`` (run in a process of its own), read in ``form``
    (``FORMS``; old code reads ``snap.json``); ``slices=False``: the target writes the whole
    plan alone (``controller run --no-slices``); ``serve``: the HTTP target on loopback
    (``controller run --serve``: slices built in memory, no file per host); ``again``: that
    many more cycles after them (``again_snapshots``), each publishing two phases."""
    from cosample.controller.loop import Controller  # and the targets, before the size below
    from cosample.plan.signing import generate_keypair

    rss_imports = _rss_mb()
    inventory = _inventory(servers, folder)
    generate_keypair(folder / "key.pem", folder / "key.pub")
    suffix = FORMS[form]
    snapshot = folder / f"current.{suffix}"  # what the controller reads: each cycle's snapshot
    started = datetime.fromisoformat(_snapshot_time(folder / "snap.json"))
    clock = [started]
    settings, target = _controller_parts(folder, snapshot, slices, serve)
    controller = Controller(inventory, settings, target, folder / "state", clock=lambda: clock[0])
    rows = []
    published = {}  # cycle -> the bytes it published, as the state keeps them (for the floor)
    schedule = [
        (0, "snap"),
        (CYCLE_S, "snap2"),
        (MOVED_AFTER_S, "snap3"),
        *again_snapshots(folder, suffix, started, again),
    ]
    for cycle, (later_s, name) in enumerate(schedule, start=1):
        clock[0] = started + timedelta(seconds=later_s)
        shutil.copyfile(folder / f"{name}.{suffix}", snapshot)
        began, cpu = time.perf_counter(), time.process_time()
        status = controller.cycle()
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
        expected = EXPECTED.get(cycle, "published")
        if status.result != expected or (cycle > len(EXPECTED) and not status.two_phase):
            raise RuntimeError(
                f"cycle {cycle}: {status.result}, not {expected}"
                f"{'' if cycle <= len(EXPECTED) else ' in two phases'}: "
                f"{status.reasons} {status.problems}"
            )
        if status.result == "published":
            published[cycle] = folder / f"published-{cycle}.json"
            os.link(folder / "state" / "current-plan.json", published[cycle])
        rows.append(
            {
                "servers": servers,
                "cycle": cycle,
                "result": status.result,
                "two_phase": status.two_phase,
                "seconds": round(seconds, 3),
                "cpu_seconds": round(cpu, 3),
                **{k: round(v, 3) for k, v in status.timings.items()},
            }
        )
    if serve:
        target.close()
    peak = _rss_mb()  # before the agents' reader below
    accepted = {
        cycle: _agents_accept(path) if servers <= CHECK_UP_TO else None
        for cycle, path in published.items()
    }
    from cosample.planner import planfile

    for row in rows:
        path = published.get(row["cycle"], published[1])  # a kept cycle: the plan in force
        row.update(
            plan_mb=round(path.stat().st_size / 1e6, 1),
            code_path=planfile.__file__,
            form=form,
            slices=slices,
            target="http" if serve else "directory",
            snapshot_mb=round(snapshot.stat().st_size / 1e6, 1),
            rss_imports_mb=rss_imports,
            peak_rss_mb=peak,
            agents_accept=accepted.get(row["cycle"]),
            load_average=round(os.getloadavg()[0], 1),
        )
    return {"rows": rows}


def floor(servers: int, folder: Path, form: str) -> dict:
    """The floors of one run's figures, in a process of its own (``folder``: the run's, with
    snapshot and published plans): the snapshot's bytes read into its arrays, the exact solver
    alone on the same data centre (the first cycle's snapshot), and each publication's bytes
    signed and written once."""
    import orjson

    from cosample.controller.replan import datacentre
    from cosample.controller.smoothing import Smoothed
    from cosample.files import write_bytes_atomic
    from cosample.plan.signing import generate_keypair, sign_bytes
    from cosample.planner.solvers import solve

    inventory = _inventory(servers, folder)
    generate_keypair(folder / "floor-key.pem", folder / "floor-key.pub")
    path = folder / f"snap.{FORMS[form]}"
    cpu = time.process_time()
    data = path.read_bytes()
    if form == "binary":
        size = int.from_bytes(data[8:16], "little")
        header = orjson.loads(data[16 : 16 + size])
        offset = 16 + size + (-(16 + size) % 8)
        columns = []
        for dtype, count in header["columns"]:
            columns.append(np.frombuffer(data, dtype=dtype, count=count, offset=offset))
            offset += 8 * count
        names, traffic = header["servers"]["name"], header["traffic_pps"]
        src, dst, pps = (columns[traffic[key]["$column"]] for key in ("src", "dst", "pps"))
    else:
        document = orjson.loads(data)
        names, traffic = document["servers"]["name"], document["traffic_pps"]
        columns = [
            np.asarray(v, dtype=float)
            for k, v in document["servers"].items()
            if k != "name" and v is not None and k != "last_sample_age_s"
        ]
        src, dst, pps = (np.asarray(traffic[key]) for key in ("src", "dst", "pps"))
    read_cpu = time.process_time() - cpu
    assert len(names) == servers
    # the controller's data centre for that matrix (its planning capacities; the snapshot's
    # entries are sorted by src * n + dst, as a smoothed matrix is)
    dc, _, _ = datacentre(
        inventory,
        Smoothed(
            None,
            servers,
            np.asarray(src, dtype=np.int64) * servers + dst,
            np.asarray(pps, dtype=float),
            np.ones(servers, dtype=bool),
        ),
        0.15,
    )
    cpu = time.process_time()
    solve(dc, "exact", margin=0.0)
    plan_cpu = time.process_time() - cpu
    publish_cpu = {}
    for cycle in sorted(c for c, result in EXPECTED.items() if result == "published"):
        published = folder / f"published-{cycle}.json"
        plan = published.read_bytes() if published.exists() else b""
        cpu = time.process_time()
        sign_bytes(plan, str(folder / "floor-key.pem"))
        write_bytes_atomic(folder / "floor-plan.json", plan)
        publish_cpu[f"publish_floor_cpu_{cycle}"] = round(time.process_time() - cpu, 3)
    return {
        "read_floor_cpu": round(read_cpu, 3),
        "plan_floor_cpu": round(plan_cpu, 3),
        **publish_cpu,
        "floor_peak_rss_mb": _rss_mb(),
    }


def _two_plans(servers: int, seed: int) -> tuple[dict, dict, datetime]:
    """The plan in force (as the controller keeps it after publishing) and the next plan, of
    the benchmark's instance, the second planned for traffic scaled by a random factor in
    [0.6, 1.4] per matrix entry; their host tables are the controller's (``HostTable``)."""
    from dataclasses import replace

    from cosample.controller.estimate import measure
    from cosample.controller.publish import render
    from cosample.controller.replan import replan
    from cosample.controller.smoothing import update
    from cosample.controller.source import parse

    with tempfile.TemporaryDirectory(prefix="bench-two-phase-") as folder:
        snapshot = Path(folder) / "snap.json"
        moment = datetime.now(timezone.utc).replace(microsecond=0)
        write_snapshot(servers, snapshot, moment)
        inventory = _inventory(servers, Path(folder))
        smoothed = update(
            None, measure(parse(snapshot.read_bytes(), str(snapshot)), inventory), 0.0, 0.0
        )
    valid = timedelta(hours=1)
    old = render(replan(inventory, smoothed, 0.15).document(moment, valid), 100, None).final
    rng = np.random.default_rng(seed)
    moved = replace(smoothed, pps=smoothed.pps * rng.uniform(0.6, 1.4, smoothed.pps.size))
    new = replan(inventory, moved, 0.15).document(moment, valid)
    return old, new, moment


def restart(servers: int, folder: Path, slices: bool, serve: bool) -> dict:
    """A controller restarted on the state the run's cycles left (in a process of its own, as
    a restart is): the publication in force read back, its shares computed, served again."""
    from cosample.controller.loop import Controller

    inventory = _inventory(servers, folder)
    settings, target = _controller_parts(folder, folder / "current.bin", slices, serve)
    cpu = time.process_time()
    Controller(inventory, settings, target, folder / "state")
    restart_cpu = round(time.process_time() - cpu, 3)
    if serve:
        target.close()
    return {"restart_cpu": restart_cpu, "restart_peak_rss_mb": _rss_mb()}


def _controller_parts(folder: Path, snapshot: Path, slices: bool, serve: bool):
    """The benchmark controller's settings (reading ``snapshot``, signing with the run's key)
    and its target: the HTTP target on loopback (``serve``) or the folder ``pub``."""
    from cosample.controller.publish import DirectoryTarget, HttpTarget
    from cosample.controller.settings import Settings

    settings = Settings(
        (str(snapshot),), interval_s=30.0, tau_s=0.0, max_age_s=3600.0, key=str(folder / "key.pem")
    )
    target = (
        HttpTarget("127.0.0.1", 0, dict, bytes, slices=slices)
        if serve
        else DirectoryTarget(folder / "pub", slices=slices)
    )
    return settings, target


def two_phase(servers: int, seed: int = 1) -> dict:
    """Time one two-phase publication (``render`` with the plan in force as ``previous``: the
    agents' transition) between two plans of the benchmark's instance (``_two_plans``). Reading
    the host tables (HostTables: compiled from their bytes, or parsed where the compiled
    transition declines) is part of the time."""
    from cosample.controller.publish import render

    old, new, moment = _two_plans(servers, seed)
    from cosample.gcpause import gc_paused

    began, cpu = time.perf_counter(), time.process_time()
    with gc_paused():  # as in the controller's cycle
        rendered = render(new, 101, None, previous=old, now=moment, settle_s=120.0)
    return {
        "servers": servers,
        "two_phase_seconds": round(time.perf_counter() - began, 3),
        "two_phase_cpu_seconds": round(time.process_time() - cpu, 3),
        "plan_set_mb": round(len(rendered.data) / 1e6, 1),
        "versions": list(rendered.versions),
    }


def compare_phase1(servers: int, repeats: int, seed: int = 1) -> dict:
    """Phase 1 of the two-phase plan set between ``_two_plans``'s plans, by the Python path
    (both host tables parsed with orjson, ``plan_set`` on the dicts, phase 1 serialised) and by
    the compiled one (``plan_set`` on the HostTables: ``_transition.lower`` on their bytes),
    alternating ``repeats`` times in this process, CPU seconds each (the garbage collector
    paused, as in the controller's cycle). Both give the same phase 1 bytes and plan_id
    (checked here on every run). Then the controller's whole ``render`` of the plan set both
    ways (``render_*``): the Python path is what ``render`` did before the compiled transition
    (the plan in force's table parsed, and the new one's, phase 2's bytes spliced); the same
    published bytes (checked)."""
    import gc

    import orjson

    from cosample.controller.publish import render
    from cosample.gcpause import gc_paused
    from cosample.plan.document import plan_head
    from cosample.plan.transition import plan_set
    from cosample.planner.planbytes import HostTable, compact_json

    old_doc, new_doc, moment = _two_plans(servers, seed)
    expires = plan_head(new_doc, "new plan").expires
    chunks = {"old": list(old_doc["hosts"].chunks), "new": list(new_doc["hosts"].chunks)}

    def fresh(which: str, doc: dict) -> dict:
        """The plan with a HostTable of its own: nothing parsed or joined yet (each run pays
        joining both tables' chunks; the controller's plan in force is joined already)."""
        return {**doc, "hosts": HostTable(list(chunks[which]))}

    def python_path() -> tuple[bytes, str]:
        parsed_old = {**old_doc, "hosts": orjson.loads(fresh("old", old_doc)["hosts"].json)}
        parsed_new = {**new_doc, "hosts": orjson.loads(fresh("new", new_doc)["hosts"].json)}
        phase1 = plan_set(parsed_old, parsed_new, 100, 101, expires, moment, 120.0)["plans"][0]
        return compact_json(phase1), phase1["plan_id"]

    def compiled_path() -> tuple[bytes, str]:
        phase1 = plan_set(
            fresh("old", old_doc),
            fresh("new", new_doc),
            100,
            101,
            expires,
            moment,
            120.0,
            table=lambda data: HostTable([data]),
        )["plans"][0]
        if not isinstance(phase1["hosts"], HostTable):
            raise SystemExit("the compiled transition declined these plans (or is not built)")
        return compact_json(phase1), phase1["plan_id"]

    def render_python() -> bytes:
        previous = {**old_doc, "hosts": orjson.loads(fresh("old", old_doc)["hosts"].json)}
        return render(
            fresh("new", new_doc), 101, None, previous=previous, now=moment, settle_s=120.0
        ).data

    def render_compiled() -> bytes:
        return render(
            fresh("new", new_doc),
            101,
            None,
            previous=fresh("old", old_doc),
            now=moment,
            settle_s=120.0,
        ).data

    seconds: dict[str, list[float]] = {
        label: [] for label in ("python", "compiled", "render_python", "render_compiled")
    }
    for _ in range(repeats):
        results = {}
        for label, path in (
            ("python", python_path),
            ("compiled", compiled_path),
            ("render_python", render_python),
            ("render_compiled", render_compiled),
        ):
            gc.collect()
            with gc_paused():
                cpu = time.process_time()
                results[label] = path()
                seconds[label].append(time.process_time() - cpu)
        if results["python"] != results["compiled"]:
            raise SystemExit("phase 1 differs between the Python and the compiled path")
        if results["render_python"] != results["render_compiled"]:
            raise SystemExit("the plan set differs between the Python and the compiled path")
        phase1_bytes = len(results["compiled"][0])
        del results
    best = {label: min(values) for label, values in seconds.items()}

    def ratio(slow: str, fast: str) -> float | None:  # None: too fast for the clock
        return round(best[slow] / best[fast], 1) if best[fast] > 0 else None

    return {
        "servers": servers,
        "phase1_mb": round(phase1_bytes / 1e6, 1),
        "phase1_bytes": phase1_bytes,
        **{
            f"{label}_cpu_seconds": [round(v, 3) for v in values]
            for label, values in seconds.items()
        },
        "ratio_best": ratio("python", "compiled"),
        "render_ratio_best": ratio("render_python", "render_compiled"),
    }


def _inventory(servers: int, folder: Path):
    from cosample.controller.inventory import Inventory

    capacity = np.asarray(json.loads((folder / "snap.capacity.json").read_text())["capacity"])
    names = tuple(f"s{i}" for i in range(servers))
    extras = {
        name: {"bridge": "br-int", "tunnel_ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"}
        for i, name in enumerate(names)
    }
    return Inventory(
        f"bench-{servers}",
        names,
        capacity,
        np.full(servers, PAPER_ALPHA),
        np.full(servers, PAPER_BETA),
        extras,
    )


def _agents_accept(path: Path) -> bool | str:
    """Whether the agents' own reader accepts the published plan (after the timed cycles)."""
    from cosample.errors import CosampleError
    from cosample.plan.document import parse_document

    try:
        parse_document(path.read_bytes(), str(path.name))
    except CosampleError as exc:
        return str(exc)[:200]
    return True


def _snapshot_time(path: Path) -> str:
    with path.open() as handle:
        head = handle.read(400)
    start = head.index('"time": "') + 9
    return head[start : head.index('"', start)].replace("Z", "+00:00")


def _rss_mb() -> float:
    """The process's peak resident set (``VmHWM``): unlike ``ru_maxrss``, not inherited from the
    parent that wrote the snapshot (Linux carries the peak across fork and exec)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--csv", metavar="FILE", help="also write the rows as CSV")
    parser.add_argument(
        "--baseline-tree",
        metavar="DIR",
        help="also run the code laid out in DIR (`python -m research.revision "
        "REV DIR`), alternating with this tree's, with the same options "
        "(a revision whose benchmark lacks --no-slices or --default-memory "
        "takes this file and controller/memory.py laid over its own)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per size (and code)")
    parser.add_argument(
        "--two-phase",
        type=int,
        metavar="SERVERS",
        help="time one two-phase publication at SERVERS instead",
    )
    parser.add_argument(
        "--compare-compiled",
        type=int,
        metavar="SERVERS",
        help="time a two-phase plan set's phase 1 at SERVERS instead, by the "
        "Python and the compiled transition alternating (--repeats times)",
    )
    parser.add_argument(
        "--form",
        choices=tuple(FORMS),
        default="binary",
        help="the snapshot form this tree's controller reads (default: binary; "
        "a --baseline-tree revision reads the JSON form)",
    )
    parser.add_argument(
        "--no-slices",
        dest="slices",
        action="store_false",
        help="publish the whole plan alone, no per-host slices (`controller run "
        "--no-slices`); the floor never includes slices",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="publish through the HTTP target on loopback (`controller run "
        "--serve`: every host's slice built in memory and served on "
        "request) instead of a folder with a file per host",
    )
    parser.add_argument(
        "--default-memory",
        dest="keep_memory",
        action="store_false",
        help="run the controller's process with the C library's and numpy's "
        "memory defaults, not as `controller run` sets them "
        "(controller/memory.py)",
    )
    parser.add_argument(
        "--compare-memory",
        action="store_true",
        help="run this tree with the memory defaults and as `controller run` "
        "sets them, alternating, and print their ratios",
    )
    parser.add_argument("--child", nargs=2, metavar=("SERVERS", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--floor", nargs=2, metavar=("SERVERS", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--restart", nargs=2, metavar=("SERVERS", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.two_phase:
        print(json.dumps(two_phase(args.two_phase)))
        return 0
    if args.compare_compiled:
        print(json.dumps(compare_phase1(args.compare_compiled, args.repeats)))
        return 0
    if (args.child or args.floor or args.restart) and args.keep_memory:
        from cosample.controller.memory import keep_memory

        keep_memory()  # as `controller run` does; the floor's process too
    if args.child:
        print(
            json.dumps(
                measure(int(args.child[0]), Path(args.child[1]), args.form, args.slices, args.serve)
            )
        )
        return 0
    if args.floor:
        print(json.dumps(floor(int(args.floor[0]), Path(args.floor[1]), args.form)))
        return 0
    if args.restart:
        print(
            json.dumps(
                restart(int(args.restart[0]), Path(args.restart[1]), args.slices, args.serve)
            )
        )
        return 0
    # code -> (tree, memory kept as `controller run` keeps it)
    trees: dict[str, tuple[Path | None, bool]] = {"new": (None, args.keep_memory)}
    if args.baseline_tree:
        try:
            trees = {
                "old": (checked(args.baseline_tree), args.keep_memory),
                "new": (None, args.keep_memory),
            }
        except ExperimentError as exc:
            parser.error(str(exc))
    elif args.compare_memory:
        trees = {"old": (None, False), "new": (None, True)}
    rows = []
    for servers in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-controller-") as folder:
            moment = datetime.now(timezone.utc).replace(microsecond=0)
            write_snapshot(servers, Path(folder) / "snap.json", moment)
            for repeat in range(args.repeats):
                for code, (tree, keep) in trees.items():
                    run = f"{code}-{repeat}"
                    measured = _child(
                        servers,
                        Path(folder),
                        run,
                        tree,
                        args.form if tree is None else None,
                        slices=args.slices,
                        keep=keep,
                        serve=args.serve,
                    )
                    floors = (
                        _child(servers, Path(folder), run, None, args.form, "--floor", keep=keep)
                        if tree is None
                        else [{}]
                    )
                    restarted = (
                        _child(
                            servers,
                            Path(folder),
                            run,
                            None,
                            None,
                            "--restart",
                            slices=args.slices,
                            keep=keep,
                            serve=args.serve,
                        )
                        if tree is None
                        else [{}]
                    )
                    if measured is None or floors is None or restarted is None:
                        return 1
                    floors[0].update(restarted[0])
                    for row in measured:
                        row.update(code=code, repeat=repeat, keep_memory=keep, **floors[0])
                    rows += measured
                    print(_table(measured), flush=True)
                    if tree is None:
                        print(_beside_floors(measured), flush=True)
    if args.csv:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.csv, index=False)
    if args.baseline_tree or args.compare_memory:
        print(
            _comparison(
                rows,
                Path(args.baseline_tree).name
                if args.baseline_tree
                else "this tree with the memory defaults (--default-memory)",
            )
        )
    at_target = [r for r in rows if r["servers"] == TARGET_SERVERS and r["code"] == "new"]
    for row in at_target:
        verdict = "meets" if row["seconds"] < TARGET_SECONDS else "misses"
        print(
            f"cycle {row['cycle']} at {TARGET_SERVERS:,} servers: {row['seconds']:.2f} s "
            f"({row['cpu_seconds']:.2f} s CPU), {verdict} the {TARGET_SECONDS:g} s goal"
        )
    for row in (r for r in rows if r["servers"] == LARGE_SERVERS and r["code"] == "new"):
        verdict = "meets" if row["cpu_seconds"] < LARGE_CPU_S else "misses"
        print(
            f"cycle {row['cycle']} at {LARGE_SERVERS:,} servers: {row['cpu_seconds']:.2f} s "
            f"CPU, {verdict} the {LARGE_CPU_S:g} s CPU goal"
        )
    return 0


def _beside_floors(rows: list[dict]) -> str:
    """Each cycle's CPU seconds beside its floor (``floor``), step by step, and peak memory."""
    lines = []
    for row in rows:
        publishes = row["result"] == "published"
        row["publish_floor_cpu"] = row.get(f"publish_floor_cpu_{row['cycle']}", 0.0)
        floor_cpu = (
            row["read_floor_cpu"]
            + row["plan_floor_cpu"]
            + (row["publish_floor_cpu"] if publishes else 0.0)
        )
        steps = [
            f"{step} {row.get(f'{step}_cpu', 0.0):.3f} (floor {row[f'{step}_floor_cpu']:.3f})"
            for step in ("read", "plan") + (("publish",) if publishes else ())
        ]
        lines.append(
            f"  {row['servers']:>9,} cycle {row['cycle']} ({row['result']}"
            f"{', two phases' if row.get('two_phase') else ''}, {row['form']}): "
            f"CPU {row['cpu_seconds']:.2f} s, floor {floor_cpu:.2f} s, "
            f"{row['cpu_seconds'] / floor_cpu if floor_cpu > 0 else float('inf'):.1f}x; "
            + ", ".join(steps)
            + f"; peak RSS {row['peak_rss_mb']:.0f} MB "
            f"(floor {row['floor_peak_rss_mb']:.0f} MB)"
        )
    for row in rows:
        if row["cycle"] == 1 and row.get("restart_cpu") is not None:
            lines.append(
                f"  {row['servers']:>9,} restart on the state left: CPU "
                f"{row['restart_cpu']:.2f} s, peak RSS "
                f"{row['restart_peak_rss_mb']:.0f} MB (a process of its own: the "
                "publication in force read back and served again)"
            )
    return "\n".join(lines)


def _child(
    servers: int,
    folder: Path,
    name: str,
    tree: Path | None,
    form: str | None = None,
    job: str = "--child",
    slices: bool = True,
    keep: bool = True,
    serve: bool = False,
) -> list[dict] | None:
    """Both cycles in a fresh process and a fresh sub-folder ``name`` (no plan in force yet)
    on the snapshot in ``folder``, with the code of ``tree`` (None: this one) reading ``form``
    (None: the old code's own choice); ``job="--floor"``: the floors, in the run's folder."""
    run = folder / name
    if job == "--child":
        run.mkdir()
        for snapshot in folder.glob("snap*"):
            shutil.copyfile(snapshot, run / snapshot.name)
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    # the child runs in its folder: this clone's research package comes from ROOT
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT)]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "research.bench_controller",
            job,
            str(servers),
            str(run),
            *(("--form", form) if form else ()),
            *(() if slices else ("--no-slices",)),
            *(("--serve",) if serve else ()),
            *(() if keep else ("--default-memory",)),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=env,
        cwd=run,
    )
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["rows"] if job == "--child" else [result]


def _comparison(rows: list[dict], baseline: str) -> str:
    """Per size and cycle: old and new CPU and wall seconds (median, range) and peak RSS, and
    the ratio of the medians."""
    lines = [f"old = {baseline}, new = this tree; median [min-max] of the runs"]
    for servers in dict.fromkeys(r["servers"] for r in rows):
        for cycle in sorted({r["cycle"] for r in rows if r["servers"] == servers}):
            if {r["code"] for r in rows if (r["servers"], r["cycle"]) == (servers, cycle)} != {
                "old",
                "new",
            }:
                continue  # a cycle the other code's benchmark does not run
            cells = []
            medians = {}
            for code in ("old", "new"):
                mine = [
                    r
                    for r in rows
                    if (r["servers"], r["cycle"], r["code"]) == (servers, cycle, code)
                ]
                cpu = [r["cpu_seconds"] for r in mine]
                wall = [r["seconds"] for r in mine]
                medians[code] = statistics.median(cpu)
                cells.append(
                    f"{code} CPU {medians[code]:.2f} [{min(cpu):.2f}-{max(cpu):.2f}] s, "
                    f"wall {statistics.median(wall):.2f} [{min(wall):.2f}-"
                    f"{max(wall):.2f}] s, peak RSS {max(r['peak_rss_mb'] for r in mine):.0f} MB"
                )
            lines.append(
                f"{servers:>9,} cycle {cycle} ({mine[0]['result']}): "
                + "; ".join(cells)
                + f"; new/old CPU {medians['new'] / medians['old']:.2f}"
            )
    return "\n".join(lines)


def _table(rows: list[dict]) -> str:
    steps = ("read", "estimate", "plan", "decide", "document", "publish")
    keys = (
        "code",
        "servers",
        "cycle",
        "result",
        "two_phase",
        "seconds",
        "cpu_seconds",
        *steps,
        *(f"{step}_cpu" for step in steps),
        "plan_mb",
        "snapshot_mb",
        "rss_imports_mb",
        "peak_rss_mb",
        "agents_accept",
        "load_average",
    )
    return "\n".join(" ".join(f"{k}={row.get(k, '-')}" for k in keys) for row in rows)


if __name__ == "__main__":
    sys.exit(main())
