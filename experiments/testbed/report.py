"""Turn an experiment's measurements into a tidy table (one row per phase and server) and a report.

Rates are packets per second of *traffic time* (``duration_s``). "Collected" packets of a server
are the sampled packets whose source VM lives on it, wherever they were sampled (locally, or at
a receiver after mirroring): the paper's collected volume. The expected count is the planned
rate after 1-in-N rounding applied to the packets the server's VMs actually sent (its VM ports'
datapath counters), with a binomial tolerance (``measure.binomial_tolerance``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from cosample.experiments.testbed import measure, plans
from cosample.experiments.testbed.experiment import ExperimentResult, PhaseMeasurement

DEGRADED_THROUGHPUT = 0.98  # below this fraction of baseline throughput a server has degraded
DEGRADED_LOSS = 0.01  # ... or with this much more packet loss than in the baseline


def tidy_rows(result: ExperimentResult, topology) -> pd.DataFrame:
    """One row per (phase, server)."""
    baseline = result.phases["baseline"]
    alpha, beta = result.settings.coefficients.alpha, result.settings.coefficients.beta
    duration = result.settings.duration_s
    known = set(topology.interface_names()) | {"lo", "ovs-netdev"}
    rows = []
    for phase, measurement in result.phases.items():
        for server in topology.servers:
            rows.append(_row(phase, measurement, baseline, server, known, alpha, beta, duration))
    return pd.DataFrame(rows)


def _row(
    phase: str,
    m: PhaseMeasurement,
    baseline: PhaseMeasurement,
    server,
    known: set[str],
    alpha: float,
    beta: float,
    duration: float,
) -> dict[str, Any]:
    name = server.name
    hosts = (m.plan or {}).get("hosts", {})
    host = hosts.get(name, {})
    local_rate, mirror_rate = plans.applied_rate(host) if host else (0.0, 0.0)
    # the copies are sampled at their receivers' rates (1-in-N, not always 1-in-1)
    copied_rate = plans.copies_sampled(host, hosts) if host else 0.0
    datapath, kernel = m.datapath.get(name, {}), m.kernel.get(name, {})
    vm_packets = sum(datapath.get(vm.port, measure.PortCounters()).rx_packets for vm in server.vms)
    inbound = datapath.get(server.vxlan, measure.PortCounters()).rx_packets
    mirror_tx = sum(c.tx_packets for dev, c in kernel.items() if dev not in known)
    mirror_rx = sum(c.rx_packets for port, c in datapath.items() if port not in known)
    probability = local_rate + copied_rate
    expected = vm_packets * probability
    # local sFlow and the tc mirrors (then the receivers' sFlow) draw independently: a packet
    # can be sampled by both
    distinct_probability = local_rate + copied_rate - local_rate * copied_rate
    expected_distinct = vm_packets * distinct_probability
    distinct = m.samples.distinct(name)
    collected = m.samples.collected(name)
    tolerance = measure.binomial_tolerance(vm_packets, probability)
    own = [f for f in m.flows if f.flow.src.server == server.index]
    base_own = [f for f in baseline.flows if f.flow.src.server == server.index]
    throughput = sum(f.received_pps for f in own)
    base_throughput = sum(f.received_pps for f in base_own)
    loss = _loss(own)
    ratio = throughput / base_throughput if base_throughput else float("nan")
    local_samples, others = m.samples.local(name), m.samples.received_by(name)
    model_load = (
        vm_packets + inbound + alpha * local_samples + beta * mirror_tx + (alpha + beta) * others
    ) / duration
    capacity = float(host.get("capacity_pps", server.capacity_pps))
    estimated, low, high = _estimate(m, name)
    return {
        "phase": phase,
        "server": name,
        "role": host.get("role", "none"),
        "capacity_pps": capacity,
        "planned_own_pps": host.get("own_pps", float("nan")),
        "own_pps": vm_packets / duration,
        "forwarding_pps": (vm_packets + inbound) / duration,
        "sflow_sampling": host.get("sflow_sampling"),
        "local_rate": local_rate,
        "mirror_rate": mirror_rate,
        "planned_collected_pps": float(host.get("own_pps", 0.0)) * probability,
        "planned_distinct_pps": float(host.get("distinct_pps", 0.0)),
        "expected_collected_pps": expected / duration,
        "collected_pps": collected / duration,
        "vm_packets": vm_packets,
        "expected_samples": round(expected, 1),
        "collected_samples": collected,
        "local_samples": local_samples,
        "mirrored_samples": m.samples.mirrored(name),
        "tolerance_samples": round(tolerance, 1),
        "within_tolerance": abs(collected - expected) <= tolerance,
        "expected_distinct_samples": round(expected_distinct, 1),
        "distinct_samples": distinct,
        "distinct_collected_pps": distinct / duration,
        "distinct_within_tolerance": abs(distinct - expected_distinct)
        <= measure.binomial_tolerance(vm_packets, distinct_probability),
        "local_and_mirrored_packets": m.samples.local_and_mirrored.get(name, 0),
        "mirrored_twice_packets": m.samples.mirrored_twice.get(name, 0),
        "copies_sampled_share": copied_rate / mirror_rate if mirror_rate else float("nan"),
        "mirror_tx_packets": mirror_tx,
        "mirror_rx_packets": mirror_rx,
        "samples_of_other_servers": others,
        "samples_lost_in_transit": m.samples.lost_in_transit.get(name, 0),
        "vswitchd_cpu_s": round(m.cpu_seconds.get(name, float("nan")), 3),
        "model_load_pps": model_load,
        "model_capacity_use": model_load / capacity if capacity else float("nan"),
        "throughput_pps": throughput,
        "baseline_throughput_pps": base_throughput,
        "throughput_ratio": ratio,
        "loss_fraction": loss,
        "degraded": bool(
            phase != "baseline"
            and (ratio < DEGRADED_THROUGHPUT or loss > _loss(base_own) + DEGRADED_LOSS)
        ),
        "estimated_packets": estimated,
        "estimated_packets_low": low,
        "estimated_packets_high": high,
        "estimate_error": estimated / vm_packets - 1 if vm_packets else float("nan"),
        "estimate_within_interval": (low <= vm_packets <= high)
        if estimated == estimated
        else float("nan"),
    }


def _estimate(m: PhaseMeasurement, server: str) -> tuple[float, float, float]:
    """The collector's estimate of the packets ``server``'s VMs sent in the phase, and its
    95 % interval (NaN without a plan)."""
    snapshot = m.estimates
    if snapshot is None or server not in snapshot.servers:
        return float("nan"), float("nan"), float("nan")
    e, window = snapshot.servers[server], snapshot.window_s
    return (
        e.packets_per_s * window,
        e.packets_per_s_ci95[0] * window,
        e.packets_per_s_ci95[1] * window,
    )


def _loss(results) -> float:
    sent = sum(r.sent_packets for r in results)
    return sum(r.lost_packets for r in results) / sent if sent else 0.0


def summary(frame: pd.DataFrame, result: ExperimentResult) -> dict[str, Any]:
    """Per-phase totals and the collaborative gain, planned and measured."""
    out: dict[str, Any] = {"phases": {}}
    for phase, group in frame.groupby("phase", sort=False):
        plan = result.phases[phase].plan
        out["phases"][phase] = {
            "planned_collected_pps": plan["summary"]["samples_pps"] if plan else 0.0,
            "planned_distinct_pps": plan["summary"]["collected_pps"] if plan else 0.0,
            "servers_distinct_within_tolerance": int(group["distinct_within_tolerance"].sum()),
            "expected_collected_pps": float(group["expected_collected_pps"].sum()),
            "collected_pps": float(group["collected_pps"].sum()),
            "distinct_collected_pps": float(group["distinct_collected_pps"].sum()),
            "mirrored_twice_packets": int(group["mirrored_twice_packets"].sum()),
            "servers_within_tolerance": int(group["within_tolerance"].sum()),
            "servers": int(len(group)),
            "throughput_ratio_min": float(group["throughput_ratio"].min()),
            "degraded_servers": sorted(group.loc[group["degraded"], "server"]),
            "unattributed_samples": result.phases[phase].samples.unattributed,
            "samples_lost_in_transit": int(group["samples_lost_in_transit"].sum()),
            "estimated_packets": float(group["estimated_packets"].sum()),
            "vm_packets": int(group["vm_packets"].sum()),
            "servers_estimated_within_interval": int(
                group["estimate_within_interval"].eq(True).sum()
            ),
        }
    phases = out["phases"]
    if "collab" in phases and "noncollab" in phases:
        planned = phases["noncollab"]["planned_collected_pps"]
        measured = phases["noncollab"]["collected_pps"]
        out["planned_gain"] = (
            phases["collab"]["planned_collected_pps"] / planned - 1 if planned else None
        )
        out["measured_gain"] = (
            phases["collab"]["collected_pps"] / measured - 1 if measured else None
        )
        distinct = phases["noncollab"]["distinct_collected_pps"]
        out["distinct_gain"] = (
            phases["collab"]["distinct_collected_pps"] / distinct - 1 if distinct else None
        )
        planned = phases["noncollab"]["planned_distinct_pps"]
        out["planned_distinct_gain"] = (
            phases["collab"]["planned_distinct_pps"] / planned - 1 if planned else None
        )
    return out


def markdown(
    frame: pd.DataFrame,
    totals: dict[str, Any],
    result: ExperimentResult,
    command: str = "cosample testbed run",
) -> str:
    """A short human report."""
    settings = result.settings
    coefficients = settings.coefficients
    duration = settings.duration_s
    lines = [
        "# Emulated data centre: collaborative vs non-collaborative sampling",
        "",
        f"Measured by `{command}`: {frame['server'].nunique()} servers, "
        f"{len(result.phases['baseline'].flows)} iperf3 UDP flows, {settings.duration_s:g} s per "
        f"phase; alpha={coefficients.alpha:g}, beta={coefficients.beta:g} ({coefficients.source}); "
        f"solver {settings.solver}.",
        "",
        "| phase | planned samples pps | expected (measured traffic x applied rates) | "
        "measured samples pps | servers within tolerance | planned distinct pps | "
        "measured distinct pps | servers within tolerance (distinct) | "
        "mirrored twice | samples lost OVS->collector | min throughput ratio | degraded | "
        "collector estimate / VM packets | estimates within 95 % interval |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase, row in totals["phases"].items():
        lines.append(
            f"| {phase} | {row['planned_collected_pps']:.0f} | "
            f"{row['expected_collected_pps']:.0f} | {row['collected_pps']:.0f} | "
            f"{row['servers_within_tolerance']}/{row['servers']} | "
            f"{row['planned_distinct_pps']:.0f} | "
            f"{row['distinct_collected_pps']:.0f} | "
            f"{row['servers_distinct_within_tolerance']}/{row['servers']} | "
            f"{row['mirrored_twice_packets']} | "
            f"{row['samples_lost_in_transit']} | "
            f"{row['throughput_ratio_min']:.3f} | "
            f"{', '.join(row['degraded_servers']) or 'none'} | "
            f"{_ratio(row['estimated_packets'], row['vm_packets'])} | "
            f"{row['servers_estimated_within_interval']}/{row['servers']} |"
        )
    if totals.get("measured_gain") is not None:
        lines += [
            "",
            f"Collaborative gain in distinct packets: planned "
            f"{totals['planned_distinct_gain']:+.1%}, measured {totals['distinct_gain']:+.1%} "
            f"(a packet both sampled locally and mirrored counts once); in samples: "
            f"planned {totals['planned_gain']:+.1%}, measured {totals['measured_gain']:+.1%}.",
        ]
    lines += [
        "",
        "Per server (rates in pps of traffic time):",
        "",
        "| phase | server | role | own | 1-in-N | mirror share | planned | expected | "
        "measured | planned distinct | expected distinct | distinct | within tolerance | "
        "local samples | mirrored samples | mirror tx | vswitchd CPU s | throughput ratio | "
        "loss | VM packets | collector estimate [95 % interval] |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in frame.itertuples():
        lines.append(
            f"| {row.phase} | {row.server} | {row.role} | {row.own_pps:.0f} | "
            f"{'' if pd.isna(row.sflow_sampling) else int(row.sflow_sampling)} | "
            f"{row.mirror_rate:.3f} | {row.planned_collected_pps:.0f} | "
            f"{row.expected_collected_pps:.0f} | {row.collected_pps:.0f} | "
            f"{row.planned_distinct_pps:.0f} | {row.expected_distinct_samples / duration:.0f} | "
            f"{row.distinct_collected_pps:.0f} | "
            f"{'yes' if row.distinct_within_tolerance else 'NO'} | {row.local_samples} | "
            f"{row.mirrored_samples} | {row.mirror_tx_packets} | {row.vswitchd_cpu_s:.2f} | "
            f"{row.throughput_ratio:.3f} | {row.loss_fraction:.4f} | {row.vm_packets} | "
            f"{_interval(row)} |"
        )
    return "\n".join(lines) + "\n"


def _ratio(estimated: float, actual: float) -> str:
    return f"{estimated / actual:.3f}" if actual and estimated == estimated and estimated else "-"


def _interval(row) -> str:
    if pd.isna(row.estimated_packets):
        return "-"
    return (
        f"{row.estimated_packets:.0f} [{row.estimated_packets_low:.0f}, "
        f"{row.estimated_packets_high:.0f}]"
    )


def figure(frame: pd.DataFrame):
    """Planned, expected and measured collected pps per server, one panel per sampling phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    phases = [p for p in ("noncollab", "collab") if p in set(frame["phase"])]
    fig, axes = plt.subplots(
        1, len(phases), figsize=(4.5 * len(phases), 3.4), sharey=True, squeeze=False
    )
    for axis, phase in zip(axes[0], phases):
        rows = frame[frame["phase"] == phase]
        x = np.arange(len(rows))
        for offset, column, label in (
            (-0.27, "planned_collected_pps", "planned"),
            (0.0, "expected_collected_pps", "expected (measured traffic)"),
            (0.27, "collected_pps", "measured (sFlow samples)"),
        ):
            axis.bar(x + offset, rows[column], width=0.27, label=label)
        axis.set_xticks(x, [f"{s}\n{r}" for s, r in zip(rows["server"], rows["role"])])
        axis.set_title(f"{phase}: {rows['collected_pps'].sum():.0f} pps collected")
    axes[0][0].set_ylabel("collected packets/s by source server")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def write(out_dir: Path, frame: pd.DataFrame, totals: dict[str, Any], text: str) -> dict[str, Path]:
    """``results.csv``, ``summary.json``, ``report.md`` and ``collected.png``, each atomically."""
    from cosample.experiments.files import save_figure, write_atomic, write_csv, write_json

    return {
        "csv": write_csv(frame, out_dir / "results.csv"),
        "summary": write_json(totals, out_dir / "summary.json"),
        "report": write_atomic(out_dir / "report.md", lambda stream: stream.write(text)),
        "figure": save_figure(figure(frame), out_dir / "collected.png"),
    }
