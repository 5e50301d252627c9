"""``cosample controller run|check|status``: parsing here, the loop in ``loop``."""

from __future__ import annotations

import argparse
import json
import math
import sys

DEFAULT_STATE_DIR = "/var/lib/cosample-controller"


def register(subparsers: argparse._SubParsersAction) -> None:
    from cosample.collector.polling import plan_lead_s
    from cosample.daemonconfig import configurable
    from cosample.durations import duration_argument as duration

    controller = subparsers.add_parser(
        "controller",
        help="closed loop: measure, re-plan, publish signed plans",
        description="Read the collectors' snapshots every interval, re-plan, and publish a new "
        "signed plan only when it matters; see docs/controller.md.",
    )
    actions = controller.add_subparsers(dest="controller_command", metavar="ACTION")
    actions.required = True

    run = actions.add_parser("run", help="the controller daemon")
    run.add_argument(
        "--inventory",
        required=True,
        metavar="FILE",
        help="servers, bridges, tunnels, VM ports, capacities, calibrations",
    )
    run.add_argument(
        "--collector",
        required=True,
        action="append",
        metavar="NAME=URL",
        help="a collector's name (its --name) and base URL or /snapshot URL, or "
        "snapshot file: only that collector's snapshots are taken from there (the name "
        "may be left out with --insecure-unsigned-snapshots); repeat for several "
        "collectors (each owning a set of agents)",
    )
    run.add_argument(
        "--interval",
        type=duration,
        default=30.0,
        metavar="DURATION",
        help="cycle length (default 30s)",
    )
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--serve", metavar="HOST:PORT", help="serve plan.json(.sig), /status and /metrics over HTTP"
    )
    where.add_argument(
        "--publish", metavar="DIR", help="write plan.json and plan.json.sig atomically into DIR"
    )
    run.add_argument(
        "--no-slices",
        action="store_true",
        help="publish the whole plan alone, without each host's slice at "
        "hosts/NAME beside it (docs/controller.md)",
    )
    signing = run.add_mutually_exclusive_group(required=True)
    signing.add_argument("--key", metavar="PRIVATE.pem", help="ed25519 key that signs plans")
    signing.add_argument(
        "--insecure-unsigned",
        action="store_true",
        help="publish unsigned plans (agents must opt out of signatures too)",
    )
    trust = run.add_mutually_exclusive_group(required=True)
    trust.add_argument(
        "--collector-key",
        action="append",
        metavar="PUBLIC.pem",
        help="a collector's public key: snapshots count only when signed by one "
        "of these (collector run --snapshot-key); repeat for several",
    )
    trust.add_argument(
        "--insecure-unsigned-snapshots",
        action="store_true",
        help="plan from unsigned snapshots: anyone who can answer for a "
        "collector URL steers the plans (labs only)",
    )
    run.add_argument(
        "--analyser",
        action="append",
        metavar="NAME=URL",
        help="an application analyser's name (its --name) and base URL or /snapshot URL "
        "(appmon run --metrics-port), or its snapshot.json; repeat for several. The "
        "inventory's services are planned with the request rates they report",
    )
    run.add_argument(
        "--analyser-key",
        action="append",
        metavar="PUBLIC.pem",
        help="an analyser's public key: its snapshots count only when signed by "
        "one of these (appmon run --snapshot-key); repeat for several",
    )
    run.add_argument(
        "--insecure-unsigned-analysers",
        action="store_true",
        help="plan from unsigned analyser snapshots (labs only)",
    )
    run.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help=f"versions, plan in force, status (default {DEFAULT_STATE_DIR})",
    )
    run.add_argument(
        "--tau",
        type=duration,
        default=None,
        metavar="DURATION",
        help="EWMA time constant of the traffic (default 3 intervals)",
    )
    run.add_argument(
        "--rise-tau",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="time constant for rising traffic (default 0s: rises are followed at "
        "once, only falls are smoothed)",
    )
    run.add_argument(
        "--hold",
        type=duration,
        default=None,
        metavar="DURATION",
        help="falls smaller than a step count only after lasting this long "
        "(default: --tau); the first plan waits for max(tau, hold) of snapshots",
    )
    run.add_argument(
        "--change",
        type=float,
        default=0.25,
        help="a server's total moving this much between two cycles is a step, not "
        "noise (default 0.25; 0: no steps)",
    )
    run.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="publish when a server is predicted above capacity x (1 - margin) (default 0.05)",
    )
    run.add_argument(
        "--plan-margin",
        type=float,
        default=0.15,
        help="plan to capacity x (1 - plan-margin); must exceed --margin (default 0.15)",
    )
    run.add_argument(
        "--min-gain",
        type=float,
        default=0.10,
        help="publish when the new plan collects this much more (default 0.10)",
    )
    run.add_argument(
        "--confirm",
        type=int,
        default=3,
        metavar="CYCLES",
        help="cycles in a row the gain must hold (default 3)",
    )
    run.add_argument(
        "--valid-for",
        type=duration,
        default=3600.0,
        metavar="DURATION",
        help="plan validity; agents fall back to their safe state after it (1h)",
    )
    run.add_argument(
        "--settle",
        type=duration,
        default=120.0,
        metavar="DURATION",
        help="two-phase transitions: wait between phases; above the agents' "
        "interval + jitter + apply time (default 120s)",
    )
    run.add_argument(
        "--lead",
        type=duration,
        default=plan_lead_s(),
        metavar="DURATION",
        help="every plan's not_before is this long after its publication, so the "
        "collector knows it before any agent may apply it: at least the "
        "collector's --plan-interval and --plan-timeout (default: "
        f"collector.polling.plan_lead_s of the collector's defaults, {plan_lead_s():g}s); "
        "0: plans apply at once and the quiet after a publication also "
        "waits out the collector's window (docs/controller.md)",
    )
    run.add_argument(
        "--max-age",
        type=duration,
        default=None,
        metavar="DURATION",
        help="a snapshot older than this is stale (default 3 intervals)",
    )
    run.add_argument(
        "--timeout",
        type=duration,
        default=10.0,
        metavar="DURATION",
        help="total timeout of each snapshot fetch (default 10s)",
    )
    run.add_argument(
        "--measure-sampling",
        type=int,
        default=4096,
        metavar="N",
        help="a server that would sample nothing samples 1-in-N, so traffic appearing "
        "anywhere is seen; with no plan in force and no snapshot knowing a "
        "server for --measure-after, a measurement plan (1-in-N everywhere, no mirrors) "
        "is published; 0: off (default 4096)",
    )
    run.add_argument(
        "--measure-after",
        type=duration,
        default=60.0,
        metavar="DURATION",
        help="with no plan in force, wait this long for a snapshot that knows the "
        "servers (agents sample in their safe state; the collector attributes "
        "by its inventory's agent addresses) before the measurement plan "
        "(default 60s: two of the collector's default 30-s windows)",
    )
    run.add_argument(
        "--implausible-slack",
        type=float,
        default=0.25,
        metavar="FRACTION",
        help="an estimate above capacity x (1 + this) is refused as evidence: no "
        "server forwards more than its capacity (default 0.25)",
    )
    run.add_argument(
        "--jump",
        type=float,
        default=4.0,
        metavar="FACTOR",
        help="a server's estimate rising above FACTOR x its last accepted one (and "
        "by a quarter of its capacity) waits for a second, disjoint collector "
        "window before a plan follows it (default 4; 0: off)",
    )
    run.add_argument(
        "--cycles",
        type=int,
        default=None,
        metavar="N",
        help="stop after N cycles (default: run until SIGTERM/SIGINT)",
    )
    run.set_defaults(func=_run)
    configurable(run, 'collector_key = ["/etc/cosample/snapshot.pub"]')

    check = actions.add_parser("check", help="validate an inventory, print it normalised")
    check.add_argument("--inventory", required=True, metavar="FILE")
    check.set_defaults(func=_check)

    status = actions.add_parser("status", help="print the last cycle's status.json")
    status.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    status.set_defaults(func=_status)


def settings_from(args: argparse.Namespace):
    """The loop's settings from parsed options; one ``ControllerError`` for a bad value."""
    from cosample.controller.appsource import analyser_url
    from cosample.controller.decide import Policy
    from cosample.controller.errors import ControllerError
    from cosample.controller.settings import Settings
    from cosample.controller.source import named, snapshot_url
    from cosample.plan.fieldtypes import MAX_SAMPLING

    if not 0 <= args.margin < 1:
        raise ControllerError(f"--margin: expected a fraction in [0, 1), got {args.margin:g}")
    if not args.margin < args.plan_margin < 1:
        raise ControllerError(
            f"--plan-margin: expected a fraction above --margin "
            f"({args.margin:g}) and below 1, got {args.plan_margin:g}"
        )
    if not 0 <= args.min_gain < math.inf:
        raise ControllerError(f"--min-gain: expected >= 0, got {args.min_gain:g}")
    if not 0 <= args.measure_sampling <= MAX_SAMPLING:  # the plan carries it: agents' bound
        raise ControllerError(
            f"--measure-sampling: expected N from 1 to {MAX_SAMPLING} (or 0: off), "
            f"got {args.measure_sampling}"
        )
    if not 0 <= args.change < math.inf:
        raise ControllerError(f"--change: expected a fraction >= 0, got {args.change:g}")
    if args.hold is not None and args.hold < 0:
        raise ControllerError(f"--hold: expected a duration >= 0, got {args.hold:g} s")
    if not 0 <= args.implausible_slack < math.inf:
        raise ControllerError(
            f"--implausible-slack: expected a fraction >= 0, got {args.implausible_slack:g}"
        )
    if args.jump != 0 and not 1 < args.jump < math.inf:
        raise ControllerError(f"--jump: expected a factor above 1 (or 0: off), got {args.jump:g}")
    if args.confirm < 1:
        raise ControllerError(f"--confirm: expected >= 1 cycle, got {args.confirm}")
    for flag, value in (
        ("--interval", args.interval),
        ("--valid-for", args.valid_for),
        ("--timeout", args.timeout),
    ):
        if value <= 0:
            raise ControllerError(f"{flag}: expected a positive duration, got {value:g} s")
    lead = args.lead
    if lead < 0:
        raise ControllerError(f"--lead: expected a duration >= 0, got {lead:g} s")
    if args.valid_for <= 2 * args.interval + args.settle + lead:
        raise ControllerError(
            f"--valid-for: {args.valid_for:g} s must exceed two intervals plus "
            f"--settle and --lead ({2 * args.interval + args.settle + lead:g} s)"
        )
    if args.analyser and not args.analyser_key and not args.insecure_unsigned_analysers:
        raise ControllerError(
            "--analyser: give the analysers' public keys (--analyser-key) or "
            "--insecure-unsigned-analysers"
        )
    if (args.analyser_key or args.insecure_unsigned_analysers) and not args.analyser:
        raise ControllerError("--analyser-key / --insecure-unsigned-analysers: no --analyser given")
    for flag, locations, keys in (
        ("--collector", args.collector, args.collector_key),
        ("--analyser", args.analyser or (), args.analyser_key),
    ):
        unnamed = next((url for url in locations if named(url)[0] is None), None)
        if keys and unnamed is not None:
            raise ControllerError(
                f"{flag} {unnamed}: give it as NAME=URL, NAME being its --name: a signed "
                "snapshot is taken only from the location of the one it names (docs/controller.md)"
            )
    return Settings(
        analysers=tuple(analyser_url(url) for url in args.analyser or ()),
        analyser_keys=tuple(args.analyser_key or ()),
        collectors=tuple(snapshot_url(url) for url in args.collector),
        interval_s=args.interval,
        tau_s=args.tau if args.tau is not None else 3 * args.interval,
        rise_tau_s=args.rise_tau,
        hold_s=args.hold,
        change=args.change or None,
        max_age_s=args.max_age,
        valid_for_s=args.valid_for,
        plan_margin=args.plan_margin,
        settle_s=args.settle,
        lead_s=lead,
        policy=Policy(margin=args.margin, min_gain=args.min_gain, confirm_cycles=args.confirm),
        key=args.key,
        timeout_s=args.timeout,
        measure_sampling=args.measure_sampling or None,
        measure_after_s=args.measure_after,
        implausible_slack=args.implausible_slack,
        jump_factor=args.jump or None,
        collector_keys=tuple(args.collector_key or ()),
    )


def _run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from cosample.controller.inventory import load_inventory
    from cosample.controller.loop import Controller
    from cosample.controller.memory import keep_memory
    from cosample.controller.publish import DirectoryTarget, HttpTarget, directory_slices_warning
    from cosample.daemonconfig import apply_config, setup_logging
    from cosample.plan.fieldtypes import parse_hostport
    from cosample.plan.signing import key_permission_warning, sign_bytes

    args = apply_config(args)
    setup_logging(args.log_level)
    keep_memory()  # a daemon: each cycle's memory serves the next (controller/memory.py)
    settings = settings_from(args)
    inventory = load_inventory(args.inventory)
    if args.key:
        sign_bytes(b"", args.key)  # a bad key is an error now, not at the first publish
        warning = key_permission_warning(args.key)
        if warning:
            print(f"cosample: {warning}", file=sys.stderr)
    else:
        print(
            "cosample: warning: publishing UNSIGNED plans (--insecure-unsigned): anyone who "
            "can write the plan location controls every host's mirrors",
            file=sys.stderr,
        )
    if args.insecure_unsigned_snapshots:
        print(
            "cosample: warning: planning from UNSIGNED snapshots "
            "(--insecure-unsigned-snapshots): anyone who can answer for a collector URL "
            "steers the plans",
            file=sys.stderr,
        )
    controller = None
    if args.serve:
        host, port = parse_hostport(args.serve, "--serve")
        holder: dict = {}
        target: HttpTarget | DirectoryTarget = HttpTarget(
            host,
            port,
            lambda: holder["c"].last_status.as_dict() if holder["c"].last_status else {},
            lambda: holder["c"].metrics.exposition(),
            slices=not args.no_slices,
        )
    else:
        target = DirectoryTarget(args.publish, slices=not args.no_slices)
        warning = directory_slices_warning(inventory.size, not args.no_slices)
        if warning:
            print(f"cosample: {warning}", file=sys.stderr)
    try:
        controller = Controller(inventory, settings, target, args.state_dir)
        if args.serve:
            holder["c"] = controller
        print(
            f"controller: {inventory.size} servers, publishing to {target.describe()}",
            file=sys.stderr,
        )
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            controller.run(stop, max_cycles=args.cycles)
        finally:
            signal.signal(signal.SIGTERM, previous)
    except KeyboardInterrupt:
        pass
    finally:
        if isinstance(target, HttpTarget):  # (``--serve``)
            target.close()
    last = controller.last_status if controller else None
    if last is not None and last.result in ("published", "kept"):
        return 0
    # unsuccessful (--cycles, or stopped while stale or failing): why, where it is read
    why = "; ".join((*last.reasons, *last.problems[:5])) if last is not None else "no cycle ran"
    print(
        f"cosample: controller: the last cycle ended {last.result if last else 'never'}: "
        f"{why or 'no reason recorded'}",
        file=sys.stderr,
    )
    return 1


def _check(args: argparse.Namespace) -> int:
    from cosample.controller.inventory import load_inventory

    print(json.dumps(load_inventory(args.inventory).describe(), indent=2, sort_keys=True))
    return 0


def _status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cosample.controller.errors import ControllerError
    from cosample.controller.report import STATUS_FILE

    path = Path(args.state_dir) / STATUS_FILE
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ControllerError(f"{path}: no readable status ({exc})") from None
    print(json.dumps(status, indent=2, sort_keys=True))
    return 0 if status.get("result") in ("published", "kept") else 1
