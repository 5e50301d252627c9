"""The seeds' comparison of application-monitoring approaches (seeds 000-002), reproduced.

One topology (``cosample.lab.appmirror``): wrk in a client namespace, an OVS bridge (userspace
datapath) in a switch namespace, nginx and its backend in a server namespace, and an analysis
node reached through an OVS VXLAN port. wrk runs for ``--seconds`` against nginx under each arm:

| arm | mechanism | monitor (whose CPU is counted) |
|---|---|---|
| none | - | - |
| tcpdump | - | tcpdump on the server's interface, writing a pcap |
| tshark | - | tshark on the server's interface, computing ``http.time`` |
| sniffer_onsite | - | the analyser on the server's port on the switch host |
| sniffer_offsite | - | the same, sending compact records to an analyser on the analysis node |
| port_mirror | OVS Mirror of the server's port to the VXLAN port | the analyser on the analysis node |
| selective_mirror | OpenFlow flows copying the service's PSH segments | the same |
| truncated_mirror | the selective flows with ``max_len`` | the same |
| selective_all_truncated | flows copying every segment of the service, ``max_len`` | the same |
| port_mirror_snaplen | the Mirror with ``snaplen`` | the same |
| tc_mirror | the kernel's copies of the same PSH segments at the server's port (cls_bpf + mirred to a kernel VXLAN device, its own underlay; the analysis node's ``vx1``) | the same |
| *_bare | port, selective, truncated, tc mirror | none: the copies reach the analysis node unread |

The analysis node is a namespace on the same two cores as everything else, so the mirror arms
with the analyser pay for its CPU too; the bare arms show what the switch and the tunnel alone
cost (the seeds' analysis tool only wrote what it received to a file).

The seeds' off-site sniffer is ``appmon run --send-records`` on the switch host (its CPU is the
monitor's) and ``appmon run --receive-records`` on the analysis node (whose windows are read);
its records travel on the underlay, counted with the mirrors' copies. Recorded per arm and round: wrk's requests/s, mean and p99 latency; the
monitor's and ovs-vswitchd's CPU seconds over the load; frames and bytes the analysis node
received (underlay, VXLAN included; and the decapsulated copies); and, to show the monitoring is
right as well as cheap, the monitor's request and 5xx counts and mean service time beside nginx's
access log for the same period. Every round runs every arm (order rotated per round); ratios are
taken to the round's own no-monitoring arm.

    python -m cosample.experiments.appmon_comparison [--seconds 10] [--rounds 3] [--size 4000] [--out DIR]
    python -m cosample.experiments.appmon_comparison --from-csv DIR/appmon_comparison.csv [--out DIR]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from cosample.dataplane.run import CommandError
from cosample.experiments import appmon_monitors as monitors
from cosample.experiments.errors import ExperimentError
from cosample.experiments.files import output_dir, read_csv, write_csv

#: Bytes of each copy the truncating mechanisms keep: Ethernet + IPv4 + TCP with timestamps (66)
#: + 12 bytes, enough for "GET " and "HTTP/1.1 200" (docs/appmon.md: exact counts at 78).
TRUNCATE_BYTES = 78
#: OVS 3.1's userspace datapath applies a Mirror's snaplen to the encapsulated copy (50 bytes of
#: VXLAN headers), max_len to the inner frame: the snaplen giving the same inner bytes.
VXLAN_OVERHEAD = 50


@dataclass(frozen=True)
class Arm:
    name: str
    mechanism: str = "none"
    truncate: int | None = None
    monitor: str | None = None
    segments: str = "psh"


ARMS = (
    Arm("none"),
    Arm("tcpdump", monitor="tcpdump"),
    Arm("tshark", monitor="tshark"),
    Arm("sniffer_onsite", monitor="onsite"),
    Arm("sniffer_offsite", monitor="offsite"),
    Arm("port_mirror", "port", monitor="analysis"),
    Arm("selective_mirror", "selective", monitor="analysis"),
    Arm("truncated_mirror", "selective", TRUNCATE_BYTES, monitor="analysis"),
    Arm("selective_all_truncated", "selective", TRUNCATE_BYTES, monitor="analysis", segments="all"),
    Arm("port_mirror_snaplen", "port", TRUNCATE_BYTES + VXLAN_OVERHEAD, monitor="analysis"),
    Arm("port_mirror_bare", "port"),
    Arm("selective_mirror_bare", "selective"),
    Arm("truncated_mirror_bare", "selective", TRUNCATE_BYTES),
    Arm("tc_mirror", "tc", monitor="analysis"),
    Arm("tc_mirror_bare", "tc"),
)
COLUMNS = (
    "round",
    "arm",
    "mechanism",
    "truncate",
    "monitor",
    "seconds",
    "connections",
    "requests_per_s",
    "latency_mean_ms",
    "latency_p99_ms",
    "wrk_requests",
    "log_requests",
    "log_5xx",
    "log_mean_ms",
    "monitor_requests",
    "monitor_responses",
    "monitor_5xx",
    "monitor_mean_ms",
    "kernel_drops",
    "capture_bytes",
    "monitor_cpu_s",
    "vswitchd_cpu_s",
    "analysis_packets",
    "analysis_bytes",
    "analysis_inner_packets",
    "analysis_inner_bytes",
)


def run_arm(rig, arm: Arm, round_number: int, scratch: Path, settings: argparse.Namespace) -> dict:
    """One arm once: apply the mechanism, start the monitor, load, read every counter."""
    from cosample.lab.web import SERVER_ADDRESS

    rig.set_mechanism(arm.mechanism, arm.truncate, segments=arm.segments)
    monitor = (
        monitors.start(rig, arm.monitor, scratch / f"r{round_number}-{arm.name}", arm.name)
        if arm.monitor
        else None
    )
    time.sleep(0.5)  # the mechanism's first upcalls and the monitor's start settle
    log_before = len(rig.access_log())
    # the tc mirror's copies travel on the rig's kernel underlay (eth1, vx1), the others on eth0
    underlay, device = ("eth1", "vx1") if arm.mechanism == "tc" else ("eth0", "vx0")
    outer, inner = rig.analysis_counters(underlay), rig.analysis_counters(device)
    switch_cpu = monitors.cpu_seconds(rig.vswitchd_pid())
    monitor_cpu = monitors.cpu_seconds(monitor.process.pid) if monitor else 0.0
    report = monitors.parse_wrk(
        rig.load(
            rig.url(mean_ms=settings.mean_ms, error=settings.error, size=settings.size),
            duration_s=settings.seconds,
            connections=settings.connections,
            latency=True,
        )
    )
    time.sleep(0.5)  # the last responses reach the monitor
    row = {
        "monitor_cpu_s": monitors.cpu_seconds(monitor.process.pid) - monitor_cpu
        if monitor
        else None,
        "vswitchd_cpu_s": monitors.cpu_seconds(rig.vswitchd_pid()) - switch_cpu,
    }
    outer_after, inner_after = rig.analysis_counters(underlay), rig.analysis_counters(device)
    entries = rig.access_log()[log_before:]
    if monitor:
        row |= monitors.stop(rig, monitor, f"{SERVER_ADDRESS}:{monitors.SERVICE_PORT}")
    row |= {
        "round": round_number,
        "arm": arm.name,
        "mechanism": arm.mechanism,
        "truncate": arm.truncate,
        "monitor": arm.monitor,
        "seconds": settings.seconds,
        "connections": settings.connections,
        **asdict(report) | {"wrk_requests": report.requests},
        "log_requests": len(entries),
        "log_5xx": sum(500 <= e.status < 600 for e in entries),
        "log_mean_ms": 1e3 * sum(e.request_time for e in entries) / len(entries)
        if entries
        else None,
        "analysis_packets": outer_after.packets - outer.packets,
        "analysis_bytes": outer_after.bytes - outer.bytes,
        "analysis_inner_packets": inner_after.packets - inner.packets,
        "analysis_inner_bytes": inner_after.bytes - inner.bytes,
    }
    return {column: row.get(column) for column in COLUMNS}


def run(settings: argparse.Namespace, scratch: Path) -> pd.DataFrame:
    from cosample.lab.appmirror import MirrorRig, rig_unavailable

    reason = rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_comparison cannot run here: {reason}")
    arms = [arm for arm in ARMS if arm.name in settings.arms]
    rows = []
    with MirrorRig(scratch / "rig", seed=settings.seed) as rig:
        for round_number in range(settings.rounds):
            shift = round_number % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                row = run_arm(rig, arm, round_number, scratch, settings)
                rows.append(row)
                print(
                    f"round {round_number} {arm.name:<20} {row['requests_per_s']:>9.1f} req/s "
                    f"p99 {row['latency_p99_ms']:.2f} ms, monitor CPU "
                    f"{row['monitor_cpu_s'] or 0:.2f} s, to analysis "
                    f"{row['analysis_bytes']:,} B",
                    flush=True,
                )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per arm: medians over rounds of the ratios to the round's no-monitoring arm (throughput,
    latency) and to its port mirror (bytes per request); CPU as % of one core and per request
    (steadier than the ratios on a shared machine); counts against the access log."""
    frame = frame.assign(bytes_per_request=frame["analysis_bytes"] / frame["log_requests"])
    by_round = frame.set_index(["round", "arm"])
    out = []
    for arm, rows in frame.groupby("arm", sort=False):
        ratios = {}
        for column, reference in (
            ("requests_per_s", "none"),
            ("latency_mean_ms", "none"),
            ("latency_p99_ms", "none"),
            ("bytes_per_request", "port_mirror"),
        ):
            values = [
                row[column] / by_round.loc[(row["round"], reference), column]
                for _, row in rows.iterrows()
                if (row["round"], reference) in by_round.index
                and by_round.loc[(row["round"], reference), column]
            ]
            ratios[column] = pd.Series(values, dtype=float).median()
        out.append(
            {
                "arm": arm,
                "rounds": len(rows),
                "throughput_vs_none": ratios["requests_per_s"],
                "requests_per_s": rows["requests_per_s"].median(),
                "latency_vs_none": ratios["latency_mean_ms"],
                "p99_vs_none": ratios["latency_p99_ms"],
                "monitor_cpu_pct": 100 * (rows["monitor_cpu_s"] / rows["seconds"]).median(),
                "monitor_cpu_us_per_request": 1e6
                * (rows["monitor_cpu_s"] / rows["log_requests"]).median(),
                "vswitchd_cpu_pct": 100 * (rows["vswitchd_cpu_s"] / rows["seconds"]).median(),
                "vswitchd_cpu_us_per_request": 1e6
                * (rows["vswitchd_cpu_s"] / rows["log_requests"]).median(),
                "analysis_bytes_per_request": rows["bytes_per_request"].median(),
                "bytes_vs_port_mirror": ratios["bytes_per_request"],
                "counted_vs_log": (
                    rows["monitor_requests"].fillna(rows["monitor_responses"]).sum()
                    / rows["log_requests"].sum()
                )
                if rows["monitor"].notna().any() and rows["monitor_responses"].notna().any()
                else None,
                "answered_vs_log": rows["monitor_responses"].sum() / rows["log_requests"].sum()
                if rows["monitor_responses"].notna().any()
                else None,
                "mean_ms_monitor": (rows["monitor_mean_ms"] * rows["log_requests"]).sum()
                / rows["log_requests"].sum()
                if rows["monitor_mean_ms"].notna().any()
                else None,
                "mean_ms_log": (rows["log_mean_ms"] * rows["log_requests"]).sum()
                / rows["log_requests"].sum(),
                "kernel_drops": rows["kernel_drops"].sum()
                if rows["kernel_drops"].notna().any()
                else None,
            }
        )
    return pd.DataFrame(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=int, default=10, help="wrk run per arm, whole seconds (default 10)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds, arms interleaved (default 3)"
    )
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (default 16)")
    parser.add_argument(
        "--mean-ms",
        type=float,
        default=1.0,
        help="backend's mean service time, ms (default 1; plus 1 ms)",
    )
    parser.add_argument(
        "--error", type=float, default=0.05, help="backend's 500 rate (default 0.05)"
    )
    parser.add_argument(
        "--size",
        type=int,
        default=4000,
        help="response body bytes (default "
        "4000: three segments, PSH only on the last; 100 fits in one)",
    )
    parser.add_argument(
        "--arms",
        default=",".join(arm.name for arm in ARMS),
        help="comma-separated subset of the arms (default all)",
    )
    parser.add_argument("--seed", type=int, default=1, help="backend's random seed (default 1)")
    parser.add_argument(
        "--from-csv",
        type=Path,
        metavar="FILE",
        help="run nothing: summarise a table this experiment wrote",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for appmon_comparison.csv and appmon_comparison_summary.csv",
    )
    settings = parser.parse_args(argv)
    settings.arms = [name.strip() for name in settings.arms.split(",") if name.strip()]
    known = {arm.name for arm in ARMS}
    unknown = [name for name in settings.arms if name not in known]
    if unknown or "none" not in settings.arms:
        parser.error(
            f"--arms: unknown {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            if unknown
            else "--arms: 'none' is needed (every ratio is to it)"
        )
    if settings.seconds < 1 or settings.rounds < 1 or settings.connections < 1:
        parser.error("--seconds, --rounds and --connections >= 1")
    return settings


def _interrupted(number: int, frame) -> None:
    raise KeyboardInterrupt(f"signal {number}")


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # the rig's with-block then removes everything
    try:
        if settings.from_csv:
            frame = read_csv(settings.from_csv, required=COLUMNS)
        else:
            with tempfile.TemporaryDirectory(prefix="appmon-comparison-") as scratch:
                frame = run(settings, Path(scratch))
    except (ExperimentError, CommandError) as exc:
        print(f"appmon_comparison: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("appmon_comparison: interrupted; what it started was removed", file=sys.stderr)
        return 130
    table = summary(frame)
    with pd.option_context(
        "display.width", 200, "display.max_columns", 30, "display.float_format", "{:.3g}".format
    ):
        print(table.to_string(index=False))
    if settings.out:
        directory = output_dir(settings.out)
        if not settings.from_csv:
            write_csv(frame, directory / "appmon_comparison.csv")
        write_csv(table, directory / "appmon_comparison_summary.csv")
        print(
            f"wrote {directory / 'appmon_comparison_summary.csv'}"
            + ("" if settings.from_csv else " and appmon_comparison.csv beside it")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
