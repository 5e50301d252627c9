"""``cosample calibrate --passive``: estimate the current capacity every interval, print it, and
keep the latest estimate in a JSON file (atomically) for a controller to read."""

from __future__ import annotations

import argparse
import platform
import sys

from cosample.costmodel.accounting import cgroup_path, cpu_budget, pid_from_file
from cosample.costmodel.data import write_json
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.passive import (
    CapacityEstimate,
    PassiveMonitor,
    capacity_document,
    parse_dpctl_lookups,
    read_calibrated_cost,
)
from cosample.dataplane.run import run
from cosample.files import write_text_atomic
from cosample.times import format_time, utcnow


def datapath_packets(control: str | None):
    """Reader of the datapaths' packet count through ``ovs-appctl [-t control] dpctl/show``."""
    target = ["-t", control] if control else []

    def read() -> int:
        return parse_dpctl_lookups(run(["ovs-appctl", *target, "dpctl/show"], timeout=10).stdout)

    return read


def monitor_from_args(args: argparse.Namespace) -> PassiveMonitor:
    if not 0.2 <= args.interval <= 3600:
        raise HarnessError(f"--interval must be 0.2 s to 1 h, got {args.interval!r}")
    if args.count < 0:
        raise HarnessError(f"--count must be >= 0 (0: until stopped), got {args.count!r}")
    forwarding = [cgroup_path(path) for path in args.account_cgroup]
    ovs_pids = () if forwarding else (pid_from_file(args.ovs_pidfile),)
    scope = cgroup_path(args.cgroup) if args.cgroup else None
    cost = read_calibrated_cost(args.calibration) if args.calibration else None
    return PassiveMonitor(
        datapath_packets(args.ovs_ctl),
        ovs_pids,
        cpu_budget(args.cpu_budget),
        forwarding_cgroups=forwarding,
        scope_cgroup=scope,
        calibrated_cost=cost,
    )


def line(estimate: CapacityEstimate) -> str:
    return (
        f"capacity {estimate.capacity_pps:>12,.0f} pps | forwarding "
        f"{estimate.forwarded_pps:>10,.0f} pps at {estimate.cost_ns_per_packet:>7,.0f} ns/packet "
        f"({estimate.cost_source}) | CPUs: busy {estimate.busy_cpus:.2f}, forwarding "
        f"{estimate.forwarding_cpus:.2f}, available {estimate.available_cpus:.2f} "
        f"of {estimate.budget_cpus:g}"
    )


def watch(args: argparse.Namespace) -> int:
    if args.testbed:
        return _testbed(args)
    monitor = monitor_from_args(args)

    def report(estimate: CapacityEstimate) -> None:
        print(line(estimate), flush=True)
        if args.output:
            date = format_time(utcnow())
            write_json(capacity_document(estimate, platform.node(), date), args.output)

    print(
        f"estimating capacity every {args.interval:g} s from CPU statistics "
        f"({'cgroup ' + args.cgroup if args.cgroup else 'whole host'}, "
        f"{monitor.budget_cpus:g} CPUs)",
        file=sys.stderr,
    )
    monitor.watch(args.interval, args.count, report)  # Ctrl-C/SIGTERM: "interrupted", exit 130
    return 0


def _testbed(args: argparse.Namespace) -> int:
    """The one-host testbed under a constant load, a CPU hog from interval ``--hog-at``."""
    # the demo's rig and pandas: only for --passive --testbed, not the monitor of a real server
    from cosample.costmodel.hogdemo import plot_hog_demo, run_hog_demo

    if args.count < 2:
        raise HarnessError("--passive --testbed needs --count >= 2")
    print(
        f"passive capacity on the one-host testbed, {args.count} intervals of "
        f"{args.interval:g} s" + (f", CPU hog from interval {args.hog_at}" if args.hog_at else ""),
        file=sys.stderr,
    )
    frame = run_hog_demo(
        args.prefix,
        args.count,
        args.hog_at,
        args.interval,
        cpu_budget(args.cpu_budget),
        offered_pps=args.offered_pps,
        port=args.port,
        report=lambda estimate: print(line(estimate), flush=True),
    )
    write_text_atomic(args.data, frame.to_csv(index=False, float_format="%.6g"))
    print(f"wrote {args.data}")
    if args.figure:
        plot_hog_demo(frame, args.figure)
        print(f"wrote {args.figure}")
    return 0
