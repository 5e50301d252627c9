"""Apply a plan to every emulated server with the real agents, as an operator would.

Each server's agent runs once inside that server's network namespace (where its tc filters,
mirror devices and routes live), against that server's private OVSDB, with its own state
directory: ``cosample agent apply --once --host NAME --plan PATH --ovsdb unix:SOCKET
--state-dir DIR``. Receivers go first, so that their tunnel ports exist before senders start
mirroring to them. ``run`` removes every agent's state between phases, so each plan starts from
a clean switch and no transition between plans is exercised here (the agents' own tests do
that). ``remove`` asks each agent to delete everything it owns.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cosample.dataplane.run import CommandError, run
from cosample.experiments.testbed.errors import TestbedError

AGENT_TIMEOUT_S = 60.0


def agent_argv(testbed, server, action: str, *extra: str) -> list[str]:
    """``cosample agent ACTION`` for ``server``, run in its namespace (argv, no shell)."""
    ovs = testbed.ovs(server)
    return [
        "ip",
        "netns",
        "exec",
        server.namespace,
        sys.executable,
        "-m",
        "cosample",
        "agent",
        action,
        "--host",
        server.name,
        "--ovsdb",
        ovs.remote,
        "--state-dir",
        str(agent_state_dir(testbed, server)),
        "--bridge",
        server.bridge,
        *[arg for vm in server.vms for arg in ("--vm-port", vm.port)],
        # unless a key is given, plans are files the testbed itself wrote a moment ago
        *([] if "--public-key" in extra else ["--insecure-unsigned"]),
        *extra,
    ]


def agent_state_dir(testbed, server) -> Path:
    return testbed.state_dir / f"agent-{server.name}"


def apply_plan(testbed, plan_path: Path, plan: Mapping[str, Any]) -> dict[str, str]:
    """Apply ``plan_path`` on every server; returns each agent's output. Fails on the first error.

    An agent that rejects a plan keeps its last good one (or its safe state) and exits 2; the
    agent's ``status.json`` must also show this plan's version in ``plan`` mode.
    """
    outputs = {}
    for server in _ordered(testbed.topology.servers, plan):
        agent_state_dir(testbed, server).mkdir(parents=True, exist_ok=True)
        argv = agent_argv(testbed, server, "apply", "--once", "--plan", str(plan_path))
        outputs[server.name] = _run_agent(server.name, argv)
        check_applied(
            server.name, agent_state_dir(testbed, server) / "status.json", int(plan["version"])
        )
    return outputs


def check_applied(name: str, status_path: Path, version: int) -> None:
    """A ``TestbedError`` unless the agent's status says it runs plan ``version`` without errors."""
    try:
        status = json.loads(status_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TestbedError(f"agent of {name}: no readable status at {status_path}: {exc}") from exc
    errors = status.get("errors") or []
    if status.get("mode") != "plan" or status.get("plan_version") != version or errors:
        detail = "; ".join(map(str, errors)) or status.get("reason", "no reason given")
        raise TestbedError(
            f"agent of {name} did not apply plan version {version} "
            f"(mode {status.get('mode')!r}, version {status.get('plan_version')!r}): "
            f"{detail}"
        )


def remove_all(testbed) -> dict[str, str]:
    """Ask every server's agent to remove what it owns (sFlow row, mirrors, tunnel ports)."""
    outputs = {}
    for server in testbed.topology.servers:
        agent_state_dir(testbed, server).mkdir(parents=True, exist_ok=True)
        outputs[server.name] = _run_agent(server.name, agent_argv(testbed, server, "remove"))
    return outputs


def agents_available() -> str | None:
    """None when ``cosample agent apply`` exists, else why the testbed cannot drive agents."""
    try:
        result = run(
            [sys.executable, "-m", "cosample", "agent", "apply", "--help"], check=False, timeout=30
        )
    except CommandError as exc:
        return str(exc)
    if result.returncode != 0:
        return "`cosample agent apply` is not available: " + (
            result.stderr.strip()[-200:] or f"exit {result.returncode}"
        )
    return None


def _ordered(servers, plan: Mapping[str, Any]):
    """Receivers first, then the others, each group in server order."""
    hosts = plan.get("hosts", {})
    return sorted(servers, key=lambda s: (hosts.get(s.name, {}).get("role") != "receiver", s.index))


def _run_agent(name: str, argv: list[str]) -> str:
    try:
        result = run(argv, timeout=AGENT_TIMEOUT_S, check=False)
    except CommandError as exc:
        raise TestbedError(f"agent of {name}: {exc}") from exc
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise TestbedError(
            f"agent of {name}: exit {result.returncode}: {detail[-1] if detail else 'no output'}"
        )
    return result.stdout
