"""The application loop on the testbed (``research/appmon_loop.py``, short phases): real
OVS, nginx, wrk, two agents applying the signed plans and running two signed analysers; the
agents apply the moves (the mirror's device and flows, the analysers started and stopped by
their supervisors); the controller moves the web service's analysis to
the analysis host when the server gets busy and back when it is quiet again; every window the
sniffer reported is within the ground-truth tolerances of nginx's access log, and every window
of the off-site analyser behind the kernel mirror between the log and what the clients saw;
the plan in force keeps the web host within its capacity once the controller has acted."""

from __future__ import annotations

import pytest

from cosample.lab.appmirror import rig_unavailable
from research.appmon_loop import Settings, phases_summary, run_scenario
from research.appmon_loop_report import WINDOW_S, epoch, excess_bounds

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
    # the analysers' windows against the access log: the sniffer's, and from the move off-host
    # the off-site analyser's behind the kernel mirror (under the suite's load the move may come
    # late in the busy phase: a CI run compared 3 off-site windows, so at least 4 are asked for)
    rows = result["accuracy"]
    for source, least in (("onsite", 8), ("offsite", 4)):
        windows = [r for r in rows if r["source"] == source and r["compared"]]
        assert len(windows) >= least, (source, windows)
        # counted whole where the analyser ran the whole window (the agent's supervisor starts
        # and stops it when a plan arrives, within a window)
        whole = [r for r in windows if r["covered_s"] is not None and r["covered_s"] >= WINDOW_S]
        assert len(whole) >= least - 2, (source, windows)
        assert_counts(source, whole, logged_by_window(rows))
        assert_timing(source, excess_bounds(rows, result["clients"], source), windows)


def logged_by_window(rows):
    """The access log's requests per window start (epoch seconds), whichever analyser's row."""
    return {round(epoch(r["window_start"]), 3): r["log_requests"] for r in rows}


def assert_counts(source, windows, logged):
    """The wire stamps a request when it arrives, the log when nginx reads it, so when the
    shared machine stalls nginx a request near a window's edge moves to the next window (seen:
    2,813 against 2,806; 565 against 543 at a load average of 20): each window within 10 % of
    the busier of it and its neighbours (``logged``), as a stall moves requests at the rate on
    the edge's busier side (seen: 193 against 173 in a 2-s window as the load changed), and
    summed over the windows, where the edges cancel, within 2 % (seen: 8,454 against 8,449,
    2,963 against 2,963). A window in which the analyser reports lost input (``lower_bound``:
    ring drops, lost records) counts a lower bound: it may only be short."""
    for r in windows:
        start = epoch(r["window_start"])
        busiest = max(logged.get(round(start + k * WINDOW_S, 3), 0) for k in (-1, 0, 1))
        slack = 0.1 * busiest + 2
        over, short = r["matched"] - r["log_requests"], r["log_requests"] - r["matched"]
        assert over <= slack and (r["lower_bound"] or short <= slack), (source, r, busiest)
    matched, logged_sum = (sum(r[k] for r in windows) for k in ("matched", "log_requests"))
    exact = not any(r["lower_bound"] for r in windows)
    assert matched - logged_sum <= 0.02 * logged_sum + 2, (source, matched, logged_sum)
    assert not exact or logged_sum - matched <= 0.02 * logged_sum + 2, (
        source,
        matched,
        logged_sum,
    )


def assert_timing(source, bounds, windows):
    """Both analysers read the wire at the server (the kernel mirror's copies keep its timing:
    docs/results.md, runs C-H), which lies above nginx's own times by nginx's wait for the CPU
    and below the clients' (``excess_bounds``): each phase's mean excess over the log between
    the mean tolerance below it and the clients' excess over it (per window the log may also
    exceed the wire when nginx stalls: seen, -62 ms). On a quiet machine both bounds
    close in on the log (runs C-H: 27-30 of 30 off-site windows within the tolerances); on the
    loaded CI machine nginx's wait, which ``$request_time`` does not count, put 10 of 22
    off-site windows above them (at load averages of 11-20 here: all 21 and all 12 off-site
    windows, 7 of 8 on-site; +2 to +21 ms, the counts exact, no frame lost; docs/results.md,
    "The loop's windows on a loaded machine")."""
    assert sum(b["windows"] for b in bounds) == len(windows), (source, bounds)
    assert all(b["floor_s"] <= b["excess_s"] <= b["ceiling_s"] for b in bounds), (source, bounds)
