"""The application loop's results (``research/appmon_loop.py``): each analyser window against
nginx's access log, and the timeline per phase. Pure: the run's records in, rows out."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np

SERVICE_PORT = 80
#: the analysers' window and the controller's cycle
WINDOW_S = 2.0
#: Per window, the analyser's mean within 1 ms + 3 % of the access log's, its p95 within
#: 2 ms + 5 % of the log's order statistics 1.5 ranks either side of its 95th percentile (the
#: ground-truth test's tolerances, tests/appmon/test_ground_truth.py).
MEAN_ABS, MEAN_REL, P95_ABS, P95_REL = 0.001, 0.03, 0.002, 0.05
#: A window is compared when the analyser matched at least this many requests and this share of
#: the log's (a window in which the analysis moved is split between two analysers).
MIN_MATCHED, COMPLETE = 20, 0.9


def accuracy(windows: dict[str, list[dict[str, Any]]], log) -> list[dict[str, Any]]:
    """Per analyser window: its mean and p95 against the access log's requests that started in
    it (``compared``: complete and large enough; ``within``: inside the tolerances)."""
    by_window: dict[float, list] = {}
    for entry in log:
        if entry.status != 499:
            by_window.setdefault(math.floor(entry.start / WINDOW_S) * WINDOW_S, []).append(entry)
    rows = []
    for source, snaps in windows.items():
        for snap in snaps:
            start = epoch(snap["window_start"])
            service = next(
                (s for s in snap["services"] if s["service"].endswith(f":{SERVICE_PORT}")), None
            )
            if service is None or service["service_time_s"] is None:
                continue
            times = np.array([e.request_time for e in by_window.get(start, [])])
            row = {
                "source": source,
                "window_start": snap["window_start"],
                "matched": service["matched"],
                "log_requests": int(times.size),
                "mean_s": service["service_time_s"]["mean"],
                "p95_s": service["service_time_s"]["p95"],
                # an analyser started or stopped within the window saw part of it
                "covered_s": snap.get("covered_s"),
            }
            complete = (
                times.size > 0
                and service["matched"] >= MIN_MATCHED
                and service["matched"] >= COMPLETE * times.size
            )
            row["compared"] = bool(complete)
            # the analyser lost input in this window (ring drops, missing records): its counts
            # are lower bounds (appmon/losses.py)
            row["lower_bound"] = bool(snap.get("lower_bound"))
            if complete:
                rank = 1.5 / times.size
                low = float(np.quantile(times, max(0.0, 0.95 - rank), method="lower"))
                high = float(np.quantile(times, min(1.0, 0.95 + rank), method="higher"))
                mean = float(times.mean())
                row.update(
                    log_mean_s=mean,
                    log_p95_low_s=low,
                    log_p95_high_s=high,
                    mean_ok=abs(row["mean_s"] - mean) <= MEAN_ABS + MEAN_REL * mean,
                    p95_ok=low * (1 - P95_REL) - P95_ABS
                    <= row["p95_s"]
                    <= high * (1 + P95_REL) + P95_ABS,
                )
            rows.append(row)
    return sorted(rows, key=lambda r: (r["window_start"], r["source"]))


def with_log_means(clients: list[dict[str, Any]], log) -> list[dict[str, Any]]:
    """Each phase's client figures (``start``: seconds since the epoch; a phase lasts until the
    next one starts) with the access log's mean service time of the requests that started in
    it (``log_mean_ms``)."""
    times: list[list[float]] = [[] for _ in clients]
    for entry in log:
        k = _phase_of(entry.start, clients)
        if entry.status != 499 and k is not None:
            times[k].append(entry.request_time)
    return [
        {**client, "log_mean_ms": 1e3 * float(np.mean(mine)) if mine else None}
        for client, mine in zip(clients, times)
    ]


def excess_bounds(rows: list[dict[str, Any]], clients: list[dict[str, Any]], source: str):
    """Per phase: how far ``source``'s compared windows' mean service time lies above the
    access log's (``excess_s``, weighted by the log's requests), and the bounds on it.

    The analysers read the wire at the server: each request's copy passes before nginx reads
    it, each answer's as nginx writes it, so the wire's times exceed the log's by nginx's own
    wait for the CPU, which ``$request_time`` does not count and which grows with the load of
    the machine. The client sends before the wire sees the request and reads after it sees the
    answer: per request, client latency >= the wire's time, so the excess is at most the
    clients' excess over the log in the same phase (wrk's mean latency less the log's mean,
    ``with_log_means``: ``ceiling_s``, plus the mean tolerance). Below, only nginx's clock
    lets the log exceed the wire (cached per turn of its event loop, it can stamp a request
    read in a long turn before the request arrived), by turns: a phase's mean stays within
    the ground truth's mean tolerance below the log's (``floor_s``)."""
    mine: list[list[dict[str, Any]]] = [[] for _ in clients]
    for row in rows:
        k = _phase_of(epoch(row["window_start"]), clients)
        if row["source"] == source and row["compared"] and k is not None:
            mine[k].append(row)
    out = []
    for client, windows in zip(clients, mine):
        if not windows or client.get("log_mean_ms") is None:
            continue
        weights = np.array([r["log_requests"] for r in windows], dtype=float)
        excess = np.array([r["mean_s"] - r["log_mean_s"] for r in windows])
        log_mean = float(np.average([r["log_mean_s"] for r in windows], weights=weights))
        out.append(
            {
                "phase": client["phase"],
                "windows": len(windows),
                "excess_s": float(np.average(excess, weights=weights)),
                "floor_s": -(MEAN_ABS + MEAN_REL * log_mean),
                "ceiling_s": (client["latency_mean_ms"] - client["log_mean_ms"]) / 1e3 + MEAN_ABS,
            }
        )
    return out


def _phase_of(t: float, clients: list[dict[str, Any]]) -> int | None:
    """The index of the phase under way at ``t`` (the last one started by then)."""
    started = [k for k, client in enumerate(clients) if client["start"] <= t]
    return started[-1] if started else None


def epoch(stamp: str) -> float:
    """A window's ISO 8601 start in seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def phases_summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase: cycles, plan versions, mechanisms in force, publications and their reasons."""
    out = []
    for phase in ("quiet", "busy", "after"):
        rows = [r for r in result["timeline"] if r["phase"] == phase]
        out.append(
            {
                "phase": phase,
                "cycles": len(rows),
                "mechanisms": sorted({r["mechanism"] for r in rows}),
                "last_mechanism": rows[-1]["mechanism"] if rows else None,
                "versions": sorted(
                    {r["plan_version"] for r in rows if r["plan_version"] is not None}
                ),
                "publications": [
                    (r["t"], r["reasons"]) for r in rows if r["result"] == "published"
                ],
                "max_predicted_use": max((r["predicted_max_use"] or 0) for r in rows)
                if rows
                else None,
            }
        )
    return out
