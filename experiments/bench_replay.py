"""The collector beside ``sfacctd`` on captures of real datagrams, with and without a plan.

Two captures, each read side by side by ``sfacctd`` (``pcap_savefile``) and by ours, CPU
seconds of each (whole commands: ``RUSAGE_CHILDREN``; in process: ``process_time``),
alternating, best of ``repeats``:

- **corpus**: three of tests/data/sflow's captures (``data-1140``: 5 flow samples of a switch's
  3 samplers, ``data-qinq`` and ``data-sflow-ipv4-data``: one expanded sample each),
  renumbered as their agents would send them (``cosample.lab.sflowcorpus``), interleaved;
- **many agents**: ``data-sflow-raw-ipv4`` (two flow samples) sent by ``agents`` agents (its
  agent address rewritten; each agent numbering its own), all sending all along, in turn.

Each capture has its plan (``capture_plan``: every agent a server sampling locally at the
1-in-N its samples declare, what the agents were given), so the collector runs as deployed:
every sample checked against the plan (``collector/declared.py``). Rows, per capture:

- ``sfacctd pcap_savefile (command)``: renormalising, one line per agent;
- ``collector replay CAPTURE --json (command, no plan)``: each agent heard a server of its
  own, sampling at the rate it declares (any);
- ``collector replay --plan PLAN CAPTURE --json (command)``: as deployed;
- ``Estimator.ingest in process (plan)``: the daemon's estimator on the datagrams in memory;
- ``daemon's work per datagram (admission + ingest, plan)``: what the daemon's loop does per
  datagram after its receive process (``Admission.admit`` then ``Estimator.ingest``).

``baseline``: ours also with the compiled parts (collector/_sflow.c) switched off, in the same
run. ``baseline_tree``: the two commands also as another revision runs them (a tree laid out by
``python -m research.revision REV DIR``, its compiled part built with ``python setup.py
build_ext --inplace`` in ``DIR/source``; the rows say whether it was), in the same run. Our
commands keep Python's bytecode cache (``INSTALLED``), as an installed package has it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

#: Our commands' environment: Python's bytecode cache on, as an installed package has it (pip
#: compiles its modules); a shell with PYTHONDONTWRITEBYTECODE set (as this project's sandbox
#: has) would make every run compile cosample's modules again, 0.05 CPU seconds here.
INSTALLED = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}

#: The switches that turn the compiled parts off (``--baseline``: the Python code alone).
PYTHON_ONLY = (
    "from cosample.collector import decode, pcap; "
    "decode._scan = decode._scan_counted = decode._agent = decode.compiled_ingest = None; "
    "pcap._pcap_run = None; "
)
REPLAY_TEMPLATES = ("data-1140.pcap", "data-qinq.pcap", "data-sflow-ipv4-data.pcap")
MANY_AGENTS_TEMPLATE = "data-sflow-raw-ipv4.pcap"
SFACCTD = "sfacctd pcap_savefile (command)"
#: Another revision's commands: without the working directory first on ``sys.path`` (``-P``),
#: which in a checkout is this revision's ``cosample`` package, ahead of ``PYTHONPATH``.
SAFE_PATH = ("-P",)


@contextlib.contextmanager
def python_only(active: bool = True):
    """The collector without its compiled parts (collector/_sflow.c) while inside."""
    from cosample.collector import decode, pcap

    names = ("_scan", "_scan_counted", "_agent", "compiled_ingest")
    saved = [getattr(decode, name) for name in names], pcap._pcap_run
    if active:
        for name in names:
            setattr(decode, name, None)
        pcap._pcap_run = None
    try:
        yield
    finally:
        for name, value in zip(names, saved[0]):
            setattr(decode, name, value)
        pcap._pcap_run = saved[1]


def real_capture(path: Path, datagrams: int) -> tuple[Path, int]:
    """A capture of ``datagrams`` real datagrams, the templates' agents interleaved 1 ms apart;
    with the flow samples it holds."""
    from cosample.collector.pcap import write_pcap
    from cosample.lab.sflowcorpus import stream, template

    bases = [template(name) for name in REPLAY_TEMPLATES]
    per = datagrams // len(bases)
    streams = [
        stream(base, per, spacing=0.001 * len(bases), start=1.7e9 + 0.001 * k)
        for k, base in enumerate(bases)
    ]
    merged = sorted((when, bytes(data)) for part in streams for when, data in part)
    samples = per * sum(len(base.samples) for base in bases)
    return write_pcap(path, merged), samples


def many_agents_capture(path: Path, datagrams: int, agents: int) -> tuple[Path, int]:
    """``datagrams`` real two-sample datagrams (``MANY_AGENTS_TEMPLATE``) from ``agents`` agents
    (10.x.y.z), each numbering its own, all of them sending all along, in turn (a fleet: every
    agent's state is in use at once); with the flow samples it holds."""
    import socket

    from cosample.collector.pcap import write_pcap
    from cosample.lab.sflowcorpus import stream, template

    base = template(MANY_AGENTS_TEMPLATE)
    per = datagrams // agents
    merged = []
    for k in range(agents):
        address = f"10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}"
        data = bytearray(base.data)
        data[8:12] = socket.inet_aton(address)
        own = replace(base, data=bytes(data), agent=address)
        spacing = 0.001 * agents
        start = 1.7e9 + 0.001 * k  # every agent sending all along, in turn
        merged += [(w, bytes(d)) for w, d in stream(own, per, spacing=spacing, start=start)]
    merged.sort()
    return write_pcap(path, merged), per * agents * len(base.samples)


def capture_plan(capture: Path, path: Path) -> Path:
    """The plan a capture's agents were given: each agent a server (``h<k>``, its address as
    ``tunnel_ip``) sampling locally at the 1-in-N its samples declare (one each)."""
    from cosample.collector.replay import Survey, run
    from cosample.plan.formats import FORMAT_VERSION, PLAN_FORMAT
    from cosample.times import format_time

    survey = Survey()
    run(None, capture, heard=survey)
    hosts = {}
    for k, (agent, heard) in enumerate(sorted(survey.items())):
        (rate,) = heard.rates
        hosts[f"h{k}"] = {
            "role": "sender",
            "local_rate": 1.0 / rate,
            "sflow_sampling": rate,
            "mirrors": [],
            "receives": [],
            "tunnel_ip": agent,
        }
    now = time.time()
    document = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "version": 1,
        "created": format_time(1.6e9),
        "expires": format_time(now + 86400 * 365),
        "plan_id": "c" * 64,
        "hosts": hosts,
    }
    path.write_text(json.dumps(document))
    return path


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when this process dies, however it dies."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def child_cpu(
    argv: list[str], timeout_s: float = 600.0, env: dict[str, str] | None = None
) -> tuple[float, str]:
    """CPU seconds (user + system) of a command run to completion, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
        preexec_fn=die_with_parent,
        env=env,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime), result.stdout


def sfacctd_replay_argv(directory: Path, capture: Path) -> list[str]:
    """``sfacctd`` reading ``capture`` once and exiting (renormalising, one line per agent)."""
    config = directory / "sfacctd-pcap.conf"
    config.write_text(
        "\n".join(
            [
                "daemonize: false",
                f"pcap_savefile: {capture.resolve()}",
                "pcap_savefile_wait: false",
                "sfacctd_renormalize: true",
                "plugins: print",
                "aggregate: peer_src_ip",
                "print_output: csv",
                f"print_output_file: {directory / 'out.csv'}",
                "print_refresh_time: 1",
                "",
            ]
        )
    )
    return ["sfacctd", "-f", str(config)]


def _ours(command: list[str], python_decoder: bool) -> list[str]:
    if not python_decoder:
        return [sys.executable, "-m", "cosample", *command]
    return [
        sys.executable,
        "-c",
        PYTHON_ONLY + f"from cosample.cli import main; raise SystemExit(main({command!r}))",
    ]


def _tree_env(tree: Path) -> tuple[dict[str, str], str]:
    """The environment that runs ``tree``'s cosample, and a label saying whether its compiled
    scan is built."""
    from cosample.experiments.othertree import checked

    tree = checked(tree)
    env = dict(
        INSTALLED,
        PYTHONPATH=os.pathsep.join(filter(None, [str(tree), INSTALLED.get("PYTHONPATH")])),
    )
    probe = subprocess.run(
        [
            sys.executable,
            *SAFE_PATH,
            "-c",
            "import cosample.collector.decode as d; print(d.COMPILED)",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout.strip()
    scan = "compiled scan" if probe == "True" else "Python decoder"
    return env, f" [baseline tree {tree.name}, {scan}]"


def _in_process(plan: Path, payloads: list, admission: bool) -> tuple[int, float]:
    """(flow samples counted, CPU seconds) of the daemon's estimator (and, with
    ``admission``, its admission check first) over the datagrams in memory."""
    from datetime import datetime, timezone

    from cosample.collector.admission import Admission
    from cosample.collector.estimate import Estimator
    from cosample.collector.planwatch import load_for_replay

    first = datetime.fromtimestamp(payloads[0][0], timezone.utc)
    table = load_for_replay(str(plan), None, first)
    estimator = Estimator(table, window_s=30.0)
    ingest = estimator.ingest
    if not admission:
        start = time.process_time()
        for when, payload in payloads:
            ingest(payload, when)
        return estimator.samples, time.process_time() - start
    gate = Admission(estimator.dropped)
    gate.plan(table.server_of_agent)
    admit = gate.admit
    sources = [(when, payload, agent_of(payload)) for when, payload in payloads]
    start = time.process_time()
    for when, payload, source in sources:  # each from its agent's address, as OVS sends
        if admit(payload, source):
            ingest(payload, when)
    return estimator.samples, time.process_time() - start


def agent_of(payload: bytes) -> str:
    from cosample.collector.decode import agent_or_none

    return agent_or_none(payload) or "0.0.0.0"


def side_by_side(
    corpus_datagrams: int = 120_000,
    many_datagrams: int = 210_000,
    agents: int = 1_000,
    repeats: int = 3,
    log=print,
    baseline: bool = False,
    baseline_tree: Path | None = None,
):
    """The rows (module docstring) as a table with ``samples_per_cpu_s``."""
    import pandas as pd

    from cosample.collector.pcap import udp_payloads

    rows = []
    with tempfile.TemporaryDirectory(prefix="cosample-bench-replay-") as tmp:
        folder = Path(tmp)
        captures = {
            "corpus": real_capture(folder / "corpus.pcap", corpus_datagrams),
            f"many agents ({agents})": many_agents_capture(
                folder / "many.pcap", many_datagrams, agents
            ),
        }
        plans = {
            name: capture_plan(capture, folder / f"plan-{k}.json")
            for k, (name, (capture, _)) in enumerate(captures.items())
        }
        payloads = {name: list(udp_payloads(capture)) for name, (capture, _) in captures.items()}
        arms = (False, True) if baseline else (False,)
        tree = _tree_env(baseline_tree) if baseline_tree is not None else None
        for repeat in range(repeats):
            for name, (capture, samples) in captures.items():
                plan = plans[name]

                def row(what: str, counted: int, cpu: float, name=name) -> None:
                    rows.append(
                        {
                            "capture": name,
                            "what": what,
                            "repeat": repeat,
                            "samples": counted,
                            "cpu_s": cpu,
                        }
                    )

                directory = folder / f"pmacct-{repeat}-{len(rows)}"
                directory.mkdir()
                cpu, _ = child_cpu(sfacctd_replay_argv(directory, capture))
                row(SFACCTD, samples, cpu)
                for python in arms:
                    arm = " [Python code]" if python else ""
                    for command, what in (
                        (
                            ["collector", "replay", str(capture), "--json"],
                            "collector replay CAPTURE --json (command, no plan)",
                        ),
                        (
                            ["collector", "replay", "--plan", str(plan), str(capture), "--json"],
                            "collector replay --plan PLAN CAPTURE --json (command)",
                        ),
                    ):
                        cpu, out = child_cpu(_ours(command, python), env=INSTALLED)
                        row(what + arm, sum(json.loads(out)["servers"]["samples"]), cpu)
                    if tree is not None and not python:  # the same commands, another revision
                        env, label = tree
                        for command, what in (
                            (["collector", "replay", str(capture), "--json"], "no plan"),
                            (
                                ["collector", "replay", "--plan", str(plan), str(capture)]
                                + ["--json"],
                                "plan",
                            ),
                        ):
                            argv = [sys.executable, *SAFE_PATH, "-m", "cosample", *command]
                            cpu, out = child_cpu(argv, env=env)
                            counted = sum(json.loads(out)["servers"]["samples"])
                            row(f"collector replay ({what}){label}", counted, cpu)
                    with python_only(python):
                        counted, cpu = _in_process(plan, payloads[name], admission=False)
                        row("Estimator.ingest in process (plan)" + arm, counted, cpu)
                        counted, cpu = _in_process(plan, payloads[name], admission=True)
                        row(
                            "daemon's work per datagram: admission + ingest (plan)" + arm,
                            counted,
                            cpu,
                        )
            log(f"replay repeat {repeat + 1}/{repeats} done")
    table = pd.DataFrame(rows)
    table["samples_per_cpu_s"] = table["samples"] / table["cpu_s"]
    return table


def summary(table) -> list[str]:
    """Per capture and row: the best flow samples per CPU second and its ratio to sfacctd's."""
    lines = []
    for name, part in table.groupby("capture", sort=False):
        best = part.groupby("what", sort=False)["samples_per_cpu_s"].max()
        theirs = best[SFACCTD]
        for what, rate in best.items():
            repeats = int((part["what"] == what).sum())
            lines.append(
                f"{name}: {what}: {rate:,.0f} flow samples per CPU second (best of {repeats}), "
                f"ratio to sfacctd {rate / theirs:.2f}"
            )
    return lines
