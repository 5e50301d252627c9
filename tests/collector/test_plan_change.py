"""The estimate through a plan change under steady traffic (synthetic OVS streams, known truth).

The collector sees the new plan at 40 s, the agents apply it ``lag`` seconds later (or earlier);
a stream the plan adds runs from its first datagram, one it drops stops when the collector sees
the plan, or with its last datagram if that came earlier.
Before exposures, s1's estimate fell by 80 % for a window after local 1-in-128 -> 1-in-8 + mirror.
"""

from __future__ import annotations

import json
import math

import pytest
from collector_plans import assert_unbiased, plan_document

from cosample.collector.attribution import build
from cosample.collector.estimate import Estimator
from cosample.collector.exposure import Streams, extrapolate, precision
from cosample.lab.sflowstream import plan_change
from cosample.plan.document import parse_plan

RATES = {"s1": 2400.0, "s2": 1200.0, "s3": 600.0}
MEASURE = {"s1": (128, {}), "s2": (128, {}), "s3": (128, {})}
MIRROR = {"s1": (8, {"s3": 0.5}), "s2": (16, {}), "s3": (1, {})}
START, SEEN, WINDOW = 1_000_000.0, 40.0, 15.0
TIMES = (-1, 1, 3, 5, 8, 12, 16)  # seconds after the collector saw the plan


def _plan(hosts, version):
    return parse_plan(json.dumps(plan_document(hosts, version=version)).encode())


def _trace(before, after, seed: int, lag: float) -> dict[int, dict]:
    lead = WINDOW + 2  # traffic from a window before the first snapshot
    stream = plan_change(
        before,
        after,
        RATES,
        change_s=lead + lag,
        duration_s=lead + 17,
        start=START + SEEN - lead,
        seed=seed,
    )
    estimator = Estimator(build(before), window_s=WINDOW)
    new, seen, k, out = build(after), False, 0, {}
    for t in TIMES:
        now = START + SEEN + t
        for when, data in stream.datagrams[k:]:
            if when > now:
                break
            if not seen and when >= START + SEEN:
                estimator.set_attribution(new, START + SEEN)
                seen = True
            estimator.ingest(data, when)
            k += 1
        if not seen and now >= START + SEEN:
            estimator.set_attribution(new, START + SEEN)
            seen = True
        out[t] = estimator.snapshot(now)
    return out


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize("lag", [0.5, 2.0])
def test_steady_traffic_stays_unbiased_through_a_plan_change(direction, lag):
    before, after = _plan(MEASURE, 1), _plan(MIRROR, 2)
    if direction == "down":
        before, after = _plan(MIRROR, 1), _plan(MEASURE, 2)
    # the server whose mirror starts or stops (the old estimator: mean z about -16)
    assert_unbiased((_trace(before, after, seed, lag) for seed in range(10)), "s1", RATES["s1"])


def test_streams_start_at_their_first_datagram_and_stop_with_the_plan():
    up, down = build(_plan(MEASURE, 1)), build(_plan(MIRROR, 2))
    streams = Streams()
    streams.plan(up, None)
    streams.plan(down, 10.0)  # s1's mirror to s3 is pending, s1's local stream continues
    s3_agent = down.servers["s3"].agent
    assert streams.gate == {("s1", s3_agent, 1): "pending"}
    assert streams.exposure("s1", 1, 0.0, 20.0) == 0.0
    streams.start("s1", s3_agent, 1, 12.0)
    assert streams.exposure("s1", 1, 0.0, 20.0) == 8.0
    assert streams.exposure("s1", 0, 5.0, 20.0) == 15.0
    streams.plan(up, 18.0, lambda server, agent, kind: 17.5)  # its last datagram came at 17.5
    assert streams.exposure("s1", 1, 0.0, 30.0) == 5.5
    streams.forget(19.0)
    assert streams.exposure("s1", 1, 0.0, 30.0) == 0.0


def test_a_dropped_local_stream_counts_no_late_samples():
    """A plan that turns s1's local sampling off: samples still arriving are ``stale_local``."""
    off = build(_plan({"s1": (None, {"s2": 1.0}), "s2": (1, {})}, 2))
    streams = Streams()
    streams.plan(build(_plan({"s1": (8, {}), "s2": (1, {})}, 1)), None)
    streams.plan(off, 5.0)
    assert streams.gate == {
        ("s1", off.servers["s1"].agent, 0): "stopped",
        ("s1", off.servers["s2"].agent, 1): "pending",
    }
    assert not Streams(gated=False).gate


def test_exposure_formulas_reduce_to_the_whole_window_ones():
    assert extrapolate(1000.0, 7000.0, 1.0) == (1000.0, 7000.0)
    assert precision(1.0, 7.0) == pytest.approx(1 / 7)
    assert precision(1.0, 0.0) == math.inf  # exact over the whole window
    assert precision(0.01, 0.0) == pytest.approx(0.01 / 0.99)  # exact, but saw 1 %
    assert precision(0.0, 7.0) == 0.0
    estimate, variance = extrapolate(500.0, 0.0, 0.5)  # exact over half the window
    assert estimate == 1000.0 and variance == pytest.approx(500 * 0.5 / 0.25)
