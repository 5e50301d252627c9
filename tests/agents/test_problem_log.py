"""What the agent writes in its log: no plan, a plan it cannot read or refuses, the safe state:
one WARNING line each when it starts, however many cycles it lasts (cosample/statelog.py)."""

from __future__ import annotations

import logging

from cosample.agents.fakehost import FakeHost
from cosample.agents.runner import Agent


def warnings(caplog, logger: str) -> list[str]:
    """The warnings, less the one an agent accepting unsigned plans repeats on purpose every
    cycle (a lab setting that must stay loud: docs/agents.md)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == logger and r.levelname == "WARNING" and "INSECURE" not in r.getMessage()
    ]


def test_an_agent_without_its_plan_warns_once(tmp_path, config_for, caplog):
    config = config_for("s1", plan=str(tmp_path / "plan.json"))  # not there
    agent = Agent(config, FakeHost())
    with caplog.at_level(logging.INFO, logger="cosample.agents"):
        for _ in range(4):
            assert agent.cycle().mode == "safe"
    said = warnings(caplog, "cosample.agents")
    assert len(said) == 2, said  # the plan cannot be read, and so the host is in its safe state
    assert any("plan.json" in line for line in said)
    assert any(line.startswith("safe state") for line in said)
