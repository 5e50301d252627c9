"""``cosample agent ...``: run, apply once, dry-run, status, remove, check-config, validate,
keygen, sign, transition. Imports stay light; the work happens in the handlers."""

from __future__ import annotations

import argparse
import json
import sys

from cosample.durations import duration_argument as duration


def register(subparsers) -> None:
    agent = subparsers.add_parser(
        "agent",
        help="apply this host's part of a plan to OVS",
        description="Per-host agent: turn a plan into OVS state.",
    )
    commands = agent.add_subparsers(dest="agent_command", metavar="ACTION")
    commands.required = True

    run = commands.add_parser("run", help="fetch and apply the plan on schedule (daemon)")
    _host_options(run)
    run.add_argument("--cycles", type=int, help="stop after this many cycles (testing)")
    run.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="least severe log lines written (default: the config's log_level, else info)",
    )
    run.set_defaults(func=_run)

    apply = commands.add_parser("apply", help="fetch and apply the plan once")
    _host_options(apply)
    apply.add_argument("--once", action="store_true", help="one cycle (the default for apply)")
    apply.add_argument(
        "--dry-run",
        action="store_true",
        help="print the commands that would run; change nothing, write nothing",
    )
    apply.set_defaults(func=_apply)

    remove = commands.add_parser("remove", help="remove everything the agent owns on this host")
    _host_options(remove)
    remove.set_defaults(func=_remove)

    check = commands.add_parser("check-config", help="print the normalised configuration")
    _host_options(check)
    check.set_defaults(func=_check_config)

    status = commands.add_parser("status", help="print the last cycle's status")
    status.add_argument("--config", help="agent config file (TOML or YAML)")
    status.add_argument("--state-dir", help="the agent's state directory")
    status.set_defaults(func=_status)

    spec = commands.add_parser(
        "appmon-spec",
        help="print what this host's application "
        "analyser reads: interfaces, BPF filters, snap lengths",
    )
    spec.add_argument("--config", help="agent config file (TOML or YAML)")
    spec.add_argument("--state-dir", help="the agent's state directory (its last status)")
    spec.add_argument("--plan", help="read this plan file instead of the last status")
    spec.add_argument("--host", help="this host's name in the plan (with --plan)")
    spec.set_defaults(func=_appmon_spec)

    validate = commands.add_parser("validate", help="check a plan file (and signature)")
    validate.add_argument("plan", help="plan file, plan set, or http(s) URL")
    validate.add_argument("--host", help="also check that this host can realise its part")
    validate.add_argument("--public-key", help="verify PLAN.sig with this ed25519 public key")
    validate.add_argument(
        "--config",
        help="agent config file: its max_plan_mib, public_key, "
        "timeout_s and host apply (options win)",
    )
    validate.add_argument(
        "--max-plan-mib",
        type=int,
        dest="max_plan_mib",
        help="largest plan document fetched, MiB (default: the config's, else 256)",
    )
    validate.set_defaults(func=_validate)

    keygen = commands.add_parser("keygen", help="create an ed25519 key pair for signing plans")
    keygen.add_argument("private_key")
    keygen.add_argument("public_key")
    keygen.set_defaults(func=_keygen)

    sign = commands.add_parser("sign", help="write PLAN.sig (detached ed25519 signature)")
    sign.add_argument("plan")
    sign.add_argument("--key", required=True, help="private key file from keygen")
    sign.set_defaults(func=_sign)

    trans = commands.add_parser(
        "transition", help="two-phase plan set from OLD to NEW (decreases first)"
    )
    trans.add_argument("old")
    trans.add_argument("new")
    trans.add_argument(
        "--settle",
        type=duration,
        default=120.0,
        help="wait between the phases (default 120s; > interval + jitter)",
    )
    trans.add_argument(
        "-o", "--output", required=True, help="plan set file to write ('-': standard output)"
    )
    trans.set_defaults(func=_transition)


def _host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="agent config file (TOML, or YAML by extension)")
    parser.add_argument("--host", help="this host's name in the plan")
    parser.add_argument("--plan", help="plan file path or http(s) URL")
    parser.add_argument(
        "--interval", type=duration, dest="interval_s", help="time between cycles (default 30s)"
    )
    parser.add_argument(
        "--jitter", type=duration, dest="jitter_s", help="random extra wait up to this (default 5s)"
    )
    parser.add_argument("--ovsdb", help="OVSDB remote (default unix:/var/run/openvswitch/db.sock)")
    parser.add_argument("--ovs-rundir", help="folder of BRIDGE.mgmt (default: the socket's)")
    parser.add_argument("--bridge", help="bridge (default: from the plan, else br-int)")
    parser.add_argument(
        "--vm-port",
        action="append",
        dest="vm_ports",
        help="a VM port to mirror from (repeat; default: from the plan, else "
        "all non-tunnel ports of the bridge)",
    )
    parser.add_argument("--collector", help="sFlow collector HOST:PORT if the plan has none")
    parser.add_argument(
        "--ipfix-collector",
        help="IPFIX collector HOST:PORT of a host the plan has sample (if the plan has none)",
    )
    parser.add_argument("--state-dir", help="status, metrics, last good plan")
    parser.add_argument("--public-key", help="require plans signed by this ed25519 key")
    parser.add_argument(
        "--insecure-unsigned",
        action="store_const",
        const=True,
        help="accept unsigned plans (labs only; warns on every cycle)",
    )
    parser.add_argument(
        "--timeout",
        type=duration,
        dest="timeout_s",
        help="timeout of every external call (default 10s)",
    )
    parser.add_argument("--metrics-port", type=int, help="serve metrics on 127.0.0.1:PORT")
    parser.add_argument(
        "--max-plan-mib",
        type=int,
        dest="max_plan_mib",
        help="largest plan document fetched, MiB (default 256)",
    )
    parser.add_argument(
        "--slices",
        choices=("auto", "always", "never"),
        help="read this host's slice (hosts/HOST beside the plan) instead of "
        "the whole plan: auto (default: when served), always, never",
    )


_OPTION_KEYS = (
    "host",
    "plan",
    "interval_s",
    "jitter_s",
    "ovsdb",
    "ovs_rundir",
    "bridge",
    "vm_ports",
    "collector",
    "ipfix_collector",
    "state_dir",
    "public_key",
    "insecure_unsigned",
    "timeout_s",
    "metrics_port",
    "max_plan_mib",
    "slices",
    "log_level",
)


def _config(args, needs_plans: bool = False):
    """The configuration; ``needs_plans``: refuse to start without a way to trust plans."""
    from cosample.agents.config import load_config
    from cosample.agents.errors import ConfigError
    from cosample.agents.planreader import unsigned_warning

    config = load_config(args.config, {key: getattr(args, key, None) for key in _OPTION_KEYS})
    if needs_plans:
        if config.public_key is None and not config.insecure_unsigned:
            raise ConfigError(
                f"{args.config or 'command line'}: public_key: required to verify "
                f"plans (or --insecure-unsigned / insecure_unsigned = true for a "
                f"lab, never production)"
            )
        warning = unsigned_warning(config)
        if warning:
            print(f"WARNING: {warning}", file=sys.stderr)
    return config


def _print_report(report, dry_run: bool = False) -> None:
    from cosample.agents.report import INSECURE_TAG

    if report.result == "dry-run":
        for line in report.commands:
            print(line)
    if dry_run and report.result != "dry-run":
        summary = f"{report.result}: {report.reason}; nothing could be worked out (below)"
    else:
        summary = (
            f"{report.result}: {report.reason}; {len(report.commands)} command(s)"
            f"{' would run' if dry_run else ' applied'}"
        )
    print(summary)
    for problem in report.problems:
        print(f"problem: {problem}", file=sys.stderr)
    for warning in report.warnings:
        if not warning.startswith(INSECURE_TAG):  # printed once, when the config is read
            print(f"warning: {warning}", file=sys.stderr)
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)


def _print_now(line: str) -> None:
    """Each applied command as it happens (a killed run still shows how far it got)."""
    print(line, flush=True)


def _exit_code(report) -> int:
    """0: converged on the plan; 2: an input was rejected (the host kept its last good
    state); 1: anything else (degraded, diverged, host or fetch error)."""
    if report.result in ("ok", "dry-run"):
        return 0
    return 2 if report.result == "rejected" else 1


def _apply(args) -> int:
    from cosample.agents.runner import Agent

    report = Agent(_config(args, needs_plans=True), on_command=_print_now).cycle(
        dry_run=args.dry_run
    )
    _print_report(report, dry_run=args.dry_run)
    return _exit_code(report)


def _remove(args) -> int:
    from cosample.agents.runner import Agent

    report = Agent(_config(args), on_command=_print_now).remove()
    _print_report(report)
    return _exit_code(report)


def _run(args) -> int:
    import signal
    import threading

    from cosample.agents.report import serve_metrics
    from cosample.agents.runner import Agent
    from cosample.daemonconfig import setup_logging

    config = _config(args, needs_plans=True)
    setup_logging(config.log_level, "%(asctime)s %(levelname)s %(message)s")
    agent = Agent(config)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if config.metrics_port:
        serve_metrics(agent.metrics, config.metrics_port)
    agent.run(stop, max_cycles=args.cycles)
    if args.cycles is None or stop.is_set():
        return 0  # a daemon stopped: its status says how the last cycle went
    from cosample.agents.report import read_status  # --cycles N: the last cycle is the answer

    status = read_status(config.state_dir) or {}
    if status.get("result") == "ok":
        return 0
    why = "; ".join([status.get("reason", ""), *status.get("errors", [])][:4]) or "no status"
    print(f"cosample: agent: the last cycle ended {status.get('result')}: {why}", file=sys.stderr)
    return 2 if status.get("result") == "rejected" else 1


def _check_config(args) -> int:
    print(json.dumps(_config(args).as_dict(), indent=2, sort_keys=True))
    return 0


def _status(args) -> int:
    from cosample.agents.config import AgentConfig, load_config
    from cosample.agents.errors import AgentError
    from cosample.agents.report import read_status

    if args.state_dir:
        state_dir = args.state_dir
    elif args.config:
        state_dir = load_config(args.config, {"host": "-"}).state_dir
    else:
        state_dir = AgentConfig(host="-").state_dir
    status = read_status(state_dir)
    if status is None:
        raise AgentError(f"{state_dir}: no status yet; has the agent run?")
    print(json.dumps(status, indent=2, sort_keys=True))
    return 0 if status.get("result") == "ok" else 1


def _appmon_spec(args) -> int:
    """The analyser's inputs: from a plan (``--plan``), else from the running plan's status."""
    from pathlib import Path

    from cosample.agents.appmon_state import analyser_spec
    from cosample.agents.config import AgentConfig, load_config
    from cosample.agents.errors import AgentError
    from cosample.agents.report import read_status
    from cosample.plan.document import parse_plan

    if args.plan:
        config = load_config(args.config, {"host": args.host})
        plan = parse_plan(Path(args.plan).read_bytes(), source=args.plan)
        host = plan.hosts.get(config.host)
        if host is None:
            raise AgentError(f"{args.plan}: hosts: no entry for this host {config.host!r}")
        out = {
            "host": config.host,
            "plan_version": plan.version,
            "analyser": list(analyser_spec(plan, host)),
        }
    else:
        state_dir = args.state_dir or (
            load_config(args.config, {"host": "-"}).state_dir
            if args.config
            else AgentConfig(host="-").state_dir
        )
        status = read_status(state_dir)
        if status is None:
            raise AgentError(f"{state_dir}: no status yet; has the agent run?")
        desired = status.get("desired") or {}
        out = {
            "host": status.get("host"),
            "plan_version": status.get("plan_version"),
            "analyser": (desired.get("appmon") or {}).get("analyser", []),
        }
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _validate(args) -> int:
    """Fetch and check a plan as an agent with the same settings would (size limit, key)."""
    from cosample.agents.config import load_config
    from cosample.agents.desired import desired_state
    from cosample.agents.errors import AgentError
    from cosample.plan.document import parse_document
    from cosample.plan.signing import verify
    from cosample.plan.source import fetch
    from cosample.times import format_time, utcnow

    config = load_config(
        args.config,
        {"host": args.host, "public_key": args.public_key, "max_plan_mib": args.max_plan_mib},
        defaults={"host": _NO_HOST},
    )  # host: only to check its part
    fetched = fetch(
        args.plan,
        timeout_s=config.timeout_s,
        with_signature=config.public_key is not None,
        max_bytes=config.max_plan_mib * 1024 * 1024,
    )
    if config.public_key:
        verify(fetched.data, fetched.signature, config.public_key)
    now = utcnow()
    for plan in parse_document(fetched.data, source=args.plan):
        if config.host != _NO_HOST:
            desired_state(plan, config)
        left = (plan.expires - now).total_seconds()
        if left <= 0:  # agents fall back to their safe state: not a plan to run
            raise AgentError(
                f"{args.plan}: plan version {plan.version}: expired at "
                f"{format_time(plan.expires)}, {-left:.0f} s ago"
            )
        when = f", not before {format_time(plan.not_before)}" if plan.not_before else ""
        print(
            f"plan version {plan.version} ({len(plan.hosts)} hosts, expires "
            f"{format_time(plan.expires)}{when}): valid"
        )
        validity = (plan.expires - plan.created).total_seconds()
        if left < validity / 10:
            print(
                f"cosample: warning: plan version {plan.version} expires in {left:.0f} s, the "
                f"last tenth of its validity ({validity:.0f} s): is its publisher refreshing it?",
                file=sys.stderr,
            )
    return 0


_NO_HOST = "\x00no host"  # not a valid host name in a plan: no host part checked


def _keygen(args) -> int:
    from cosample.plan.signing import generate_keypair

    generate_keypair(args.private_key, args.public_key)
    print(f"wrote {args.private_key} (keep secret) and {args.public_key}")
    return 0


def _sign(args) -> int:
    from cosample.plan.signing import key_permission_warning, sign_file

    warning = key_permission_warning(args.key)
    if warning:
        print(f"cosample: {warning}", file=sys.stderr)
    print(f"wrote {sign_file(args.plan, args.key)}")
    return 0


def _transition(args) -> int:
    from pathlib import Path

    from cosample.agents.errors import AgentError
    from cosample.files import is_stdout, write_output
    from cosample.plan.document import parse_plan
    from cosample.plan.transition import transition
    from cosample.times import utcnow

    plans = []
    for path in (args.old, args.new):
        try:
            with open(path, "rb") as handle:
                plans.append(parse_plan(handle.read(), source=path))
        except OSError as exc:
            raise AgentError(f"{path}: cannot read ({exc.strerror})") from None
    document = transition(plans[0], plans[1], utcnow(), args.settle)
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    out = sys.stderr if is_stdout(args.output) else sys.stdout  # -o -: the plan set there
    if not is_stdout(args.output):
        try:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AgentError(f"{args.output}: cannot write ({exc.strerror})") from None
    print(
        f"wrote {write_output(args.output, lambda stream: stream.write(text))}: phase 1 "
        f"version {document['plans'][0]['version']} now, phase 2 version "
        f"{document['plans'][1]['version']} not before {document['plans'][1]['not_before']}",
        file=out,
    )
    return 0
