"""``cosample fit`` and ``cosample calibrate``: parsing here, work in the handlers (lazy imports)."""

from __future__ import annotations

import argparse

#: Defaults that differ by method: the cpu method alternates fast (below), counts most of every
#: run, and measures where the slope is learnt best (rates 0 and 1; add 0.5 to check the law's
#: shape); the throughput method keeps the grid it always had.
#: The cpu method's phases are 0.1 s: its phase noise is slow (neighbouring phases correlate), so
#: arms 0.1 s apart cancel more of it; 12-s runs of 120 phases with a 0.02-s guard halved sFlow's
#: within-run noise and met the target in 3 of 3 quiet calibrations against 0 of 3 for 40
#: phases, and were narrower for the plain mirror in 3 of 3 rounds (docs/costmodel.md, "Shorter phases").
#: The VXLAN mirror has its own design ``(seconds, phases, guard)`` unless --duration, --phases
#: or --guard is given: its effect varies between runs more than the others', so more, shorter
#: runs narrow its interval most; 2-s runs of 8 phases reached the target sooner than 4-s runs
#: of 14 in three of three pairs (docs/costmodel.md, "Run design from the variance components").
RUN_LENGTHS = {"cpu": (("mirror_vxlan", 2.0, 8, 0.05),), "throughput": ()}
METHOD_DEFAULTS = {
    "cpu": {"rates": (0.0, 1.0), "duration": 12.0, "phases": 120, "guard": 0.02},
    "throughput": {
        "rates": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        "duration": 6.0,
        "phases": 4,
        "guard": 0.3,
    },
}


def register(subparsers: argparse._SubParsersAction) -> None:
    fit = subparsers.add_parser(
        "fit",
        help="fit the cost law T(s)=T0/(1+a*s) to measurements",
        description="Fit throughput-vs-rate measurements (tidy CSV: mechanism, rate, "
        "throughput_pps) per mechanism; print the fit, optionally write the "
        "calibration JSON (alpha = sflow, beta = mirror, capacity_pps).",
    )
    fit.add_argument("data", help="measurements CSV")
    fit.add_argument(
        "-o", "--output", help="write the calibration JSON here ('-': standard output)"
    )
    fit.add_argument("--figure", help="write a throughput-vs-rate figure (PNG/SVG/PDF)")
    fit.add_argument("--protocol", help="use only rows of this protocol (when the CSV mixes them)")
    _fit_options(fit)
    fit.set_defaults(func=_fit)

    cal = subparsers.add_parser(
        "calibrate",
        help="measure sampling/mirroring costs with iperf3 through real OVS",
        description="Run iperf3 between two endpoints on an OVS bridge at a grid of sFlow "
        "sampling and tc mirror rates (random order, repeated, after a warm-up), "
        "write the tidy CSV and the fitted calibration JSON. The cpu method "
        "(default) offers a fixed packet rate and counts the CPU time forwarding "
        "costs per packet; the throughput method floods and counts packets. "
        "--testbed builds everything on this host (root) and removes it "
        "afterwards; otherwise name the existing bridge, ports and endpoints. "
        "--passive injects nothing: it estimates the current capacity from CPU "
        "statistics.",
    )
    cal.add_argument("-d", "--data", default="calibration.csv", help="measurements CSV to write")
    cal.add_argument(
        "-o", "--output", help="JSON to write (default calibration.json; --passive: none)"
    )
    cal.add_argument(
        "--method",
        choices=("cpu", "throughput"),
        default="cpu",
        help="cpu: CPU time per packet at --offered-pps; throughput: packets/s forwarded flat out",
    )
    cal.add_argument(
        "--offered-pps",
        type=float,
        default=20_000.0,
        help="cpu method: the constant packet rate offered",
    )
    cal.add_argument(
        "--burst",
        type=int,
        default=0,
        help="cpu method: offer the load in bursts of this many packets (iperf3 "
        "-b RATE/N; 0: iperf3's own pacing)",
    )
    cal.add_argument(
        "--streams",
        type=int,
        default=1,
        help="parallel flows of the load (iperf3 -P, 1..128), sharing its rate",
    )
    cal.add_argument(
        "--flows",
        type=int,
        default=0,
        help="cpu method, UDP: the load as this many concurrent flows from the "
        "built-in generator (costmodel/flowgen.py, up to 64,512) instead of "
        "iperf3, sharing --offered-pps",
    )
    cal.add_argument(
        "--flow-packets",
        type=int,
        default=0,
        help="with --flows: each flow ends after this many datagrams and a new "
        "5-tuple takes its place (short flows; 0: flows last the run)",
    )
    cal.add_argument(
        "--ipfix-cache-flows",
        type=int,
        help="sample_action_cached: the IPFIX exporter's cache_max_flows (default 1,024)",
    )
    cal.add_argument(
        "--ipfix-active-timeout",
        type=int,
        help="sample_action_cached: the IPFIX exporter's cache_active_timeout, seconds (default 1)",
    )
    cal.add_argument(
        "--cpu-budget",
        type=float,
        help="CPUs the capacity is stated for, T0 = budget / c0 (default: all)",
    )
    cal.add_argument(
        "--target-ci",
        type=float,
        help="measure until every coefficient's 95%% CI half-width is at most this "
        "fraction of it (or --target-ci-abs), or --max-time runs out",
    )
    cal.add_argument(
        "--target-ci-abs",
        type=float,
        default=0.02,
        help="absolute half-width that is always narrow enough",
    )
    cal.add_argument(
        "--max-time",
        type=float,
        help="with --target-ci: seconds of measuring at most (default 120 per mechanism)",
    )
    cal.add_argument("--figure", help="also write a throughput-vs-rate figure")
    cal.add_argument(
        "--mechanisms",
        default="sflow,mirror",
        type=_names,
        help="comma list of sflow, mirror, mirror_vxlan, sample_action, "
        "sample_action_cached, tc_sample",
    )
    cal.add_argument(
        "--rates",
        type=_floats,
        help="comma list in [0, 1] (default: 0,1 for cpu, 0,0.2,...,1 for throughput)",
    )
    cal.add_argument("--repetitions", type=int, default=2)
    cal.add_argument(
        "--duration",
        type=float,
        help="seconds per iperf3 run (default: 12 for cpu, 6 for throughput)",
    )
    cal.add_argument("--protocol", choices=("udp", "tcp"), default="udp")
    cal.add_argument("--packet-bytes", type=int, default=64, help="UDP payload bytes")
    cal.add_argument("--bandwidth", default="0", help="iperf3 -b for UDP (0 = flat out)")
    cal.add_argument("--warmup", type=float, default=2.0, help="seconds of unrecorded load first")
    cal.add_argument(
        "--design",
        choices=("paired", "independent"),
        default="paired",
        help="paired: each run alternates rate 0 and rate s (drift cancels); "
        "independent: one rate per run",
    )
    cal.add_argument(
        "--phases",
        type=int,
        help="paired: phases per run, even (default: 120 for cpu, mirror_vxlan 8; "
        "4 for throughput)",
    )
    cal.add_argument(
        "--guard",
        type=float,
        help="paired: seconds skipped after a change (default: 0.02 cpu, mirror_vxlan "
        "0.05; 0.3 throughput)",
    )
    cal.add_argument(
        "--settle", type=float, default=0.5, help="independent: seconds after a change"
    )
    cal.add_argument("--seed", type=int, default=0, help="seed of the trial order")
    cal.add_argument("--port", type=int, default=5271, help="iperf3 port")
    cal.add_argument("--no-progress", action="store_true", help="no progress bar")
    where = cal.add_argument_group("where: a one-host testbed, or existing endpoints")
    where.add_argument(
        "--testbed",
        action="store_true",
        help="build namespaces, veths and a private OVS (userspace datapath) here",
    )
    where.add_argument(
        "--prefix", default="cc", help="testbed name prefix for namespaces, links, bridge"
    )
    where.add_argument("--ovsdb", help="existing OVS: OVSDB remote (default: the system's)")
    where.add_argument("--bridge", help="existing OVS bridge")
    where.add_argument("--sender-port", help="OVS port of the sending VM")
    where.add_argument("--receiver-port", help="OVS port of the receiving VM")
    where.add_argument("--receiver-ip", help="address of the receiving VM")
    where.add_argument("--mirror-target", help="device that mirrored copies leave by")
    where.add_argument("--tunnel-target", help="VXLAN device for the mirror_vxlan mechanism")
    where.add_argument(
        "--sender-exec", default="", help='prefix to run iperf3 on the sender, e.g. "ssh root@vm1"'
    )
    where.add_argument("--receiver-exec", default="", help="prefix to run iperf3 on the receiver")
    where.add_argument(
        "--account-cgroup",
        action="append",
        default=[],
        metavar="PATH",
        help="existing server: a cgroup whose CPU time is forwarding (repeat; "
        "e.g. system.slice/openvswitch-switch.service and machine.slice)",
    )
    passive = cal.add_argument_group("passive: current capacity from CPU statistics")
    passive.add_argument(
        "--passive", action="store_true", help="inject nothing; estimate capacity every --interval"
    )
    passive.add_argument("--interval", type=float, default=5.0, help="seconds per estimate")
    passive.add_argument(
        "--count", type=int, default=1, help="estimates to make (0: until stopped)"
    )
    passive.add_argument("--ovs-ctl", help="ovs-vswitchd's control socket (default: the system's)")
    passive.add_argument(
        "--ovs-pidfile",
        default="/var/run/openvswitch/ovs-vswitchd.pid",
        help="ovs-vswitchd's pidfile, whose threads are forwarding",
    )
    passive.add_argument("--cgroup", help="the server's scope (default: the whole host)")
    passive.add_argument(
        "--calibration", help="cpu-method calibration JSON: its cost per packet when idle"
    )
    passive.add_argument(
        "--hog-at",
        type=int,
        help="with --testbed: start a CPU hog in the server from this interval",
    )
    _fit_options(cal)
    cal.set_defaults(func=_calibrate)


def _fit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--confidence", type=float, default=0.95, help="CI level")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--fit-seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument(
        "--beta-from",
        default="mirror",
        help="mechanism whose coefficient is the planner's beta (e.g. mirror_vxlan)",
    )
    parser.add_argument(
        "--ignore-blocks",
        action="store_true",
        help="one capacity for all runs even when the data have a block column",
    )
    parser.add_argument(
        "--ci-method",
        type=_interval,
        default="auto",
        help="cluster: the cpu method's log-cost fit with a cluster-robust "
        "interval over runs (CR2, Bell-McCaffrey dof; cluster-cr1: the "
        "older CR1, t on runs-1 dof); bootstrap: the residual bootstrap; "
        "auto: cluster for cpu-method data with 3+ runs",
    )
    parser.add_argument(
        "--covariate",
        action="append",
        default=[],
        type=_covariate,
        metavar="MECHANISM=NAME",
        help="cpu method: the per-phase covariate of a mechanism's fit, one of "
        "receiver, sender, ovs, non_ovs, none (repeat; default "
        "sflow=none, mirror=receiver, mirror_vxlan=none)",
    )


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def _interval(text: str) -> str:
    from cosample.costmodel.fit import INTERVALS

    if text not in INTERVALS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(INTERVALS)}; got {text!r}")
    return text


def _covariate(text: str) -> tuple[str, str | None]:
    from cosample.costmodel.ancova import COVARIATES

    mechanism, _, name = text.partition("=")
    if not mechanism or name not in (*COVARIATES, "none"):
        raise argparse.ArgumentTypeError(
            f"expected MECHANISM=NAME with NAME one of {', '.join(COVARIATES)}, none; got {text!r}"
        )
    return mechanism.strip(), None if name == "none" else name


def _covariates(args: argparse.Namespace) -> dict[str, str | None]:
    from cosample.costmodel.ancova import DEFAULT_COVARIATES

    return {**DEFAULT_COVARIATES, **dict(args.covariate)}


def _estimator(args: argparse.Namespace):
    from cosample.costmodel.fit import CostModelFit

    return CostModelFit(
        confidence=args.confidence,
        n_bootstrap=args.bootstrap,
        random_state=args.fit_seed,
        blocks=False if args.ignore_blocks else None,
        beta_from=args.beta_from,
        interval=args.ci_method,
        covariates=_covariates(args),
    )


def _fit(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from cosample.costmodel.data import read_measurements, write_json
    from cosample.costmodel.errors import DataError
    from cosample.files import is_stdout

    data = read_measurements(args.data)
    if args.protocol:
        if "protocol" not in data.columns:
            raise DataError(f"{args.data}: --protocol given but the CSV has no protocol column")
        data = data[data["protocol"] == args.protocol]
        if data.empty:
            raise DataError(f"{args.data}: no rows with protocol {args.protocol!r}")
    metadata = {"data": Path(args.data).name, "rows": int(len(data))}
    if "protocol" in data.columns:
        metadata["protocol"] = str(data["protocol"].iloc[0])
    calibration = _estimator(args).fit(data, metadata=metadata).calibration_
    # -o -: the calibration JSON on standard output, the report on standard error
    out = sys.stderr if args.output and is_stdout(args.output) else sys.stdout
    print(calibration.report(), file=out)
    if args.output:
        print(f"wrote {write_json(calibration.to_dict(), args.output)}", file=out)
    if args.figure:
        from cosample.costmodel.figure import plot_calibration

        plot_calibration(data, calibration, args.figure, title=f"{args.data}")
        print(f"wrote {args.figure}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import signal
    import sys

    from cosample.costmodel.harness import CalibrationSettings

    def terminate(signum, frame):  # SIGTERM cleans up like Ctrl-C
        raise KeyboardInterrupt

    if args.passive:
        from cosample.costmodel.passive_cli import watch

        previous = signal.signal(signal.SIGTERM, terminate)
        try:
            return watch(args)
        finally:
            signal.signal(signal.SIGTERM, previous)
    args.output = args.output or "calibration.json"
    run_lengths = (
        RUN_LENGTHS[args.method]
        if args.duration is None and args.phases is None and args.guard is None
        else ()
    )
    for key, value in METHOD_DEFAULTS[args.method].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    settings = CalibrationSettings(
        mechanisms=args.mechanisms,
        rates=args.rates,
        repetitions=args.repetitions,
        duration_s=args.duration,
        protocol=args.protocol,
        packet_bytes=args.packet_bytes,
        bandwidth=args.bandwidth,
        warmup_s=args.warmup,
        settle_s=args.settle,
        seed=args.seed,
        port=args.port,
        design=args.design,
        phases=args.phases,
        guard_s=args.guard,
        method=args.method,
        offered_pps=args.offered_pps,
        burst=args.burst,
        streams=args.streams,
        flows=args.flows,
        flow_packets=args.flow_packets,
        **{
            key: value
            for key, value in (
                ("ipfix_cache_flows", args.ipfix_cache_flows),
                ("ipfix_active_timeout_s", args.ipfix_active_timeout),
            )
            if value is not None
        },
        run_lengths=tuple(r for r in run_lengths if r[0] in args.mechanisms),
    )
    target = _target(args, settings)
    endpoints_given = any(
        getattr(args, k)
        for k in ("bridge", "sender_port", "receiver_port", "receiver_ip", "mirror_target")
    )
    from cosample.costmodel.errors import HarnessError

    if args.testbed == endpoints_given:
        raise HarnessError(
            "choose where to calibrate: --testbed, or an existing bridge with "
            "--bridge --sender-port --receiver-port --receiver-ip --mirror-target"
        )
    if settings.method == "cpu" and not args.testbed and not args.account_cgroup:
        raise HarnessError(
            "the cpu method on an existing server needs the cgroups whose CPU "
            "time is forwarding: --account-cgroup (e.g. system.slice/"
            "openvswitch-switch.service and machine.slice), or --method throughput"
        )
    load = f"{settings.offered_pps:,.0f} pps offered" if settings.method == "cpu" else "flat out"
    runs = (
        f"until every CI half-width <= {target.relative:g} x a (or {target.absolute:g}), "
        f"at most {target.max_time_s:.0f} s"
        if target
        else f"{settings.repetitions} repetition(s) x {settings.duration_s:g} s; about "
        f"{settings.estimated_s:.0f} s"
    )
    lengths = "".join(
        f", {m} runs of {d:g} s / {p} phases / guard {g:g} s" for m, d, p, g in settings.run_lengths
    )
    print(
        f"calibrating ({settings.method} method) {', '.join(settings.mechanisms)} at rates "
        f"{', '.join(f'{r:g}' for r in settings.rates)}, {settings.protocol} {load}, {runs}"
        f"{lengths}",
        file=sys.stderr,
    )

    import os

    from cosample.times import format_time, utcnow

    started = {
        "started": format_time(utcnow()),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        data, metadata = _measure(args, settings, target)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _write_results(
        args,
        settings,
        data,
        {**started, **metadata, "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        target,
    )


def _target(args: argparse.Namespace, settings):
    """The adaptive-stopping target, or None for the fixed grid."""
    if args.target_ci is None:
        if args.max_time is not None:
            from cosample.costmodel.errors import HarnessError

            raise HarnessError("--max-time bounds an adaptive run: give --target-ci too")
        return None
    from cosample.costmodel.adaptive import Target

    max_time = args.max_time if args.max_time is not None else 120.0 * len(settings.mechanisms)
    return Target(
        relative=args.target_ci,
        absolute=args.target_ci_abs,
        max_time_s=max_time,
        confidence=args.confidence,
    )


def _measure(args: argparse.Namespace, settings, target):
    from cosample.costmodel.accounting import (
        CgroupScope,
        ExistingScope,
        cgroup_path,
        cpu_budget,
        pid_from_file,
    )
    from cosample.costmodel.endpoints import SystemOvs, existing_endpoints
    from cosample.costmodel.onehost import OneHostTestbed
    from cosample.costmodel.realrun import run_calibration

    budget = cpu_budget(args.cpu_budget)
    if args.testbed:
        with OneHostTestbed(args.prefix, tunnel="mirror_vxlan" in settings.mechanisms) as testbed:
            assert testbed.ovs is not None  # (entering the testbed started it)
            scope = CgroupScope(
                f"cosample-{args.prefix}",
                pid_from_file(testbed.ovs.directory / "ovs-vswitchd.pid"),
                budget,
            )
            data, extra = run_calibration(
                testbed.endpoints,
                testbed.ovs,
                settings,
                not args.no_progress,
                scope,
                target,
                _covariates(args),
            )
        return data, {"mode": "one-host testbed", "datapath": "netdev (userspace)", **extra}
    endpoints = existing_endpoints(
        args.bridge,
        args.sender_port,
        args.receiver_port,
        args.receiver_ip,
        args.mirror_target,
        args.sender_exec,
        args.receiver_exec,
        args.tunnel_target,
    )
    ovs = SystemOvs(args.ovsdb)
    datapath = ovs.vsctl("get", "bridge", endpoints.bridge, "datapath_type").strip() or "system"
    existing = None
    if args.account_cgroup:
        ovs_pid = pid_from_file(args.ovs_pidfile) if args.ovs_pidfile else None
        existing = ExistingScope([cgroup_path(p) for p in args.account_cgroup], ovs_pid, budget)
    data, extra = run_calibration(
        endpoints, ovs, settings, not args.no_progress, existing, target, _covariates(args)
    )
    return data, {
        "mode": "existing endpoints",
        "bridge": endpoints.bridge,
        "datapath": datapath,
        **extra,
    }


def _write_results(args: argparse.Namespace, settings, data, metadata: dict, target=None) -> int:
    import dataclasses
    import os
    import platform
    from pathlib import Path

    from cosample.costmodel.data import read_measurements, write_json, write_measurements
    from cosample.times import format_time, utcnow

    write_measurements(data, args.data)
    print(f"wrote {args.data} ({len(data)} measurements)")
    data = read_measurements(args.data)  # fit what was written: `cosample fit` reproduces it
    metadata.update(
        {
            "data": Path(args.data).name,
            "protocol": settings.protocol,
            "packet_bytes": settings.packet_bytes if settings.protocol == "udp" else None,
            "method": settings.method,
            "offered_pps": settings.offered_pps if settings.method == "cpu" else None,
            "burst": settings.burst if settings.method == "cpu" else None,
            "streams": settings.streams,
            "flows": settings.flows or None,
            "flow_packets": settings.flow_packets if settings.flows else None,
            "ipfix_cache": (
                {
                    "max_flows": settings.ipfix_cache_flows,
                    "active_timeout_s": settings.ipfix_active_timeout_s,
                }
                if "sample_action_cached" in settings.mechanisms
                else None
            ),
            "rates": list(settings.rates),
            "repetitions": settings.repetitions if target is None else None,
            "duration_s": settings.duration_s,
            "seed": settings.seed,
            "design": settings.design,
            "phases": settings.phases if settings.design == "paired" else None,
            "run_lengths": {m: list(settings.run_design(m)) for m in settings.mechanisms}
            if settings.design == "paired"
            else None,
            "host": platform.node(),
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "date": format_time(utcnow()),
        }
    )
    calibration = _estimator(args).fit(data, metadata=metadata).calibration_
    print(calibration.report())
    if target is not None:
        from cosample.costmodel.adaptive import target_report

        met, lines = target_report(calibration, target)
        calibration = dataclasses.replace(calibration, metadata={**metadata, "target_met": met})
        print("\n".join(lines))
    write_json(calibration.to_dict(), args.output)
    print(f"wrote {args.output}")
    if args.figure:
        from cosample.costmodel.figure import plot_calibration

        plot_calibration(
            data,
            calibration,
            args.figure,
            title=f"{settings.protocol} calibration, {metadata['mode']}",
        )
        print(f"wrote {args.figure}")
    return 0
