"""The tidy table and report from hand-made measurements (the integration test feeds real ones)."""

from __future__ import annotations

import pytest

from cosample.experiments.testbed.experiment import ExperimentResult, PhaseMeasurement, RunSettings
from cosample.experiments.testbed.measure import PortCounters, SampleCounts
from cosample.experiments.testbed.plans import Coefficients
from cosample.experiments.testbed.report import markdown, summary, tidy_rows, write
from cosample.experiments.testbed.topology import from_config, skewed_config
from cosample.experiments.testbed.traffic import FlowResult

DURATION = 10.0


@pytest.fixture
def topology():
    return from_config(skewed_config(servers=2, top_pps=2400, skew=0.5))


def _phase(topology, name, plan, samples, lost_fraction=0.0):
    flows = [
        FlowResult(
            f,
            DURATION,
            int(f.pps * DURATION),
            int(f.pps * DURATION * lost_fraction) if f.src.server == 1 else 0,
        )
        for f in topology.flows
    ]
    datapath = {
        s.name: {
            vm.port: PortCounters(
                rx_packets=int(sum(f.pps for f in topology.flows if f.src == vm) * DURATION)
            )
            for vm in s.vms
        }
        for s in topology.servers
    }
    datapath["s2"]["vxlan_sys_4789"] = PortCounters(rx_packets=4800)
    kernel = {"s1": {"cosm-1": PortCounters(tx_packets=4800)}, "s2": {}}
    return PhaseMeasurement(
        name, plan, flows, datapath, kernel, samples, {"s1": 1.0, "s2": 1.0}, DURATION + 2
    )


def _plan(collected, mirrors, distinct=None):
    return {
        "summary": {"samples_pps": collected, "collected_pps": distinct or collected},
        "hosts": {
            "s1": {
                "role": "sender",
                "sflow_sampling": 10,
                "own_pps": 2400.0,
                "capacity_pps": 3000.0,
                "mirrors": mirrors,
            },
            "s2": {
                "role": "receiver",
                "sflow_sampling": 1,
                "own_pps": 1200.0,
                "capacity_pps": 3000.0,
                "mirrors": [],
            },
        },
    }


def test_rows_compare_collected_samples_with_the_applied_plan(topology, tmp_path):
    collab = _plan(1920.0, [{"to": "s2", "rate": 0.2}], distinct=1872.0)
    result = ExperimentResult(
        phases={
            "baseline": _phase(topology, "baseline", None, SampleCounts({}, 0)),
            "noncollab": _phase(
                topology,
                "noncollab",
                _plan(1440.0, []),
                SampleCounts({("s1", "s1"): 2400, ("s2", "s2"): 12000}, 3),
            ),
            "collab": _phase(
                topology,
                "collab",
                collab,
                SampleCounts(
                    {("s1", "s1"): 2400, ("s1", "s2"): 4800, ("s2", "s2"): 11000}, 0, {"s2": 1000}
                ),
                lost_fraction=0.02,
            ),
        },
        description={},
        plan_paths={},
        settings=RunSettings(Coefficients(1.5, 0.5), DURATION),
    )
    frame = tidy_rows(result, topology).set_index(["phase", "server"])
    s1 = frame.loc[("collab", "s1")]
    assert s1["vm_packets"] == 24000 and s1["expected_samples"] == pytest.approx(7200)
    assert s1["collected_samples"] == 7200 and s1["mirrored_samples"] == 4800
    assert s1["within_tolerance"] and s1["mirror_tx_packets"] == 4800
    assert s1["planned_collected_pps"] == pytest.approx(2400 * 0.3)
    assert s1["loss_fraction"] == pytest.approx(0.02) and s1["degraded"]
    s2 = frame.loc[("collab", "s2")]
    assert not s2["within_tolerance"]  # 11000 of 12000 expected at 1-in-1
    assert s2["samples_of_other_servers"] == 4800 and s2["samples_lost_in_transit"] == 1000
    assert s2["mirror_rx_packets"] == 4800
    # own packets (no inbound in this fake) + alpha * own samples + (alpha + beta) * received
    assert s2["model_load_pps"] == pytest.approx((12000 + 0 + 1.5 * 11000 + 2.0 * 4800) / DURATION)
    assert not frame.loc[("noncollab", "s1")]["degraded"]
    assert (frame.loc["baseline"]["collected_samples"] == 0).all()

    totals = summary(frame.reset_index(), result)
    assert totals["planned_gain"] == pytest.approx(1920 / 1440 - 1)
    assert totals["measured_gain"] == pytest.approx((7200 + 11000) / (2400 + 12000) - 1)
    assert totals["phases"]["collab"]["degraded_servers"] == ["s1"]
    assert totals["phases"]["collab"]["samples_lost_in_transit"] == 1000
    text = markdown(frame.reset_index(), totals, result, "cosample testbed run --duration 10")
    assert totals["planned_distinct_gain"] == pytest.approx(1872 / 1440 - 1)
    assert "Collaborative gain in distinct packets: planned +30.0%" in text
    assert "in samples: planned +33.3%" in text and "| collab | s1 | sender |" in text
    paths = write(tmp_path, frame.reset_index(), totals, text)
    assert all(path.stat().st_size > 100 for path in paths.values())
