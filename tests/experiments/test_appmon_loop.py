"""The application loop on the testbed (``research/appmon_loop.py``, short phases): real
OVS, nginx, wrk, two agents applying the signed plans and running two signed analysers; the
agents apply the moves (the mirror's device and flows, the analysers started and stopped by
their supervisors); the controller moves the web service's analysis to
the analysis host when the server gets busy and back when it is quiet again; every window the
sniffer reported is within the ground-truth tolerances of nginx's access log, and most windows
of the off-site analyser behind the kernel mirror; the plan in force keeps the web host within
its capacity once the controller has acted."""

from __future__ import annotations

import pytest

from cosample.lab.appmirror import rig_unavailable
from research.appmon_loop import Settings, phases_summary, run_scenario
from research.appmon_loop_report import WINDOW_S

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_analysis_moves_off_host_and_back_within_tolerance(tmp_path):
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    result = run_scenario(Settings(quiet_s=12, busy_s=45, after_s=30, seed=4), tmp_path)
    cal = result["calibration"]
    assert cal["busy_requests_per_s"] > 2 * cal["quiet_requests_per_s"], cal
    quiet, busy, after = phases_summary(result)
    assert quiet["last_mechanism"] == "sniffer"
    mirror = result["settings"]["mirror"]
    assert mirror == "kernel_mirror"  # the default: the copies keep the server's timing
    busy_use = [
        (row["t"], row["mechanism"], row["predicted_max_use"])
        for row in result["timeline"]
        if row["phase"] == "busy"
    ]
    assert mirror in busy["mechanisms"], (cal, busy_use)
    assert any("overload" in " ".join(reasons) for _, reasons in busy["publications"])
    assert after["last_mechanism"] == "sniffer"
    # the agents applied the moves: the web host's mirror toward the analysis host, the
    # analysis host's receive device, and their supervisors' analysers
    actions = [(a["host"], a["action"]) for a in result["agent_actions"]]
    assert any(
        host == "web" and "appmon VXLAN device" in text and "to analysis" in text
        for host, text in actions
    ), actions
    assert any(
        host == "web" and text.startswith("apply: set kernel mirror filter on")
        for host, text in actions
    ), actions
    assert any(
        host == "analysis" and "appmon VXLAN device" in text and "from web" in text
        for host, text in actions
    ), actions
    started = [
        (host, text.split()[3])
        for host, text in actions
        if text.startswith("analysers: start analyser")
    ]
    assert {host for host, name in started if name.startswith("sniffer-")} == {"web"}
    assert {host for host, name in started if name.startswith("mirror-")} == {"analysis"}
    assert any(
        host == "web" and text.startswith("analysers: stop analyser sniffer-")
        for host, text in actions
    ), actions
    # back on-site on fewer mirrored bytes: after the load dropped, or earlier if the shared
    # machine's busy rate itself fell to where the sniffer fits (seen once, docs/results/appmon.md)
    assert any(
        "application fabric" in " ".join(reasons)
        for phase in (busy, after)
        for _, reasons in phase["publications"]
    )
    # from the cycle after the off-host move, the plan in force keeps the web host in capacity
    timeline = result["timeline"]
    moved = next(k for k, row in enumerate(timeline) if row["mechanism"] == mirror)
    assert max(row["predicted_max_use"] for row in timeline[moved + 1 :]) <= 1.0
    # the analysers' windows against the access log
    rows = result["accuracy"]
    onsite = [r for r in rows if r["source"] == "onsite" and r["compared"]]
    assert len(onsite) >= 8
    assert all(r["mean_ok"] and r["p95_ok"] for r in onsite), [
        r for r in onsite if not (r["mean_ok"] and r["p95_ok"])
    ]
    # counts in the windows the sniffer covered whole (the agent's supervisor starts and stops
    # it when a plan arrives, within a window)
    whole = [r for r in onsite if r["covered_s"] is not None and r["covered_s"] >= WINDOW_S]
    assert len(whole) >= 6
    miscounted = [
        r for r in whole if abs(r["matched"] - r["log_requests"]) > 0.02 * r["log_requests"] + 2
    ]
    assert not miscounted, miscounted
    # off-site, under the busy phase's load, the copies lose a few per cent of the requests
    # on this shared machine (seen: 3,258 of 3,434 in one window), and a window's edge may move
    # a few requests either side (2,813 against 2,806): no window off by more than 10 %
    offsite = [r for r in rows if r["source"] == "offsite" and r["compared"]]
    short = [
        (r["window_start"], r["matched"], r["log_requests"])
        for r in offsite
        if abs(r["matched"] - r["log_requests"]) > 0.1 * r["log_requests"] + 2
    ]
    assert not short, short
    # the kernel mirror's copies keep the server's timing (docs/results/appmon.md, runs C-H): the
    # off-site windows within the same tolerances as the sniffer's, a quarter left for windows
    # in which the shared machine stalls nginx (seen: 3 of 30 in one run, 1 of 30 in another);
    # under the whole suite's load the move off-host may come late in the busy phase (a CI run
    # compared 3 off-site windows, all within), so at least 4 windows are asked for
    within = [r for r in offsite if r["mean_ok"] and r["p95_ok"]]
    assert len(offsite) >= 4 and len(within) >= 0.75 * len(offsite), [
        r for r in offsite if not (r["mean_ok"] and r["p95_ok"])
    ]
