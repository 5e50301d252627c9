"""``cosample calibrate``'s work, from parsed arguments to written results (the options are
``costmodel.cli``'s): the run's settings by method, an active calibration on a testbed or on
named endpoints, adaptive or on a grid, and its files; heavy modules imported in the handlers,
as the command's parsing is imported by ``cosample --help``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import signal
import sys
from pathlib import Path

from cosample.costmodel.errors import HarnessError
from cosample.times import format_time, utcnow

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


def _covariates(args: argparse.Namespace) -> dict[str, str | None]:
    # deferred to the run: `cosample --help` imports this module
    from cosample.costmodel.ancova import DEFAULT_COVARIATES

    return {**DEFAULT_COVARIATES, **dict(args.covariate)}


def estimator(args: argparse.Namespace):
    # deferred to the run: `cosample --help` imports this module
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


def calibrate(args: argparse.Namespace) -> int:
    # deferred to the run: `cosample --help` imports this module
    from cosample.costmodel.trials import CalibrationSettings

    def terminate(signum, frame):  # SIGTERM cleans up like Ctrl-C
        raise KeyboardInterrupt

    if args.passive:
        # deferred to the run: `cosample --help` imports this module
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
            raise HarnessError("--max-time bounds an adaptive run: give --target-ci too")
        return None
    # deferred to the run: `cosample --help` imports this module
    from cosample.costmodel.adaptive import Target

    max_time = args.max_time if args.max_time is not None else 120.0 * len(settings.mechanisms)
    return Target(
        relative=args.target_ci,
        absolute=args.target_ci_abs,
        max_time_s=max_time,
        confidence=args.confidence,
    )


def _measure(args: argparse.Namespace, settings, target):
    # deferred to the run: `cosample --help` imports this module
    from cosample.costmodel.accounting import (
        CgroupScope,
        ExistingScope,
        cgroup_path,
        cpu_budget,
        pid_from_file,
    )

    # deferred to the run: `cosample --help` imports this module
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
    # deferred to the run: `cosample --help` imports this module
    from cosample.costmodel.data import read_measurements, write_json, write_measurements

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
    calibration = estimator(args).fit(data, metadata=metadata).calibration_
    print(calibration.report())
    if target is not None:
        # deferred to the run: `cosample --help` imports this module
        from cosample.costmodel.adaptive import target_report

        met, lines = target_report(calibration, target)
        calibration = dataclasses.replace(calibration, metadata={**metadata, "target_met": met})
        print("\n".join(lines))
    write_json(calibration.to_dict(), args.output)
    print(f"wrote {args.output}")
    if args.figure:
        # deferred to the run: `cosample --help` imports this module
        from cosample.costmodel.figure import plot_calibration

        plot_calibration(
            data,
            calibration,
            args.figure,
            title=f"{settings.protocol} calibration, {metadata['mode']}",
        )
        print(f"wrote {args.figure}")
    return 0
