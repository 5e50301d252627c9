"""The application loop's per-window comparison with the access log (pure): complete windows
compared with the ground-truth tolerances, split windows left out, phases summarised."""

from __future__ import annotations

import numpy as np

from cosample.lab.web import LogEntry
from research.appmon_loop_report import accuracy, phases_summary

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
