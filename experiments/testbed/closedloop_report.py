"""The closed-loop run in a table per phase: convergence, overload, planned vs measured, plans.

Pure: reads the timeline ``closedloop.run_closed_loop`` returns.

- *to converge*: from the start of the phase (the shift) to the moment every agent runs the
  last version of the first plan published after it (phase 2 of a two-phase set);
- *predicted above capacity*: seconds (controller cycles times their length) in which the
  controller predicted some server above its capacity (load/capacity > 1) under the plan in
  force, and above the publication limit ``1 - margin``;
- *planned distinct*: what the plan in force at the end of the phase predicted
  (``summary.collected_pps``, distinct packets after rounding); *measured distinct*: distinct packets per second the
  re-exported samples of the phase's last ``measure_s`` seconds contain (iperf3 packet numbers);
- *plans published*: during the phase; the measurement plan of the start-up is not counted.
"""

from __future__ import annotations

from typing import Any


def phase_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    timeline = result["timeline"]
    interval = result["settings"]["interval_s"]
    rows = []
    for phase in timeline["phases"]:
        start, end = phase["start"], phase["end"]
        cycles = [c for c in timeline["cycles"] if start <= c["t"] < end]
        published = [c for c in cycles if c.get("result") == "published"
                     and not str((c.get("reasons") or [""])[0]).startswith("bootstrap")]
        before_end = [c for c in timeline["cycles"] if c["t"] < end]
        planned = next((c.get("distinct_planned_pps") for c in reversed(before_end)
                        if c.get("distinct_planned_pps") is not None), None)
        samples = sum(phase.get("samples", {}).values())
        duplicates = sum(phase.get("duplicates", {}).values())
        measured = (samples - duplicates) / phase["measure_s"] if phase.get("measure_s") else None
        rows.append({
            "phase": phase["phase"],
            "seconds": round(end - start, 1),
            "plans_published": len(published),
            "versions": [v for c in published for v in c.get("published_versions", [])],
            "reasons": [c["reasons"][0] for c in published if c.get("reasons")],
            "to_converge_s": _convergence(timeline, published, start),
            "predicted_over_capacity_s": interval * sum(
                1 for c in cycles if (c.get("predicted_max_use") or 0) > 1.0),
            "predicted_over_limit_s": interval * sum(1 for c in cycles if c.get("over_limit")),
            "stale_cycles": sum(1 for c in cycles if c.get("result") in ("stale", "error")),
            "planned_distinct_pps": round(planned, 1) if planned is not None else None,
            "measured_distinct_pps": round(measured, 1) if measured is not None else None,
            "measured_samples": samples,
        })
    return rows


def totals(result: dict[str, Any]) -> dict[str, Any]:
    cycles = result["timeline"]["cycles"]
    real = [c for c in cycles if c.get("result") == "published"
            and not str((c.get("reasons") or [""])[0]).startswith("bootstrap")]
    return {"scenario": result["settings"]["scenario"], "cycles": len(cycles),
            "plans_published": len(real),
            "measurement_plans": sum(1 for c in cycles if c.get("result") == "published") - len(real),
            "errors": sum(1 for c in cycles if c.get("result") in ("error", "internal"))}


def _convergence(timeline: dict[str, Any], published: list[dict[str, Any]],
                 start: float) -> float | None:
    if not published:
        return None
    target = max(published[0].get("published_versions") or [0])
    for sample in timeline["agents"]:
        if sample["t"] < published[0]["t"]:
            continue
        if all(v is not None and v >= target and mode == "plan"
               for v, mode in sample["versions"].values()):
            return round(sample["t"] - start, 1)
    return None


def markdown(result: dict[str, Any], command: str) -> str:
    rows = phase_rows(result)
    total = totals(result)
    lines = [f"# Closed loop on the testbed: {total['scenario']}", "", f"    {command}", "",
             "| phase | s | plans published | to converge (s) | predicted > capacity (s) | "
             "predicted > limit (s) | planned distinct pps | measured distinct pps |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['phase']} | {row['seconds']:g} | {row['plans_published']} | "
                     f"{_cell(row['to_converge_s'])} | {row['predicted_over_capacity_s']:g} | "
                     f"{row['predicted_over_limit_s']:g} | {_cell(row['planned_distinct_pps'])} | "
                     f"{_cell(row['measured_distinct_pps'])} |")
    lines += ["", f"Plans published in all (after the measurement plan): "
                  f"{total['plans_published']}; controller cycles {total['cycles']}, failed "
                  f"{total['errors']}."]
    for row in rows:
        for reason in row["reasons"]:
            lines.append(f"- {row['phase']}: {reason}")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}"
