"""Real plans from ``cosample plan -o`` (embedded example) through the agents' reader and logic."""

from __future__ import annotations

import json

import pytest

from cosample.agents.config import make_config
from cosample.agents.desired import desired_state
from cosample.agents.fakehost import FakeHost
from cosample.agents.reconcile import reconcile
from cosample.cli import main
from cosample.plan.document import parse_document, parse_plan
from cosample.plan.transition import transition

pytest.importorskip("cosample.planner.planfile", reason="the planner's plan writer is missing")


@pytest.fixture
def planner_plans(tmp_path):
    collab, baseline = tmp_path / "collab.json", tmp_path / "baseline.json"
    assert main(["plan", "-q", "-o", str(collab), "--plan-version", "2"]) == 0
    assert main(["plan", "-q", "--noncollab", "-o", str(baseline), "--plan-version", "1"]) == 0
    return parse_plan(collab.read_bytes()), parse_plan(baseline.read_bytes())


def test_every_host_of_a_planner_plan_converges(planner_plans):
    plan = planner_plans[0]
    assert any(host.mirrors for host in plan.hosts.values())
    for name in plan.hosts:
        desired = desired_state(plan, make_config({"host": name}))
        fake = FakeHost()
        for command in reconcile(desired, fake.observe(desired.bridge)):
            fake.apply(command)
        assert reconcile(desired, fake.observe(desired.bridge)) == []
        planned = plan.hosts[name].sflow_sampling
        assert (fake.sflow.settings.sampling if fake.sflow else None) == planned


def test_transition_from_baseline_to_collaboration(planner_plans):
    collab, baseline = planner_plans
    document = transition(baseline, collab, collab.created, settle_s=60)
    phase1, phase2 = parse_document(json.dumps(document).encode())
    assert all(not host.mirrors for host in phase1.hosts.values())  # baseline has no mirrors
    assert phase2.hosts == collab.hosts and phase2.version == collab.version + 1
