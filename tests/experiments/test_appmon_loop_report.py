"""The application loop's per-window comparison with the access log (pure): complete windows
compared with the ground-truth tolerances, split windows left out, phases summarised."""

from __future__ import annotations

import numpy as np

from cosample.experiments.appmon_loop_report import (
    accuracy,
    excess_bounds,
    phases_summary,
    with_log_means,
)
from cosample.lab.web import LogEntry

START = 1_800_000_000.0  # a multiple of the 2-s window


def window(start, matched, mean, p95):
    stamp = np.datetime_as_string(np.datetime64(int(start), "s")) + "Z"
    return {
        "window_start": stamp,
        "services": [
            {
                "service": "10.77.0.2:80",
                "matched": matched,
                "service_time_s": {"mean": mean, "p95": p95},
            }
        ],
    }


def test_complete_windows_are_compared_and_split_ones_are_not():
    rng = np.random.default_rng(2)
    times = 0.001 + rng.exponential(0.003, 200)
    log = [LogEntry(START + 0.5 + k * 0.005, float(t), 200) for k, t in enumerate(times)]
    p95 = float(np.quantile(times, 0.95))
    rows = accuracy(
        {
            "onsite": [window(START, 200, times.mean() + 0.0005, p95)],
            "offsite": [
                window(START, 200, times.mean() + 0.004, p95 * 1.5),
                window(START + 2, 50, 0.004, 0.009),
            ],
        },
        log,
    )
    by = {(r["source"], r["window_start"]): r for r in rows}
    onsite = next(r for r in rows if r["source"] == "onsite")
    assert onsite["compared"] and onsite["mean_ok"] and onsite["p95_ok"]
    off = [r for r in rows if r["source"] == "offsite"]
    assert off[0]["compared"] and not off[0]["mean_ok"] and not off[0]["p95_ok"]
    assert not off[1]["compared"]  # no log entries in that window: nothing to compare with
    assert len(by) == 3


def test_each_phase_excess_over_the_log_is_set_beside_its_bounds():
    """The wire lies between nginx's own times and the clients': each phase's windows' mean
    excess over the log (weighted by requests) comes with the mean tolerance below the log
    and the clients' excess over the log in the same phase; abandoned requests (499) are not
    in the log's mean, and a phase without windows has no bounds."""
    rng = np.random.default_rng(3)
    times = 0.001 + rng.exponential(0.003, 400)
    log = [LogEntry(START + 0.5 + k * 0.009, float(t), 200) for k, t in enumerate(times)]
    log.append(LogEntry(START + 1.0, 5.0, 499))  # abandoned by wrk at its end: not counted
    first, second = times[:167], times[167:389]  # the requests started in each 2-s window
    rows = accuracy(
        {
            "offsite": [
                window(START, 167, first.mean() + 0.004, 0.02),  # nginx kept waiting
                window(START + 2, 222, second.mean() - 0.003, 0.0),  # faster than nginx
            ],
        },
        log,
    )
    assert [r["compared"] and not r["lower_bound"] for r in rows] == [True, True]
    clients = with_log_means(
        [
            {"phase": "quiet", "start": START - 10, "latency_mean_ms": 1.0},
            {"phase": "busy", "start": START, "latency_mean_ms": 1e3 * times.mean() + 5.0},
        ],
        log,
    )
    assert clients[0]["log_mean_ms"] is None
    assert abs(clients[1]["log_mean_ms"] - 1e3 * times.mean()) < 1e-9
    (busy,) = excess_bounds(rows, clients, "offsite")
    weighted = (167 * 0.004 - 222 * 0.003) / 389
    assert busy["phase"] == "busy" and busy["windows"] == 2
    assert abs(busy["excess_s"] - weighted) < 1e-9
    assert abs(busy["ceiling_s"] - 0.006) < 1e-9
    assert abs(busy["floor_s"] + 0.001 + 0.03 * times[:389].mean()) < 1e-9
    (late,) = excess_bounds(rows[:1], clients, "offsite")  # within: nginx kept it waiting
    assert abs(late["excess_s"] - 0.004) < 1e-9
    assert late["floor_s"] < late["excess_s"] <= late["ceiling_s"]
    (early,) = excess_bounds(rows[1:], clients, "offsite")  # the wire ahead of nginx: below
    assert early["excess_s"] < early["floor_s"]


def test_phases_summary_lists_mechanisms_and_publications():
    timeline = [
        {
            "phase": "quiet",
            "mechanism": "sniffer",
            "plan_version": 1,
            "t": 2.0,
            "result": "published",
            "reasons": ["no current plan"],
            "predicted_max_use": 0.2,
        },
        {
            "phase": "busy",
            "mechanism": "selective_mirror",
            "plan_version": 2,
            "t": 4.0,
            "result": "published",
            "reasons": ["overload"],
            "predicted_max_use": 1.05,
        },
        {
            "phase": "after",
            "mechanism": "sniffer",
            "plan_version": 3,
            "t": 6.0,
            "result": "kept",
            "reasons": [],
            "predicted_max_use": 0.1,
        },
    ]
    quiet, busy, after = phases_summary({"timeline": timeline})
    assert busy["mechanisms"] == ["selective_mirror"] and busy["max_predicted_use"] == 1.05
    assert quiet["publications"] == [(2.0, ["no current plan"])]
    assert after["publications"] == [] and after["last_mechanism"] == "sniffer"
