"""What a sample costs, by mechanism, measured side by side: sFlow's 1-in-N against local samplers
at any probability (issue 24, item 4; ``costmodel/localsample.py``).

Measure (root; the one-host rig, about 6 minutes; the mechanisms' runs interleaved in one random
order, each run alternating rate 0 and 1 every 0.1 s):

    .venv/bin/cosample calibrate --testbed --prefix sqa \\
        --mechanisms sflow,sample_action,sample_action_cached,tc_sample --rates 0,1 \\
        --repetitions 6 --seed 24 --no-progress \\
        -d docs/data/localsample/calibration-udp64.csv -o docs/data/localsample/calibration-udp64.json

then summarise the phases (one Markdown row per mechanism):

    python -m research.localsample_costs docs/data/localsample/calibration-udp64.csv

Per run (the independent unit): the extra CPU per packet at rate ``s`` over the same run's rate-0
phases, divided by ``s`` — nanoseconds per sample — both for the whole forwarding (the cgroup:
switch, both iperf3 ends and the softirq work in their context, the cost the planner's law
states) and for ovs-vswitchd's threads alone (the userspace datapath's forwarding thread, which
saturates first: ``research.costmodel_bottleneck``). Each mechanism's mean over runs has a
Student t interval; its difference from sFlow's a Welch interval. ``a`` is the per-sample cost
over the rate-0 cost per packet. ``sampled`` is the median share of forwarded packets the
mechanism's counter saw at rate ``s`` over ``s`` (1: as configured; the cached exporter sends
per-flow records once a second, so its per-phase count says nothing and is left out).
``exported / sample`` is what the counter received over the whole run (all phases: the cached
exporter's records trail their samples by up to its active timeout) over the samples taken in
its sampling phases (packets taken from the sender's port times the rate), the run's median:
IPFIX messages for the ``sample`` action (one record each; 1 without the cache), samples for
sFlow (which packs several into a datagram); ``per s`` is that times the sampled packets a
second at the run's rate, i.e. the exporter's messages a second while sampling. (Records of
the run's last second may arrive after it ends and are not counted: at most one active timeout
of a 12-s run.)

A cache's exported records trail their samples by up to its active timeout (1 s), ten phases,
so their cost falls into sampling and non-sampling phases alike and cancels out of the paired
difference; only records exported at sample time (a full cache evicting its oldest flow) stay
in it. ``with records`` puts it back: per run, the phases' cost per packet is regressed on the
rate and on the records the counter received in the same phase per packet forwarded (the CPU
of an export and its message land in the same phase), with the run's level; the cost per sample
is then ``ns / sample`` at rate 1 plus ``ns / record`` times the run's ``exported / sample``.
For a mechanism whose records are its samples (no cache, sFlow) the two regressors are one
and ``with records`` equals ``ns / sample``; ``ns / record`` is shown where the run's records
vary apart from its rate (correlation under ``SEPARABLE``).

Phases left out, and counted (``dropped`` line): those that forwarded less than ``FLOWING`` of
their run's median (a load not yet flowing), and, for the switch's numbers only, those whose
ovs-vswitchd thread time went down (a thread of it exited during the phase and took its
``schedstat`` with it; the cgroup's time is unaffected).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from cosample.errors import exit_status
from cosample.experiments.errors import ExperimentError

REFERENCE = "sflow"
#: A phase counts only if it forwarded at least this share of its run's median rate: the first
#: phase of a run may start before the load flows fully (a cost per packet of a trickle).
FLOWING = 0.8
#: Mechanisms whose counter sees samples as they happen (so the sampled share can be checked).
COUNTED_PER_SAMPLE = ("sflow", "sample_action", "tc_sample", "mirror", "mirror_vxlan")
#: A run's records per packet tell their cost apart from the sampling's only when their
#: correlation with the rate over its phases is below this.
SEPARABLE = 0.9


def per_run(phases: pd.DataFrame) -> pd.DataFrame:
    """One row per run: ns per sample (cgroup and switch), the rate-0 cost per packet, and the
    share sampled. Needs the cpu method's columns."""
    needed = {
        "mechanism",
        "block",
        "rate",
        "cost_ns_per_packet",
        "cpu_ovs",
        "forwarded_pps",
        "copies_pps",
    }
    missing = needed - set(phases.columns)
    if missing:
        raise ExperimentError(
            f"not a paired cpu-method calibration: no column(s) {', '.join(sorted(missing))}"
        )
    frame = phases.assign(
        switch_ns=phases["cpu_ovs"] / phases["forwarded_pps"] * 1e9,
        share=phases["copies_pps"] / phases["forwarded_pps"],
    )
    rows = []
    for (mechanism, block), run in frame.groupby(["mechanism", "block"], sort=True):
        flowing = run["forwarded_pps"] >= FLOWING * run["forwarded_pps"].median()
        run = run[flowing]
        threads_ok = run["cpu_ovs"] > 0
        off, on = run[run["rate"] == 0], run[run["rate"] > 0]
        if off.empty or on.empty:
            continue
        rate = float(on["rate"].mean())
        off_switch = off.loc[off["cpu_ovs"] > 0, "switch_ns"]
        on_switch = on.loc[on["cpu_ovs"] > 0, "switch_ns"]
        rows.append(
            {
                "mechanism": mechanism,
                "block": block,
                "rate": rate,
                "base_ns": off["cost_ns_per_packet"].mean(),
                "sample_ns": (on["cost_ns_per_packet"].mean() - off["cost_ns_per_packet"].mean())
                / rate,
                "base_switch_ns": off_switch.mean(),
                "sample_switch_ns": (on_switch.mean() - off_switch.mean()) / rate,
                "sampled": on["share"].median() / rate,
                **exported(run, on),
                "dropped_not_flowing": int((~flowing).sum()),
                "dropped_threads": int((~threads_ok).sum()),
            }
        )
        rows[-1].update(with_records(run, rows[-1]["exported_per_sample"]))
    if not rows:
        raise ExperimentError("no run has both rate-0 and sampling phases")
    return pd.DataFrame(rows)


def exported(run: pd.DataFrame, on: pd.DataFrame) -> dict:
    """Records the counter received per sample over a run, and per second while sampling
    (NaN without the phases' lengths and sender counts)."""
    if not {"duration_s", "sent_pps"} <= set(run.columns):
        return {"exported_per_sample": float("nan"), "exported_per_s": float("nan")}
    samples = (on["sent_pps"] * on["duration_s"] * on["rate"]).sum()
    per_sample = float((run["copies_pps"] * run["duration_s"]).sum() / samples)
    sampled_per_s = float(
        (on["sent_pps"] * on["duration_s"] * on["rate"]).sum() / on["duration_s"].sum()
    )
    return {"exported_per_sample": per_sample, "exported_per_s": per_sample * sampled_per_s}


def with_records(run: pd.DataFrame, per_sample: float) -> dict:
    """One run's cost per sample with its exported records charged (see the module's
    docstring): least squares of the phases' ns per packet on the rate and the records per
    packet, with an intercept (the run's level)."""
    nan = {"record_ns": float("nan"), "sample_records_ns": float("nan")}
    if np.isnan(per_sample) or len(run) < 4:
        return nan
    rate = run["rate"].to_numpy(float)
    records = (run["copies_pps"] / run["forwarded_pps"]).to_numpy(float)
    design = np.column_stack([np.ones(len(run)), rate, records])
    (_, per_packet, per_record), *_ = np.linalg.lstsq(
        design, run["cost_ns_per_packet"].to_numpy(float), rcond=None
    )
    # along the data's own direction the combination is defined even where the two are one
    separable = records.std() > 0 and abs(np.corrcoef(rate, records)[0, 1]) < SEPARABLE
    mean_rate = float(rate[rate > 0].mean())
    return {
        "record_ns": float(per_record) if separable else float("nan"),
        "sample_records_ns": float(per_packet + per_record * per_sample * mean_rate) / mean_rate
        if separable
        else float("nan"),
    }


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student t interval over runs."""
    values = np.asarray(values, float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = (
        stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * values.std(ddof=1) / len(values) ** 0.5
    )
    return mean, mean - half, mean + half


def welch_interval(
    a: np.ndarray, b: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean of ``a`` minus mean of ``b``, with Welch's interval (runs of different mechanisms are
    independent)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + confidence / 2, dof) * (va + vb) ** 0.5
    diff = float(a.mean() - b.mean())
    return diff, diff - half, diff + half


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per mechanism: means and intervals over its runs, differences from sFlow's."""
    reference = runs[runs["mechanism"] == REFERENCE]
    rows = []
    for mechanism, group in runs.groupby("mechanism", sort=True):
        row = {"mechanism": mechanism, "runs": len(group)}
        with_records_ns = group["sample_records_ns"].where(
            group["sample_records_ns"].notna(), group["sample_ns"]
        )
        group = group.assign(sample_records_ns=with_records_ns)
        reference = reference.assign(sample_records_ns=reference["sample_ns"])
        for column in ("sample_ns", "sample_switch_ns", "sample_records_ns", "record_ns"):
            if group[column].isna().any():
                row[column] = row[f"{column}_lo"] = row[f"{column}_hi"] = float("nan")
                continue
            row[column], row[f"{column}_lo"], row[f"{column}_hi"] = mean_interval(group[column])
            if column == "record_ns":
                continue
            if len(reference) >= 2 and mechanism != REFERENCE and len(group) >= 2:
                diff = welch_interval(group[column], reference[column])
                (
                    row[f"{column}_vs_sflow"],
                    row[f"{column}_vs_sflow_lo"],
                    row[f"{column}_vs_sflow_hi"],
                ) = diff
        a = group["sample_ns"] / group["base_ns"]
        row["a"], row["a_lo"], row["a_hi"] = mean_interval(a)
        row["base_ns"] = float(group["base_ns"].mean())
        row["sampled"] = (
            float(group["sampled"].median()) if mechanism in COUNTED_PER_SAMPLE else float("nan")
        )
        row["exported_per_sample"] = float(group["exported_per_sample"].median())
        row["exported_per_s"] = float(group["exported_per_s"].median())
        rows.append(row)
    return pd.DataFrame(rows)


def interval(row: pd.Series, column: str, digits: int = 0) -> str:
    if column not in row or pd.isna(row[column]):
        return "–"
    return (
        f"{row[column]:,.{digits}f} [{row[f'{column}_lo']:,.{digits}f}, "
        f"{row[f'{column}_hi']:,.{digits}f}]"
    )


def markdown(table: pd.DataFrame) -> str:
    lines = [
        "| mechanism | runs | a (cgroup) | ns / sample (cgroup) | − sFlow's | "
        "ns / sample (switch thread) | − sFlow's | sampled / configured | "
        "exported / sample | per s | with records, ns / sample | − sFlow's | ns / record |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        sampled = "–" if pd.isna(row["sampled"]) else f"{row['sampled']:.3f}"
        per_sample = (
            "–"
            if pd.isna(row["exported_per_sample"])
            else f"{row['exported_per_sample']:.3f} | {row['exported_per_s']:,.0f}"
        )
        if per_sample == "–":
            per_sample = "– | –"
        lines.append(
            f"| {row['mechanism']} | {row['runs']} | {interval(row, 'a', 3)} | "
            f"{interval(row, 'sample_ns')} | {interval(row, 'sample_ns_vs_sflow')} | "
            f"{interval(row, 'sample_switch_ns')} | "
            f"{interval(row, 'sample_switch_ns_vs_sflow')} | {sampled} | "
            f"{per_sample} | {interval(row, 'sample_records_ns')} | "
            f"{interval(row, 'sample_records_ns_vs_sflow')} | "
            f"{interval(row, 'record_ns')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.localsample_costs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("csv", nargs="+", type=Path, help="paired cpu-method calibration phases")
    args = parser.parse_args(argv)

    def report() -> None:
        for path in args.csv:
            try:
                phases = pd.read_csv(path)
            except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
                raise ExperimentError(f"{path}: cannot read: {exc}") from None
            print(f"{path} (95 % intervals over runs)\n")
            runs = per_run(phases)
            print(markdown(summary(runs)))
            print(
                f"\ndropped: {runs['dropped_not_flowing'].sum()} phases not flowing, "
                f"{runs['dropped_threads'].sum()} with a thread gone (switch numbers only), "
                f"of {len(phases)}"
            )
            print()

    return exit_status("localsample_costs", report)


if __name__ == "__main__":
    sys.exit(main())
