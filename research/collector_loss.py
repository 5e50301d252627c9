"""Issue 23's loss scenarios through this tree's estimator, and another revision's beside it.

Streams built from a real datagram (tests/data/sflow/data-1140.pcap: a switch's five flow
samples of three samplers, 1-in-1024; ``cosample.lab.sflowcorpus``), nothing lost unless the
scenario says so, each replayed through this tree's collector and, with ``--baseline-tree DIR``,
through the ``collector/`` package of another revision laid out in DIR (imported under another
name, so old decoder and old estimator go together; ``experiments/othertree.py``), in one run.
Printed: estimate / truth and whether the truth lies in the 95 % interval.

With ``--ingest``: flow samples per CPU second of the two estimators' ``ingest`` on the
collector benchmark's capture of real datagrams (``bench_replay.real_capture``), alternating.

    python -m research.revision 127e2e2 /tmp/cosample-127e2e2      # from a clone: main before issue 23
    python -m research.collector_loss [--baseline-tree /tmp/cosample-127e2e2] [--ingest]
"""

from __future__ import annotations

import argparse
import importlib
import struct
import tempfile
from pathlib import Path

from cosample.experiments.errors import ExperimentError
from cosample.experiments.othertree import load_package

DATAGRAMS = 2000
SPACING_S = 0.05


def estimator(package: str, agent: str, window_s: float | None):
    inventory = importlib.import_module(f"{package}.inventory").Inventory.model_validate(
        {"servers": {"s": {"agent_ip": agent}}}
    )
    table = importlib.import_module(f"{package}.attribution").planless(inventory)
    return importlib.import_module(f"{package}.estimate").Estimator(table, window_s=window_s)


def scenarios(base) -> dict[str, tuple[list, int | None, float | None]]:
    """name -> (datagrams, datagrams the agent sent over the capture (None: it sent steadily,
    judge by its rate), window)."""
    from cosample.lab.sflowcorpus import stream

    out = {}
    clean = stream(base, DATAGRAMS, spacing=SPACING_S)
    out["loss-free"] = (clean, DATAGRAMS, None)
    swapped = stream(base, 100, spacing=SPACING_S)
    for k in range(5, 100, 10):  # 10 adjacent pairs of 100 swapped
        swapped[k], swapped[k + 1] = (
            (swapped[k][0], swapped[k + 1][1]),
            (swapped[k + 1][0], swapped[k][1]),
        )
    out["10 of 100 pairs swapped"] = (swapped, 100, None)
    order = sorted(range(DATAGRAMS), key=lambda k: (k + (k * 7919) % 9, k))
    clean2 = stream(base, DATAGRAMS, spacing=SPACING_S)
    out["every datagram up to 8 places late"] = (
        [(clean2[slot][0], clean2[k][1]) for slot, k in enumerate(order)],
        DATAGRAMS,
        None,
    )
    corrupted = stream(base, DATAGRAMS, spacing=SPACING_S)
    at = base.samples[0][0]
    value = struct.unpack_from("!I", corrupted[500][1], at)[0]
    struct.pack_into("!I", corrupted[500][1], at, (value + 16_700_000) % (1 << 32))
    out["one sequence number +16.7 M"] = (corrupted, DATAGRAMS, None)
    restarted = stream(base, 1000, spacing=SPACING_S, uptime_ms=3_600_000) + [
        (when + 1000 * SPACING_S, data)
        for when, data in stream(base, 1000, spacing=SPACING_S, first_sequence=1)
    ]
    out["agent restart"] = (restarted, DATAGRAMS, None)
    full = stream(base, 1200 + 6000 + 1200, spacing=SPACING_S)
    out["300 s lost, --window 30, 60 s after"] = (full[:1200] + full[-1200:], None, 30.0)
    out["300 s lost, --window 30, 20 s after"] = (full[:1200] + full[7200:7600], None, 30.0)
    out["300 s lost, whole capture"] = (full[:1200] + full[-1200:], len(full), None)
    return out


def measure(package: str, base, datagrams, window_s) -> tuple[float, float, float, float]:
    """(packets/s, interval low, high, the snapshot's window)."""
    est = estimator(package, base.agent, window_s)
    last = 0.0
    for when, data in datagrams:
        est.ingest(bytes(data), when)
        last = max(last, when)
    snapshot = est.snapshot(last)
    row = snapshot.servers["s"]
    return row.packets_per_s, *row.packets_per_s_ci95, snapshot.window_s


def ingest_side_by_side(package: str, rounds: int = 3, datagrams: int = 120_000) -> list[str]:
    """Lines ``old|new samples-per-CPU-second`` per round (see the module docstring)."""
    import time

    from cosample.collector.pcap import udp_payloads
    from cosample.collector.replay import agents_in
    from cosample.experiments.bench_replay import real_capture

    lines = []
    with tempfile.TemporaryDirectory(prefix="cosample-ingest-") as tmp:
        capture, _ = real_capture(Path(tmp) / "real.pcap", datagrams)
        payloads = list(udp_payloads(capture))
        agents = agents_in(capture)
        for round_ in range(rounds):
            for label, name in (("old", package), ("new", "cosample.collector")):
                inventory = importlib.import_module(f"{name}.inventory").Inventory
                table = importlib.import_module(f"{name}.attribution").planless(
                    inventory.model_validate({"servers": {a: {"agent_ip": a} for a in agents}})
                )
                est = importlib.import_module(f"{name}.estimate").Estimator(table, window_s=30.0)
                start = time.process_time()
                for when, payload in payloads:
                    est.ingest(payload, when)
                rate = est.samples / (time.process_time() - start)
                lines.append(f"round {round_ + 1}: {label} {rate:,.0f} flow samples per CPU second")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline-tree",
        metavar="DIR",
        help="another revision laid out by `python -m research.revision REV DIR`",
    )
    parser.add_argument(
        "--ingest",
        action="store_true",
        help="also ingest speed of both estimators on real datagrams (needs --baseline-tree)",
    )
    args = parser.parse_args(argv)
    from cosample.lab.sflowcorpus import template

    base = template("data-1140.pcap")
    if args.ingest and not args.baseline_tree:
        parser.error("--ingest compares two estimators: give --baseline-tree")
    with tempfile.TemporaryDirectory(prefix="cosample-loss-") as tmp:
        packages = ["cosample.collector"]
        header = "| scenario | now: estimate / truth | truth in 95 % interval |"
        if args.baseline_tree:
            try:
                packages.insert(0, load_package(args.baseline_tree, Path(tmp)) + ".collector")
            except ExperimentError as exc:
                parser.error(str(exc))
            header = (
                f"| scenario | {Path(args.baseline_tree).name}: estimate / truth | "
                "truth in 95 % interval " + header[len("| scenario ") :]
            )
        print(header)
        print("|---" + "|---:|---" * len(packages) + "|")
        per_datagram = 1024 * len(base.samples)
        for name, (datagrams, sent, window) in scenarios(base).items():
            cells = []
            for package in packages:
                pps, low, high, span = measure(package, base, datagrams, window)
                truth = per_datagram * sent / span if sent else per_datagram / SPACING_S
                cells += [f"{pps / truth:.3f}", "yes" if low <= truth <= high else "**no**"]
            print(f"| {name} | " + " | ".join(cells) + " |")
        if args.ingest:
            print("\n".join(ingest_side_by_side(packages[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
