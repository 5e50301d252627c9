"""Passive capacity on the one-host testbed, with a CPU hog started part-way through.

``cosample calibrate --passive --testbed --count 12 --hog-at 6`` builds the testbed, puts a
"server" cgroup around it (a CPU budget of ``--cpu-budget``) with a forwarding cgroup inside
(ovs-vswitchd and the iperf3 ends, as the cpu method counts them), offers a constant UDP load,
and estimates the capacity every interval; from interval ``hog_at`` on, ``hogs`` busy-looping
processes run in the server cgroup beside the forwarding; from then on the cost per packet is
the median measured before the hog (what ``--calibration`` gives a real server). Each estimate
is a row; the hogs are stopped by PID at the end, and everything built is removed.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict

import pandas as pd

from cosample.costmodel.accounting import AccountingCgroup, pid_from_file, started_pid
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.iperf import IperfServer
from cosample.costmodel.onehost import OneHostTestbed
from cosample.costmodel.passive import CapacityEstimate, PassiveMonitor, parse_dpctl_lookups
from cosample.costmodel.realrun import iperf_client
from cosample.costmodel.trials import CalibrationSettings
from cosample.files import write_atomic

HOG = [sys.executable, "-c", "while True: pass"]


def run_hog_demo(
    prefix: str,
    count: int,
    hog_at: int | None,
    interval_s: float,
    budget_cpus: float,
    offered_pps: float = 10_000.0,
    hogs: int = 2,
    port: int = 5271,
    report=None,
) -> pd.DataFrame:
    """Rows of ``CapacityEstimate`` per interval with ``interval`` and ``hog`` columns."""
    if hog_at is not None and not 1 <= hog_at < count:
        raise HarnessError(f"--hog-at must be in 1..count-1 (= {count - 1}), got {hog_at}")
    settings = CalibrationSettings(
        mechanisms=("sflow",),
        method="cpu",
        offered_pps=offered_pps,
        duration_s=1.0,
        phases=2,
        guard_s=0.0,
        port=port,
        rates=(0.0, 1.0),
    )
    load_s = interval_s * (count + 1) + 5
    rows: list[dict] = []
    hog_processes: list[subprocess.Popen] = []
    with ExitStack() as stack:
        testbed = stack.enter_context(OneHostTestbed(prefix))
        server = stack.enter_context(AccountingCgroup(f"cosample-{prefix}-server"))
        forwarding = stack.enter_context(AccountingCgroup("forwarding", hierarchy=server.path))
        ovs, endpoints = testbed.ovs, testbed.endpoints
        if ovs is None or endpoints is None or server.path is None or forwarding.path is None:
            raise HarnessError("the one-host testbed or its CPU accounting did not come up")
        forwarding.add(pid_from_file(ovs.directory / "ovs-vswitchd.pid"))
        iperf = stack.enter_context(IperfServer(endpoints.receiver_exec, port))
        forwarding.add(started_pid(iperf.process))
        load = iperf_client(endpoints.sender_exec, "udp")(
            settings.client_argv(endpoints.receiver_ip, load_s), load_s
        )
        stack.callback(load.stop)
        forwarding.add(load.process.pid)
        time.sleep(1.0)  # let the load start flowing before the first interval

        def stop_hogs() -> None:
            for process in hog_processes:
                process.kill()
                process.wait(timeout=5)

        stack.callback(stop_hogs)
        monitor = PassiveMonitor(
            lambda: parse_dpctl_lookups(ovs.appctl("dpctl/show")),
            ovs_pids=(),
            budget_cpus=budget_cpus,
            forwarding_cgroups=(forwarding.path,),
            scope_cgroup=server.path,
        )

        def record(estimate: CapacityEstimate) -> None:
            index = len(rows)
            rows.append({"interval": index, "hog": bool(hog_processes), **asdict(estimate)})
            if report:
                report(estimate)
            if index + 1 == hog_at:  # the next interval runs with the hogs
                # from now on the cost per packet is the one measured without the hog, as a
                # server's --calibration would give it (starved forwarding batches more, so
                # its measured cost per packet falls and would hide the hog)
                monitor.calibrated_cost = (
                    statistics.median(row["cost_ns_per_packet"] for row in rows) / 1e9
                )
                for _ in range(hogs):
                    # a session of its own: with autogroup scheduling a hog in ours would only
                    # share this command's slice of the CPUs
                    process = subprocess.Popen(HOG, start_new_session=True)
                    hog_processes.append(process)
                    server.add(process.pid)

        monitor.watch(interval_s, count, record)
    return pd.DataFrame(rows)


def plot_hog_demo(frame: pd.DataFrame, path: str) -> None:
    """Capacity and CPU use per interval, the hog's start marked."""
    import matplotlib  # over a second to import: loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # once the backend is chosen

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 4.8), sharex=True)
    seconds = frame["interval_s"].cumsum()
    top.step(seconds, frame["capacity_pps"] / 1e3, where="pre", color="tab:blue")
    top.set_ylabel("estimated capacity (kpps)")
    bottom.step(seconds, frame["busy_cpus"], where="pre", label="busy in the server")
    bottom.step(seconds, frame["forwarding_cpus"], where="pre", label="forwarding")
    bottom.axhline(frame["budget_cpus"].iloc[0], color="black", linewidth=0.6, label="budget")
    bottom.set_ylabel("CPUs")
    bottom.set_xlabel("time (s)")
    bottom.legend(fontsize=7)
    first_hog = frame[frame["hog"]]
    for axis in (top, bottom):
        if not first_hog.empty:
            axis.axvline(
                seconds[first_hog.index[0]] - frame["interval_s"].iloc[0],
                color="tab:red",
                linestyle="--",
            )
        axis.grid(alpha=0.3)
    top.set_title("passive capacity estimate; CPU hog starts at the red line", fontsize=9)
    figure.tight_layout()
    try:
        write_atomic(
            path, lambda stream: figure.savefig(stream, format="png", dpi=120), binary=True
        )
    finally:
        plt.close(figure)
