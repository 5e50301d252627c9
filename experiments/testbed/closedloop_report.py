"""The closed-loop run in a table per phase: convergence, overload, planned vs measured, plans.

Pure: reads the timeline ``closedloop.run_closed_loop`` returns.

- *to converge*: from the start of the phase (the shift) to the moment every agent runs the
  last version of the first plan published after it (phase 2 of a two-phase set), and of the
  last plan published in the phase;
- *predicted above capacity*: seconds (controller cycles times their length) in which the
  controller predicted some server above its capacity (load/capacity > 1) under the plan in
  force, and above the publication limit ``1 - margin``;
- *planned distinct*: what the plan in force at the end of the phase predicted
  (``summary.collected_pps``, distinct packets after rounding) for the traffic the controller
  estimated; *measured distinct*: distinct packets per second of traffic the re-exported
  samples of the phase's last ``measure_s`` seconds contain (iperf3 packet numbers);
- *expected for the traffic sent*: the same plan's coverage (``l + c - l c`` per server, ``c`` the
  mirrored shares at their receivers' rates) times
  the packets iperf3 sent in those seconds: planned vs expected is the estimate's error,
  expected vs measured the data plane's (copies or samples lost on the way);
- *plan changed while measuring*: some agent ran another version at the end of the measured
  seconds than at their start (the measured packets then mix two plans);
- *plans published*: during the phase; the measurement plan of the start-up is not counted;
  the line under the table counts every publication of the run, start-up and measurement plan
  included (the steady scenario's goal: at most one).
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
        published = [
            c
            for c in cycles
            if c.get("result") == "published"
            and not str((c.get("reasons") or [""])[0]).startswith("bootstrap")
        ]
        before_end = [c for c in timeline["cycles"] if c["t"] < end]
        planned = next(
            (
                c.get("distinct_planned_pps")
                for c in reversed(before_end)
                if c.get("distinct_planned_pps") is not None
            ),
            None,
        )
        samples = sum(phase.get("samples", {}).values())
        duplicates = sum(phase.get("duplicates", {}).values())
        sent, seconds = _sent(timeline, phase)
        measured = (samples - duplicates) / seconds if seconds else None
        coverage = next((c["coverage"] for c in reversed(before_end) if c.get("coverage")), None)
        expected = (
            sum(pps * coverage.get(server, 0.0) for server, pps in sent.items())
            if coverage and sent
            else None
        )
        rows.append(
            {
                "phase": phase["phase"],
                "seconds": round(end - start, 1),
                "plans_published": len(published),
                "versions": [v for c in published for v in c.get("published_versions", [])],
                "reasons": [c["reasons"][0] for c in published if c.get("reasons")],
                "to_converge_s": _convergence(timeline, published, start),
                "to_converge_last_s": _convergence(timeline, published[-1:], start),
                "predicted_over_capacity_s": interval
                * sum(1 for c in cycles if (c.get("predicted_max_use") or 0) > 1.0),
                "predicted_over_limit_s": interval * sum(1 for c in cycles if c.get("over_limit")),
                "stale_cycles": sum(1 for c in cycles if c.get("result") in ("stale", "error")),
                "planned_distinct_pps": round(planned, 1) if planned is not None else None,
                "measured_distinct_pps": round(measured, 1) if measured is not None else None,
                "expected_distinct_pps": round(expected, 1) if expected is not None else None,
                "sent_pps": {k: round(v, 1) for k, v in sent.items()},
                "plan_changed_while_measuring": _changed(timeline, phase),
                "measured_samples": samples,
            }
        )
    return rows


def totals(result: dict[str, Any]) -> dict[str, Any]:
    cycles = result["timeline"]["cycles"]
    real = [
        c
        for c in cycles
        if c.get("result") == "published"
        and not str((c.get("reasons") or [""])[0]).startswith("bootstrap")
    ]
    first = min((p["start"] for p in result["timeline"]["phases"]), default=float("inf"))
    every = [c for c in cycles if c.get("result") == "published"]
    return {
        "scenario": result["settings"]["scenario"],
        "cycles": len(cycles),
        "publications": len(every),
        "first_publication_s": every[0]["t"] if every else None,
        "plans_published": len(real),
        "startup_plans": sum(1 for c in real if c["t"] < first),
        "measurement_plans": len(every) - len(real),
        "errors": sum(1 for c in cycles if c.get("result") in ("error", "internal")),
    }


def _sent(timeline: dict[str, Any], phase: dict[str, Any]) -> tuple[dict[str, float], float]:
    """Packets per second each source server sent in the measured seconds, and their length."""
    start = phase.get("measure_start")
    if start is None:
        return {}, 0.0
    flows = [
        f for f in timeline["flows"] if f["phase"] == phase["phase"] and f["start"] >= start - 0.5
    ]
    seconds = max((f["seconds"] for f in flows), default=0.0)
    sent: dict[str, float] = {}
    for flow in flows:
        sent[flow["src"]] = sent.get(flow["src"], 0.0) + flow["sent"] / seconds
    return sent, seconds


def _changed(timeline: dict[str, Any], phase: dict[str, Any]) -> bool | None:
    start = phase.get("measure_start")
    if start is None:
        return None
    seen = {
        tuple(sorted((k, tuple(v)) for k, v in a["versions"].items()))
        for a in timeline["agents"]
        if start <= a["t"] <= phase["end"]
    }
    return len(seen) > 1


def _convergence(
    timeline: dict[str, Any], published: list[dict[str, Any]], start: float
) -> float | None:
    if not published:
        return None
    target = max(published[0].get("published_versions") or [0])
    for sample in timeline["agents"]:
        if sample["t"] < published[0]["t"]:
            continue
        if all(
            v is not None and v >= target and mode == "plan"
            for v, mode in sample["versions"].values()
        ):
            return round(sample["t"] - start, 1)
    return None


def markdown(result: dict[str, Any], command: str) -> str:
    rows = phase_rows(result)
    total = totals(result)
    lines = [
        f"# Closed loop on the testbed: {total['scenario']}",
        "",
        f"    {command}",
        "",
        "| phase | s | plans published | to converge: first, last plan (s) | "
        "predicted > capacity (s) | "
        "predicted > limit (s) | planned distinct pps | expected for traffic sent | "
        "measured distinct pps | plan changed while measuring |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['phase']} | {row['seconds']:g} | {row['plans_published']} | "
            f"{_cell(row['to_converge_s'])}, {_cell(row['to_converge_last_s'])} | "
            f"{row['predicted_over_capacity_s']:g} | "
            f"{row['predicted_over_limit_s']:g} | {_cell(row['planned_distinct_pps'])} | "
            f"{_cell(row['expected_distinct_pps'])} | "
            f"{_cell(row['measured_distinct_pps'])} | "
            f"{_cell(row['plan_changed_while_measuring'])} |"
        )
    lines += [
        "",
        f"Publications in total: {total['publications']} (the first "
        f"{_cell(total['first_publication_s'])} s after the start); measurement plans "
        f"(first start, before any real plan): {total['measurement_plans']}; real "
        f"plans: {total['plans_published']} (start-up {total['startup_plans']}); "
        f"controller cycles {total['cycles']}, failed {total['errors']}.",
    ]
    for row in rows:
        for reason in row["reasons"]:
            lines.append(f"- {row['phase']}: {reason}")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else f"{value:g}"
