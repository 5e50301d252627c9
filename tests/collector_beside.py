"""The collector's ``Service`` in a thread of the test's process, beside a real controller on
loopback: the set-up of the controller tests against the real collector (test_attack,
test_attack_steps, test_with_collector).

The ``collector_thread`` fixture starts collectors that follow the plans published under
``publish`` (unsigned here: ``insecure_unsigned``) and stops each at the test's end, failed or
not. ``loop_settings`` is the controller reading such a collector; ``safe_plan`` the plan that
safe-state agents follow; ``send`` paces datagrams at their own times, each from the agent
address it names; ``deliver`` sends a stream and waits until the collector counted all of it;
``following`` waits until the collector's snapshots follow a plan.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for

from cosample.collector.inventory import Inventory
from cosample.collector.polling import plan_lead_s
from cosample.collector.service import Service
from cosample.collector.service import Settings as CollectorSettings
from cosample.controller.bootstrap import measurement_plan
from cosample.controller.settings import Settings
from cosample.lab.agentsource import AgentSender
from cosample.plan.document import Plan, parse_plan

#: How often the collector exports and polls its plan, and the plan fetch's timeout (seconds).
EXPORT_S, PLAN_INTERVAL_S, PLAN_TIMEOUT_S = 0.2, 0.2, 0.5


@pytest.fixture
def collector_thread():
    """``start(publish, addresses=None, *, safe_sampling=None, log=None) -> Service``."""
    running: list[tuple[Service, threading.Thread]] = []

    def start(
        publish: Path,
        addresses: Inventory | None = None,
        *,
        safe_sampling: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> Service:
        settings = CollectorSettings(
            listen=("127.0.0.1", 0),
            plan=str(publish / "plan.json"),
            name="c1",
            metrics_port=0,
            window_s=600.0,
            export_s=EXPORT_S,
            plan_interval_s=PLAN_INTERVAL_S,
            plan_timeout_s=PLAN_TIMEOUT_S,
            insecure_unsigned=True,  # plans unsigned here
            **({"safe_sampling": safe_sampling} if safe_sampling is not None else {}),
        )
        inventory = (addresses,) if addresses is not None else ()
        service = Service(settings, *inventory, log=log or (lambda line: None)).start()
        thread = threading.Thread(target=service.run, daemon=True)
        thread.start()
        running.append((service, thread))
        return service

    yield start
    for service, thread in running:
        service.stop()
        thread.join(timeout=10)


def agent_addresses(names: Iterable[str], address: Callable[[int], str]) -> Inventory:
    """The collector's inventory: server k (from 1) sends from ``address(k)``."""
    return Inventory.model_validate(
        {"servers": {name: {"agent_ip": address(k)} for k, name in enumerate(names, start=1)}}
    )


def loop_settings(service: Service, **overrides: Any) -> Settings:
    """A controller reading ``service``'s snapshot every second (``overrides`` win)."""
    host, port = service.http_address
    options: dict[str, Any] = {
        "interval_s": 1.0,
        "tau_s": 1.0,
        "max_age_s": 600.0,
        "measure_sampling": 8,
        "lead_s": plan_lead_s(EXPORT_S, PLAN_TIMEOUT_S),
    }
    return Settings((f"http://{host}:{port}/snapshot",), **(options | overrides))


def safe_plan(inventory, sampling: int, agent_ip: Callable[[int], str] | None = None) -> Plan:
    """What safe-state agents do (local 1-in-``sampling``), as a plan; ``agent_ip(k)``: server
    k's agent address in it."""
    document = measurement_plan(inventory, sampling, datetime.now(timezone.utc), timedelta(hours=1))
    if agent_ip is not None:
        for k, name in enumerate(inventory.names, start=1):
            document["hosts"][name]["agent_ip"] = agent_ip(k)
    return parse_plan(json.dumps(document | {"version": 1}).encode())


def send(datagrams, target) -> None:
    """At the pace of the datagrams' own times (the collector's rates are per second of its
    clock), each from the agent address it names (the collector admits nothing else)."""
    began, first = time.monotonic(), datagrams[0][0]
    with AgentSender() as sender:
        for moment, data in datagrams:
            delay = (moment - first) - (time.monotonic() - began)
            if delay > 0:
                time.sleep(delay)
            sender.send(data, target)


def deliver(service: Service, stream, timeout_s: float = 20.0) -> None:
    """``send`` the simulated ``stream`` and wait until the collector counted every sample."""
    send(stream.datagrams, service.listen_address)
    wait_for(
        lambda: sum(e.samples for e in service.snapshot.servers.values()) == stream.samples,
        timeout_s=timeout_s,
    )


def following(service: Service, plan: Plan, timeout_s: float = 20.0) -> None:
    """Wait until the collector's snapshots are renormalised by ``plan``."""
    wait_for(
        lambda: (
            service.snapshot is not None
            and service.snapshot.plan is not None
            and service.snapshot.plan.version == plan.version
        ),
        timeout_s=timeout_s,
    )
