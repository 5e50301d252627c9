"""``cosample fit`` and ``cosample calibrate``: parsing here, work in the handlers (lazy imports)."""

from __future__ import annotations

import argparse


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
    from cosample.costmodel.calibrate_cli import estimator  # the fit's modules, not --help's

    calibration = estimator(args).fit(data, metadata=metadata).calibration_
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
    from cosample.costmodel.calibrate_cli import calibrate  # the run's modules, not --help's

    return calibrate(args)
