"""``cosample collector run|replay|merge``: the plan-aware sFlow collector's commands."""

from __future__ import annotations

import argparse
import math
import socket
import sys
from pathlib import Path
from typing import NoReturn

from cosample.collector.polling import PLAN_INTERVAL_S, PLAN_TIMEOUT_S
from cosample.daemonconfig import apply_config, configurable, setup_logging
from cosample.dataplane.ipfix import IPFIX_PORT
from cosample.events import add_event_arguments, event_options
from cosample.httplimits import Limits
from cosample.plan.formats import COLLECTOR_MAX_PLAN_MIB, SAFE_SAMPLING

#: The largest socket receive buffer asked for: SO_RCVBUF is a C int, doubled by the kernel.
MAX_RECEIVE_BUFFER = 2**30


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "collector",
        help="plan-aware sFlow collector: per-server traffic from mixed sampling",
        description="Receive sFlow from every host, attribute each sample to the server whose VM "
        "sent it and renormalise by the plan (docs/collector.md).",
    )
    commands = parser.add_subparsers(dest="collector_command", metavar="ACTION")
    commands.required = True

    run = commands.add_parser("run", help="the collector daemon")
    run.add_argument(
        "--plan",
        required=True,
        metavar="PATH-or-URL",
        help="plan (or plan set) the agents run; polled for changes",
    )
    run.add_argument(
        "--listen",
        required=True,
        metavar="HOST:PORT",
        help="where the bridges send sFlow (the plan's sflow.collector; port 0: a "
        "free one, printed at start)",
    )
    run.add_argument(
        "--ipfix",
        metavar="HOST:PORT",
        help="also receive IPFIX from OVS's sample action here (hosts whose plan "
        f'says local_mechanism "sample"; the usual port is {IPFIX_PORT}, '
        "0: a free one); off unless given",
    )
    run.add_argument(
        "--public-key",
        metavar="KEY",
        help="require plans signed by this ed25519 key (PLAN.sig beside the plan, "
        "as the agents; `cosample agent keygen`)",
    )
    run.add_argument(
        "--insecure-unsigned",
        action="store_true",
        help="accept unsigned plans (labs only; warns at start and in "
        "cosample_collector_insecure_unsigned)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve /metrics, /snapshot and /healthz over HTTP on this port",
    )
    run.add_argument("--http-host", default="127.0.0.1", help="address of the HTTP server")
    run.add_argument(
        "--http-max-connections",
        type=int,
        default=Limits.max_connections,
        metavar="N",
        help=f"HTTP connections open at once (default {Limits.max_connections}); one more "
        "shuts the oldest idle one, or the oldest still sending its request (docs/collector.md)",
    )
    run.add_argument(
        "--http-idle-timeout",
        type=float,
        default=Limits.idle_s,
        metavar="S",
        help=f"close an HTTP connection idle this long (default {Limits.idle_s:g})",
    )
    run.add_argument("--state-dir", type=Path, help="write snapshot.json here every export")
    run.add_argument(
        "--snapshot-key",
        metavar="PRIVATE.pem",
        help="ed25519 key signing every /snapshot served (header "
        "X-Cosample-Signature; the controller's --collector-key verifies it)",
    )
    run.add_argument(
        "--reuse-port",
        action="store_true",
        help="SO_REUSEPORT: several instances share --listen (one per core); merge their snapshots",
    )
    run.add_argument(
        "--receive-buffer",
        type=int,
        default=8 << 20,
        metavar="BYTES",
        help="socket receive buffer (default 8 MiB; forced past the sysctl limit "
        "as root): rides out bursts while the CPU is busy",
    )
    run.add_argument(
        "--safe-sampling",
        type=int,
        default=SAFE_SAMPLING,
        metavar="N",
        help=f"the agents' safe_sampling (default {SAFE_SAMPLING}): the only 1-in-N weighed "
        "while no plan is in force or it expired; others are dropped as unplanned_sampling_rate",
    )
    run.add_argument(
        "--partial",
        action="store_true",
        help="this instance hears only some agents (one of several, merged by the "
        "controller): never conclude that a stream the plan expects is missing",
    )
    _common(run)
    run.add_argument(
        "--window",
        type=float,
        default=30.0,
        metavar="S",
        help="estimation window in seconds (default 30)",
    )
    run.add_argument(
        "--export-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="how often snapshot, metrics and events are refreshed (default 1)",
    )
    run.add_argument(
        "--plan-interval",
        type=float,
        default=PLAN_INTERVAL_S,
        metavar="S",
        help=f"how often the plan is re-read (default {PLAN_INTERVAL_S:g})",
    )
    run.add_argument(
        "--max-plan-mib",
        type=float,
        default=COLLECTOR_MAX_PLAN_MIB,
        metavar="MiB",
        help="refuse a plan document larger than this (default %(default)s: a "
        "10^6-server two-phase plan set is about 340 MB)",
    )
    run.add_argument(
        "--plan-timeout",
        type=float,
        default=PLAN_TIMEOUT_S,
        metavar="S",
        help=f"bound on one read of the plan (default {PLAN_TIMEOUT_S:g}); the "
        "controller's --lead must cover interval and timeout "
        '(docs/collector.md, "Plan changes")',
    )
    add_event_arguments(run)
    run.set_defaults(func=_run)
    configurable(run, "metrics_port = 9478")

    replay = commands.add_parser("replay", help="estimate from a pcap of sFlow datagrams")
    replay.add_argument(
        "--plan",
        metavar="PATH-or-URL",
        help="plan the agents ran; without it every agent heard samples locally "
        "at the rate it reports, and the agents heard are listed",
    )
    replay.add_argument("capture", type=Path, metavar="CAPTURE.pcap")
    replay.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    replay.add_argument(
        "--window",
        type=float,
        metavar="S",
        help="estimate over the last S seconds (default: the whole capture)",
    )
    _common(replay)
    replay.set_defaults(func=_replay)

    merge = commands.add_parser("merge", help="merge snapshots of several collector instances")
    merge.add_argument("snapshots", nargs="+", type=Path, metavar="SNAPSHOT.json")
    merge.add_argument("--name", help="collector name of the result")
    merge.set_defaults(func=_merge)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="VM addresses per server (traffic matrix) and agent addresses",
    )
    parser.add_argument(
        "--name",
        default=socket.gethostname(),
        help="instance name in the snapshot (default: host name)",
    )
    parser.add_argument(
        "--reexport",
        metavar="HOST:PORT",
        help="re-send normalised samples under their origin server's agent",
    )


def _inventory(args):
    if args.inventory is None:
        return None
    from cosample.collector.inventory import read_inventory

    return read_inventory(args.inventory)


def _address(value: str, option: str, any_port: bool = False) -> tuple[str, int]:
    """``HOST:PORT``; ``any_port``: port 0 is allowed (a free one, printed at start)."""
    from cosample.collector.errors import CollectorError
    from cosample.collector.reexport import parse_target

    try:
        if any_port and value.endswith(":0"):
            return parse_target(value[:-1] + "1")[0], 0
        return parse_target(value)
    except CollectorError:
        raise CollectorError(f"{option}: expected HOST:PORT, got {value!r}") from None


def _run(args) -> int:
    import signal

    from cosample.collector.service import Service, Settings

    args = apply_config(args)
    setup_logging(args.log_level)
    _check_run(args)
    band, max_silence_s = event_options(args)
    settings = Settings(
        listen=_address(args.listen, "--listen", any_port=True),
        plan=args.plan,
        name=args.name,
        metrics_port=args.metrics_port,
        http_host=args.http_host,
        state_dir=args.state_dir,
        http_max_connections=int(_positive(args.http_max_connections, "--http-max-connections")),
        http_idle_timeout_s=_positive(args.http_idle_timeout, "--http-idle-timeout"),
        window_s=_positive(args.window, "--window"),
        export_s=_positive(args.export_interval, "--export-interval"),
        plan_interval_s=_positive(args.plan_interval, "--plan-interval"),
        plan_timeout_s=_positive(args.plan_timeout, "--plan-timeout"),
        reexport=_address(args.reexport, "--reexport") if args.reexport else None,
        events=args.events,
        band=band,
        max_silence_s=max_silence_s,
        reuse_port=args.reuse_port,
        partial=args.partial,
        safe_sampling=_sampling(args.safe_sampling),
        public_key=args.public_key,
        insecure_unsigned=args.insecure_unsigned,
        receive_buffer=int(_positive(args.receive_buffer, "--receive-buffer")),
        snapshot_key=args.snapshot_key,
        ipfix=_address(args.ipfix, "--ipfix", any_port=True) if args.ipfix else None,
        max_plan_bytes=int(_positive(args.max_plan_mib, "--max-plan-mib") * 1024 * 1024),
    )
    if args.snapshot_key:
        from cosample.plan.signing import key_permission_warning

        warning = key_permission_warning(args.snapshot_key)
        if warning:
            print(f"cosample: {warning}", file=sys.stderr)
    service = Service(settings, _inventory(args)).start()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: service.stop())
    host, port = service.listen_address
    http = (
        f", HTTP on {service.http_address[0]}:{service.http_address[1]}"
        if settings.metrics_port is not None
        else ""
    )
    if settings.ipfix is not None:
        http += f", IPFIX on {service.ipfix_address[0]}:{service.ipfix_address[1]}"
    print(f"collector {settings.name}: sFlow on {host}:{port}{http}", file=sys.stderr, flush=True)
    service.run()  # returns stopped: sockets and receive processes closed, last export written
    _end_process()


def _end_process() -> NoReturn:
    """End the stopped daemon without the interpreter's finalization. A worker may still be in
    a call whose result is discarded (the poller parsing a new plan: seconds at 10^5 hosts);
    finalization would stop it with ``pthread_exit`` when it next takes the GIL (CPython
    gh-87135), and inside pydantic-core, whose Rust frames catch that unwinding, glibc aborts
    the process ("FATAL: exception not rethrown", SIGABRT) instead of exiting 0."""
    import logging
    import os

    logging.shutdown()  # the log's handlers flushed, as at a normal exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _positive(value: float, option: str) -> float:
    """``value`` if it is a finite number above 0, else one error naming ``option``."""
    from cosample.collector.errors import CollectorError

    if not 0 < value < math.inf:
        raise CollectorError(f"{option}: must be a number > 0, got {value}")
    return value


def _sampling(value: int) -> int:
    from cosample.collector.errors import CollectorError

    if not 1 <= value <= 2**32 - 1:
        raise CollectorError(
            f"--safe-sampling: expected a 1-in-N from 1 to 4294967295, got {value}"
        )
    return value


def _check_run(args) -> None:
    """What the daemon's parts would only refuse later, with a traceback: ports, sizes, bands."""
    from cosample.collector.errors import CollectorError

    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise CollectorError(f"--metrics-port: expected 0 to 65535, got {args.metrics_port}")
    if not 0 < args.receive_buffer <= MAX_RECEIVE_BUFFER:
        raise CollectorError(
            f"--receive-buffer: expected 1 to {MAX_RECEIVE_BUFFER} bytes, got {args.receive_buffer}"
        )


def _replay(args) -> int:
    from cosample.collector.pcap import Capture
    from cosample.collector.replay import Survey, heard_table, run, table
    from cosample.collector.snapshotwire import snapshot_json
    from cosample.gcpause import gc_paused

    source = Capture(args.capture)
    heard = Survey() if args.plan is None and not args.json else None
    estimator, last = run(
        args.plan,
        args.capture,
        inventory=_inventory(args),
        name=args.name,
        window_s=_positive(args.window, "--window") if args.window is not None else None,
        reexport=_address(args.reexport, "--reexport") if args.reexport else None,
        source=source,
        heard=heard,
    )
    if source.unused_bytes:
        print(
            f"cosample: warning: {args.capture}: cut off in record {source.cut_record}: the "
            f"last {source.unused_bytes} bytes hold no complete record and were not used",
            file=sys.stderr,
        )
    with gc_paused():  # 10^4 servers' rows: many containers, no cycles
        text = (
            snapshot_json(estimator.snapshot_data(last))
            if args.json
            else table(estimator.snapshot(last))
        )
    print(text, end="")
    if heard is not None:  # (no --plan, no --json)
        print("\nagents heard (no --plan: each samples locally at the rate it reports):")
        print(heard_table(heard), end="")
    return 0


def _merge(args) -> int:
    from cosample.collector.errors import CollectorError
    from cosample.collector.merge import merge_snapshots
    from cosample.collector.snapshot import parse_snapshot

    parts = []
    for path in args.snapshots:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CollectorError(f"{path}: cannot read ({exc.strerror})") from None
        parts.append(parse_snapshot(data, where=str(path)))
    print(merge_snapshots(parts, name=args.name).to_json(), end="")
    return 0
