"""The closed-loop scenarios' pure parts: shifted traffic, inventories, the per-phase report."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cosample.controller.evaluate import PlanShares
from cosample.controller.inventory import inventory_from_dict
from cosample.experiments.testbed import closedloop, closedloop_report
from cosample.experiments.testbed.topology import from_config, skewed_config


def topology():
    return from_config(skewed_config(3, 2, 2400.0, 0.5, 3000.0), "ct")


def offered(flows):
    out = {}
    for flow in flows:
        out[flow.src.server] = out.get(flow.src.server, 0.0) + flow.pps
    return out


def test_shift_swaps_the_busiest_and_the_quietest_server():
    top = topology()
    before, after = offered(top.flows), offered(closedloop.shifted(top))
    assert before[1] > before[2] > before[3]
    assert after[3] == before[1] and after[1] == before[3] and after[2] == before[2]
    assert len(closedloop.shifted(top)) == len(top.flows)


def test_noise_stays_within_the_band():
    flows = topology().flows
    drawn = closedloop.noisy(flows, np.random.default_rng(0), 0.1)
    ratios = [d.pps / f.pps for d, f in zip(drawn, flows)]
    assert all(0.9 <= r <= 1.1 for r in ratios) and len(set(ratios)) == len(ratios)


def test_inventories_are_valid_and_carry_no_traffic():
    top = topology()
    settings = closedloop.LoopSettings("shift", 1.54, 0.46)
    document = closedloop.inventory(top, settings, None)
    inventory = inventory_from_dict(document)
    assert inventory.names == ("s1", "s2", "s3")
    assert inventory.extras["s2"]["tunnel_ip"] == top.servers[1].tunnel_ip
    assert inventory.sflow["polling_s"] == 2 and "traffic_pps" not in document
    from cosample.collector.inventory import Inventory
    from cosample.validation import validate

    addresses = validate(Inventory, closedloop.addresses(top))
    assert set(addresses.servers) == {"s1", "s2", "s3"}
    # before any plan: the collector attributes by these agent addresses ...
    assert addresses.server_of_agent() == {s.tunnel_ip: s.name for s in top.servers}
    # ... and the agents send their safe-state samples there, at the testbed's rate
    from cosample.agents.config import make_config
    from cosample.agents.desired import safe_state

    collector = document["sflow"]["collector"]
    config = make_config({"host": "s1", **closedloop.agent_config(settings, collector)})
    sflow = safe_state(config).sflow
    assert (sflow.target, sflow.sampling) == (collector, settings.measure_sampling)
    assert settings.measure_after_s == 2 * settings.window_s


def test_report_rows_from_a_timeline():
    cycle = lambda t, result="kept", **kw: {"t": t, "result": result, **kw}  # noqa: E731
    flow = lambda phase, start, src, sent: {  # noqa: E731
        "phase": phase,
        "start": start,
        "src": src,
        "dst": "s2",
        "seconds": 15.0,
        "sent": sent,
    }
    result = {
        "settings": {"scenario": "shift", "interval_s": 5.0},
        "timeline": {
            "phases": [
                {
                    "phase": "phase1",
                    "start": 40.0,
                    "end": 100.0,
                    "measure_s": 17.0,
                    "measure_start": 83.0,
                    "samples": {"s1": 3000, "s2": 1500},
                    "duplicates": {"s1": 300},
                },
                {
                    "phase": "phase2",
                    "start": 100.0,
                    "end": 160.0,
                    "measure_s": 17.0,
                    "measure_start": 143.0,
                    "samples": {"s3": 3000},
                    "duplicates": {},
                },
            ],
            "cycles": [
                cycle(1, "published", reasons=["bootstrap: ..."], published_versions=[9]),
                cycle(
                    30,
                    "published",
                    reasons=["no current plan"],
                    published_versions=[10],
                    distinct_planned_pps=280.0,
                    coverage={"s1": 0.1, "s2": 0.5, "s3": 0.0},
                ),
                cycle(60),
                cycle(105, predicted_max_use=1.2, over_limit=["s3"]),
                cycle(
                    110,
                    "published",
                    reasons=["overload: ..."],
                    published_versions=[11, 12],
                    distinct_planned_pps=250.0,
                    predicted_max_use=1.1,
                    over_limit=["s3"],
                    coverage={"s1": 0.0, "s2": 0.0, "s3": 0.1},
                ),
                cycle(115),
            ],
            "flows": [
                flow("phase1", 40.0, "s1", 60000),
                flow("phase1", 83.1, "s1", 15000),
                flow("phase1", 83.1, "s2", 3000),
                flow("phase2", 143.1, "s3", 30000),
            ],
            "agents": [
                {"t": 111.0, "versions": {"s1": (12, "plan"), "s2": (11, "plan")}},
                {"t": 119.5, "versions": {"s1": (12, "plan"), "s2": (12, "plan")}},
                {"t": 150.0, "versions": {"s1": (12, "plan"), "s2": (12, "plan")}},
            ],
        },
    }
    first, second = closedloop_report.phase_rows(result)
    assert first["plans_published"] == 0 and first["to_converge_s"] is None
    # distinct packets per second of traffic (15 s), not of the measuring period (17 s)
    assert first["measured_distinct_pps"] == 280.0 and first["planned_distinct_pps"] == 280.0
    assert first["sent_pps"] == {"s1": 1000.0, "s2": 200.0}
    assert first["expected_distinct_pps"] == 200.0  # 1000 x 0.1 + 200 x 0.5
    assert first["plan_changed_while_measuring"] is False
    assert second["plans_published"] == 1 and second["versions"] == [11, 12]
    assert second["to_converge_s"] == 19.5 and second["expected_distinct_pps"] == 200.0
    assert second["predicted_over_capacity_s"] == 10.0 and second["predicted_over_limit_s"] == 10.0
    totals = closedloop_report.totals(result)
    assert totals["plans_published"] == 2 and totals["measurement_plans"] == 1
    assert totals["startup_plans"] == 1
    assert second["to_converge_last_s"] == 19.5
    assert (
        "| phase2 | 60 | 1 | 19.5, 19.5 | 10 | 10 | 250 | 200 | 200 | no |"
        in closedloop_report.markdown(result, "cmd")
    )


def test_coverage_counts_copies_at_their_receivers_rates():
    """s1 samples 1-in-4 and mirrors 0.2 to s2 (1-in-2) and 0.3 to s3 (1-in-1): it collects
    l + c - l c of its packets, c = 0.2 / 2 + 0.3."""
    shares = PlanShares(
        version=1,
        plan_id="p",
        local_rate=np.array([0.25, 0.5, 1.0]),
        mirror_src=np.array([0, 0]),
        mirror_dst=np.array([1, 2]),
        mirror_rate=np.array([0.2, 0.3]),
    )
    controller = SimpleNamespace(
        inventory=SimpleNamespace(names=("s1", "s2", "s3")),
        measurement=None,
        smoothed=None,
        current_shares=shares,
    )
    coverage = closedloop._estimates(controller)["coverage"]
    c = 0.2 / 2 + 0.3
    assert coverage["s1"] == pytest.approx(0.25 + c - 0.25 * c, rel=1e-6)
    assert coverage["s2"] == pytest.approx(0.5) and coverage["s3"] == pytest.approx(1.0)
