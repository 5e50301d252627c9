"""``cosample testbed up|run|down``: the emulated data centre from the command line.

Parsing only; the work is in ``build``, ``experiment`` and ``report`` (imported in handlers).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.planner.choices import DEFAULT_SOLVER, SOLVERS

DEFAULT_STATE_DIR = "/tmp/cosample-testbed"


def register(subparsers: argparse._SubParsersAction) -> None:
    testbed = subparsers.add_parser(
        "testbed",
        help="emulated data centre: validate plans end to end",
        description="An emulated data centre on this machine (root): servers are network "
        "namespaces with their own userspace OVS, VMs are namespaces, servers are "
        "joined by VXLAN; see docs/testbed.md.",
    )
    actions = testbed.add_subparsers(dest="testbed_command", metavar="ACTION")
    actions.required = True

    up = actions.add_parser("up", help="build the emulated data centre")
    _state_dir(up)
    up.add_argument(
        "--config",
        metavar="FILE",
        help="testbed configuration (JSON/YAML: servers, flows); default: a skewed "
        "one generated from the options below",
    )
    up.add_argument(
        "--prefix",
        default="ct",
        help="prefix of every namespace, interface and bridge (default: ct)",
    )
    up.add_argument("--servers", type=int, default=3, help="servers (default 3)")
    up.add_argument("--vms", type=int, default=2, help="VMs per server (default 2)")
    up.add_argument(
        "--top-pps",
        type=float,
        default=2400.0,
        help="traffic offered by the busiest server, pps (default 2400)",
    )
    up.add_argument(
        "--skew", type=float, default=0.5, help="server k offers top-pps * skew^(k-1) (default 0.5)"
    )
    up.add_argument(
        "--capacity-pps",
        type=float,
        default=3000.0,
        help="emulated capacity of every server, pps (default 3000)",
    )
    up.set_defaults(func=_up)

    run = actions.add_parser(
        "run", help="measure baseline, non-collaborative and collaborative plans"
    )
    _state_dir(run)
    run.add_argument(
        "-o",
        "--out",
        default="testbed-results",
        metavar="DIR",
        help="where results.csv, report.md, summary.json, plans go (default testbed-results)",
    )
    run.add_argument(
        "--duration",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="traffic time per phase (default 10)",
    )
    run.add_argument(
        "--alpha",
        type=float,
        default=None,
        help=f"sampling cost coefficient (default {PAPER_ALPHA}, the paper's)",
    )
    run.add_argument(
        "--beta",
        type=float,
        default=None,
        help=f"mirroring cost coefficient (default {PAPER_BETA}, the paper's)",
    )
    run.add_argument(
        "--calibration",
        metavar="FILE",
        help="take alpha, beta (and capacity_pps) from a `cosample fit` JSON instead",
    )
    run.add_argument(
        "--capacity-pps",
        type=float,
        default=None,
        help="override every server's emulated capacity, pps",
    )
    run.add_argument(
        "--solver",
        choices=SOLVERS,
        default=DEFAULT_SOLVER,
        help="planner solver for the collaborative plan (default exact)",
    )
    run.add_argument(
        "--keep-up",
        action="store_true",
        help="on failure, leave the testbed up for inspection (default: tear down)",
    )
    run.add_argument(
        "--scenario",
        choices=("plans", "shift", "steady", "guard"),
        default="plans",
        help="plans: baseline, non-collaborative and collaborative plans (default); "
        "shift / steady: the closed loop (agents, collector, controller) with "
        "traffic that shifts half-way / stays steady with +/-10 %% noise; guard: a CPU "
        "hog on two servers, one with the agents' guard, one without, then swapped",
    )
    run.add_argument(
        "--guard-pps",
        type=float,
        default=4_000.0,
        metavar="PPS",
        help="guard: each server's VM-to-VM flow (default 4000)",
    )
    run.add_argument(
        "--budget-cpus",
        type=float,
        default=0.3,
        metavar="CPUS",
        help="guard: each server's ovs-vswitchd CPU budget (default 0.3)",
    )
    run.add_argument(
        "--hog-seconds",
        type=float,
        default=40.0,
        metavar="SECONDS",
        help="guard: how long the hog runs (default 40)",
    )
    run.add_argument(
        "--phase-seconds",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="closed loop: length of each of the two phases (default 60)",
    )
    run.add_argument(
        "--startup-seconds",
        type=float,
        default=40.0,
        metavar="SECONDS",
        help="closed loop: traffic before the first phase (default 40)",
    )
    run.set_defaults(func=_run)

    down = actions.add_parser("down", help="remove everything the testbed created")
    _state_dir(down)
    down.set_defaults(func=_down)


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while building or running, so the cleanup runs too."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _down_on_failure(args: argparse.Namespace):
    """Run a scenario (SIGTERM as an interrupt); on any failure tear the testbed down unless
    ``--keep-up``, then re-raise."""
    from cosample.experiments.testbed import build

    try:
        with _sigterm_as_interrupt():
            yield
    except BaseException:
        if not args.keep_up:
            problems = build.down(args.state_dir)
            print(
                "testbed torn down after the failure"
                + (f" (problems: {problems})" if problems else ""),
                file=sys.stderr,
            )
        raise


def _state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help=f"where the testbed keeps its ledger and OVS instances (default {DEFAULT_STATE_DIR})",
    )


def _up(args: argparse.Namespace) -> int:
    from cosample.experiments.testbed import build, topology

    if args.config:
        config = topology.read_config(args.config)
        topology.from_config(config, args.prefix, where=args.config)  # errors name the file
    else:
        config = topology.skewed_config(
            args.servers, args.vms, args.top_pps, args.skew, args.capacity_pps
        )
    with _sigterm_as_interrupt():
        testbed = build.up(config, args.state_dir, args.prefix)
    print(
        f"testbed up: {len(testbed.topology.servers)} servers, {len(testbed.topology.vms)} VMs, "
        f"{len(testbed.topology.flows)} flows; state in {args.state_dir}"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cosample.experiments.files import output_dir
    from cosample.experiments.testbed import build, experiment, plans, report
    from cosample.experiments.testbed.errors import TestbedError

    coefficients = _coefficients(args, plans, TestbedError)
    if args.scenario == "guard":
        return _guard(args)
    if args.scenario != "plans":
        return _closed_loop(args, coefficients)
    if not args.duration >= 1:
        raise TestbedError(
            f"--duration: must be >= 1 (iperf3 runs whole seconds), got {args.duration:g}"
        )
    testbed = build.Testbed.load(args.state_dir)
    out = output_dir(Path(args.out))
    settings = experiment.RunSettings(coefficients, args.duration, args.solver)
    with _down_on_failure(args):
        result = experiment.run_experiment(testbed, settings, out)
    frame = report.tidy_rows(result, testbed.topology)
    totals = report.summary(frame, result)
    text = report.markdown(frame, totals, result, _command(args))
    paths = report.write(out, frame, totals, text)
    print(text)
    print("results: " + ", ".join(str(path) for path in paths.values()))
    return 0


def _closed_loop(args: argparse.Namespace, coefficients) -> int:
    """``--scenario shift|steady``: the closed loop; report in OUT/closedloop-SCENARIO.md."""
    import json
    from pathlib import Path

    from cosample.experiments.files import output_dir
    from cosample.experiments.testbed import build, closedloop, closedloop_report
    from cosample.experiments.testbed.errors import TestbedError
    from cosample.files import write_text_atomic

    for flag, value, least in (
        ("--phase-seconds", args.phase_seconds, 30.0),
        ("--startup-seconds", args.startup_seconds, 20.0),
    ):
        if not value >= least:
            raise TestbedError(f"{flag}: must be >= {least:g}, got {value:g}")
    testbed = build.Testbed.load(args.state_dir)
    out = output_dir(Path(args.out))
    settings = closedloop.LoopSettings(
        args.scenario,
        coefficients.alpha,
        coefficients.beta,
        startup_s=args.startup_seconds,
        phase_s=args.phase_seconds,
    )
    with _down_on_failure(args):
        result = closedloop.run_closed_loop(testbed, settings, out, coefficients.capacity_pps)
    command = (
        f"cosample testbed run --scenario {args.scenario} --phase-seconds "
        f"{args.phase_seconds:g} --startup-seconds {args.startup_seconds:g}"
    )
    text = closedloop_report.markdown(result, command)
    result["rows"] = closedloop_report.phase_rows(result)
    result["totals"] = closedloop_report.totals(result)
    write_text_atomic(
        out / f"closedloop-{args.scenario}.json",
        json.dumps(result, indent=2, sort_keys=True, default=str) + "\n",
    )
    write_text_atomic(out / f"closedloop-{args.scenario}.md", text)
    print(text)
    return 0


def _guard(args: argparse.Namespace) -> int:
    """``--scenario guard``: the report and its rows in OUT (``guard`` .md and .json)."""
    import json
    from pathlib import Path

    from cosample.experiments.files import output_dir
    from cosample.experiments.testbed import build, guard_report, guardrun
    from cosample.experiments.testbed.errors import TestbedError
    from cosample.files import write_text_atomic

    for flag, value, least in (
        ("--guard-pps", args.guard_pps, 100.0),
        ("--budget-cpus", args.budget_cpus, 0.1),
        ("--hog-seconds", args.hog_seconds, 10.0),
    ):
        if not value >= least:
            raise TestbedError(f"{flag}: must be >= {least:g}, got {value:g}")
    testbed = build.Testbed.load(args.state_dir)
    out = output_dir(Path(args.out))
    settings = guardrun.GuardSettings(
        pps=args.guard_pps, budget_cpus=args.budget_cpus, hog_s=args.hog_seconds
    )
    with _down_on_failure(args):
        result = guardrun.run_guard(testbed, settings, out)
    command = (
        f"cosample testbed run --scenario guard --guard-pps {args.guard_pps:g} "
        f"--budget-cpus {args.budget_cpus:g} --hog-seconds {args.hog_seconds:g}"
    )
    result["command"] = command
    stem = out / "guard"
    write_text_atomic(
        stem.with_suffix(".json"), json.dumps(result, indent=2, sort_keys=True) + "\n"
    )
    text = guard_report.markdown(result, command)  # from the rows written above
    write_text_atomic(stem.with_suffix(".md"), text)
    print(text)
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (for the report)."""
    parts = ["cosample testbed run", f"--duration {args.duration:g}", f"--solver {args.solver}"]
    if args.calibration:
        parts.append(f"--calibration {args.calibration}")
    for flag, value in (
        ("--alpha", args.alpha),
        ("--beta", args.beta),
        ("--capacity-pps", args.capacity_pps),
    ):
        if value is not None:
            parts.append(f"{flag} {value:g}")
    return " ".join(parts)


def _coefficients(args: argparse.Namespace, plans, error):
    if args.calibration:
        if args.alpha is not None or args.beta is not None:
            raise error("--calibration and --alpha/--beta exclude each other")
        coefficients = plans.Coefficients.from_calibration(args.calibration)
    else:
        alpha = PAPER_ALPHA if args.alpha is None else args.alpha
        beta = PAPER_BETA if args.beta is None else args.beta
        for name, value in (("--alpha", alpha), ("--beta", beta)):
            if not value > 0:
                raise error(f"{name}: must be > 0, got {value:g}")
        source = "paper's coefficients" if args.alpha is None and args.beta is None else "given"
        coefficients = plans.Coefficients(alpha, beta, None, source)
    if args.capacity_pps is not None:
        if not args.capacity_pps > 0:
            raise error(f"--capacity-pps: must be > 0, got {args.capacity_pps:g}")
        coefficients = plans.Coefficients(
            coefficients.alpha, coefficients.beta, args.capacity_pps, coefficients.source
        )
    return coefficients


def _down(args: argparse.Namespace) -> int:
    from cosample.experiments.testbed import build

    problems = build.down(args.state_dir)
    if problems:
        for problem in problems:
            print(f"cosample: testbed down: {problem}", file=sys.stderr)
        return 1
    print(f"testbed down: removed everything recorded in {args.state_dir}")
    return 0
