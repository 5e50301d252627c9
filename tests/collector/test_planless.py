"""Attribution before any plan exists: the agents sample in their safe state (local 1-in-N, no
mirrors) and the collector knows their addresses from its inventory (``agent_ip``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from collector_plans import plan_document
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from cosample.collector.attribution import LOCAL, Source, planless
from cosample.collector.errors import CollectorError
from cosample.collector.estimate import Estimator
from cosample.collector.inventory import Inventory, read_inventory
from cosample.collector.planwatch import PlanWatcher
from cosample.lab.sflowstream import OVERLAY_VNI, simulate
from cosample.plan.document import parse_plan

TRUTH = {"s1": 60_000, "s2": 2_000, "s3": 3_000, "s4": 30_000}


def agents(names, **extra) -> Inventory:
    """The address inventory: agent k is 172.29.0.k (``plan_document``'s tunnel addresses)."""
    return Inventory.model_validate(
        {
            "servers": {
                name: {"agent_ip": f"172.29.0.{k + 1}", **extra.get(name, {})}
                for k, name in enumerate(sorted(names))
            }
        }
    )


def safe_plan(rates: dict[str, int]):
    """What the agents do without a plan, as a plan the stream simulator understands."""
    return parse_plan(json.dumps(plan_document({n: (r, {}) for n, r in rates.items()})).encode())


def test_verdicts_without_a_plan():
    table = planless(agents(["s1", "s2"]))
    assert table.plan_version is None and table.plan_id is None and not table.mirrors
    assert table.source("172.29.0.1", None, None) == Source("s1", LOCAL)
    assert table.source("172.29.0.9", None, None) == "unknown_agent"
    # tenant overlay from another agent: sampled at its sender, not counted twice
    assert table.source("172.29.0.2", OVERLAY_VNI, "172.29.0.1") == "overlay_ingress"
    assert table.source("172.29.0.2", OVERLAY_VNI, "192.0.2.1") == "unknown_tunnel"
    assert table.rates("s1") == (0.0, 0.0)  # no plan: only what the agent reports counts
    assert table.coverage("s1", {"172.29.0.1": 128}) == pytest.approx(1 / 128)


def test_no_agent_addresses_no_planless_attribution():
    assert planless(None) is None
    assert planless(Inventory.model_validate({"servers": {"s1": {"vm_addresses": []}}})) is None


def test_an_agent_address_given_to_two_servers_is_one_clear_error(tmp_path):
    path = tmp_path / "addresses.json"
    path.write_text(
        json.dumps(
            {
                "format": "cosample.addresses",
                "servers": {"s1": {"agent_ip": "10.0.0.1"}, "s2": {"agent_ip": "10.0.0.1"}},
            }
        )
    )
    with pytest.raises(
        CollectorError, match="servers.s2: agent_ip 10.0.0.1 is also the agent of s1"
    ):
        read_inventory(path)


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rates=st.fixed_dictionaries(
        {n: st.sampled_from([1, 2, 16, 128, 4096]) for n in ("s1", "s2", "s3")}
    ),
    packets=st.fixed_dictionaries({n: st.integers(0, 20_000) for n in ("s1", "s2", "s3")}),
    silent=st.sampled_from([None, "s1", "s3"]),
    seed=st.integers(0, 2**16),
)
def test_each_local_sample_weighs_the_one_in_n_its_agent_reports(rates, packets, silent, seed):
    sent = {n: (0 if n == silent else p) for n, p in packets.items()}
    stream = simulate(safe_plan(rates), sent, duration_s=5.0, seed=seed)
    estimator = Estimator(planless(agents(rates)), window_s=None)
    for when, data in stream.datagrams:
        estimator.ingest(data, when)
    snapshot = estimator.snapshot()
    assert snapshot.plan is None and snapshot.dropped == {}
    assert sorted(snapshot.servers) == ["s1", "s2", "s3"]  # every agent of the inventory
    for name, rate in rates.items():
        e = snapshot.servers[name]
        assert e.mirrored_samples == 0
        assert e.packets_per_s * snapshot.window_s == pytest.approx(e.local_samples * rate)
        heard = e.local_samples > 0
        assert e.coverage == (pytest.approx(1 / rate) if heard else 0.0)
        if rate == 1:
            assert e.local_samples == sent[name]


def test_planless_estimates_fall_within_their_intervals():
    rates = {"s1": 128, "s2": 16, "s3": 32, "s4": 64}
    stream = simulate(safe_plan(rates), TRUTH, duration_s=10.0, seed=5)
    estimator = Estimator(planless(agents(rates)), window_s=None)
    for when, data in stream.datagrams:
        estimator.ingest(data, when)
    snapshot = estimator.snapshot()
    for name, packets in TRUTH.items():
        low, high = (b * snapshot.window_s for b in snapshot.servers[name].packets_per_s_ci95)
        assert low <= packets <= high, (name, low, packets, high)


def test_watcher_is_planless_until_a_plan_is_in_force(tmp_path):
    path = tmp_path / "plan.json"
    watcher = PlanWatcher(str(path), agents(["s1", "s2"]), insecure_unsigned=True)
    now = datetime.now(timezone.utc)
    first = watcher.poll(now)  # nothing published yet
    assert first is not None and first.attribution.plan_id is None and watcher.planless
    assert watcher.errors == 1 and "plan" in watcher.last_error
    assert watcher.poll(now) is None  # still plan-less: nothing new
    path.write_text(json.dumps(plan_document({"s1": (4, {}), "s2": (8, {})}, version=9)))
    update = watcher.poll(now)
    assert update.attribution.plan_version == 9 and not watcher.planless
    path.write_text("{broken")
    assert watcher.poll(now) is None and watcher.running.version == 9  # never back to plan-less
    # no agent addresses: nothing
    assert PlanWatcher(str(path), None, insecure_unsigned=True).poll(now) is None


def test_replay_without_a_plan_names_agents_by_the_inventory_or_their_address(tmp_path):
    """The agents a capture holds are servers: the inventory's name where its ``agent_ip`` is
    the agent's address (validated through the model), else the address itself."""
    from sflow_corpus import CORPUS, template

    from cosample.collector.pcap import udp_payloads, write_pcap
    from cosample.collector.replay import replay

    names = ("data-1140.pcap", "data-qinq.pcap")
    capture = write_pcap(
        tmp_path / "two.pcap", [item for name in names for item in udp_payloads(CORPUS / name)]
    )
    first, second = (template(name).agent for name in names)
    named = Inventory.model_validate({"servers": {"edge1": {"agent_ip": first}}})
    assert sorted(replay(None, capture, inventory=named).servers) == sorted(["edge1", second])
    assert sorted(replay(None, capture).servers) == sorted([first, second])
