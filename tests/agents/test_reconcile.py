"""The reconcile logic against the in-memory host, with hypothesis-generated plans."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.agents import commands as c
from cosample.agents.config import make_config
from cosample.agents.desired import desired_state, safe_state
from cosample.agents.fakehost import FakeHost
from cosample.agents.reconcile import find_problems, reconcile
from cosample.agents.state import OFPORT_BASE, ObservedPort
from cosample.dataplane.tcmirror import match_probability
from cosample.plan.document import plan_from_dict

HOSTS = ("h0", "h1", "h2", "h3", "h4")
DECREASES = (
    c.RemoveMirrorFilter,
    c.RemoveMirrorDevice,
    c.RemoveTunnelPort,
    c.RemoveDropFlow,
    c.RemoveSflow,
)


@st.composite
def plans(draw, version=1):
    """A consistent plan over HOSTS: random roles, sender mirrors to receivers."""
    roles = {name: draw(st.sampled_from(["sender", "receiver", "idle"])) for name in HOSTS}
    hosts = {}
    for name, role in roles.items():
        if role == "receiver":
            local, n = 1.0, 1
        elif role == "idle":
            local, n = 0.0, None
        else:
            n = draw(st.integers(2, 64))
            local = 1.0 / n
        hosts[name] = {
            "role": role,
            "local_rate": local,
            "sflow_sampling": n,
            "mirrors": [],
            "receives": [],
            "tunnel_ip": f"10.0.0.{HOSTS.index(name) + 1}",
            "bridge": "br-int",
        }
    receivers = [h for h, r in roles.items() if r == "receiver"]
    for name, role in roles.items():
        if role != "sender" or not receivers:
            continue
        targets = draw(st.lists(st.sampled_from(receivers), unique=True, max_size=3))
        budget = 1.0 - hosts[name]["local_rate"]
        for to in sorted(targets):
            rate = draw(st.floats(0.001, 0.5))
            if rate >= budget:
                continue
            budget -= rate
            hosts[name]["mirrors"].append({"to": to, "rate": rate})
            hosts[to]["receives"].append({"from": name, "rate": rate, "pps": 1.0})
    return plan_from_dict(
        {
            "format": "cosample.plan",
            "format_version": 1,
            "version": version,
            "created": "2026-11-22T10:00:00Z",
            "expires": "2026-11-22T16:00:00Z",
            "plan_id": f"id{version}",
            "sflow": {"collector": "127.0.0.1:6343"},
            "hosts": hosts,
        }
    )


def converge(host: FakeHost, desired) -> list[c.Command]:
    commands = reconcile(desired, host.observe(desired.bridge, desired.vm_ports or ()))
    for command in commands:
        host.apply(command)
    return commands


def fingerprint(host: FakeHost):
    """The host's state without identifiers that legitimately differ (row UUIDs)."""
    observed = host.observe("br-int")
    sflow = observed.sflow.settings if observed.sflow else None
    # port numbers depend on the order ports were made (like UUIDs): compare flows by port name
    names = {p.ofport: p.name for p in observed.ports}
    ports = sorted(
        (p.name, p.type, p.owned, tuple(sorted(p.options.items())), p.peer) for p in observed.ports
    )
    flows = sorted((names.get(f.in_port), f.priority, f.actions) for f in observed.flows)
    return (sflow, ports, flows, observed.links, observed.devices)


CONFIG = {name: make_config({"host": name}) for name in HOSTS}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(plan=plans(), host=st.sampled_from(HOSTS))
def test_one_pass_converges_and_second_pass_is_empty(plan, host):
    fake = FakeHost()
    desired = desired_state(plan, CONFIG[host])
    converge(fake, desired)
    assert reconcile(desired, fake.observe("br-int")) == []
    writes = fake.writes
    assert converge(fake, desired) == [] and fake.writes == writes


@SETTINGS
@given(plan=plans(), host=st.sampled_from(HOSTS))
def test_converged_state_realises_the_plan(plan, host):
    fake = FakeHost()
    converge(fake, desired_state(plan, CONFIG[host]))
    part = plan.hosts[host]
    assert (fake.sflow.settings.sampling if fake.sflow else None) == part.sflow_sampling
    for port in ("vm1", "vm2"):
        filters = sorted(fake.links[port].filters.values(), key=lambda f: f.prio)
        # the chain of conditional probabilities yields exactly the planned exclusive shares
        left, shares = 1.0, []
        for f in filters:
            q = match_probability(f.bytecode)
            shares.append(left * q)
            left *= 1 - q
        assert shares == pytest.approx([m.rate for m in part.mirrors], abs=1e-8)
        assert [fake.devices[f.target].remote_ip for f in filters] == [
            plan.hosts[m.peer].tunnel_ip for m in part.mirrors
        ]
    tunnels = [p for p in fake.ports.values() if p.owned]
    assert sorted(p.peer for p in tunnels) == sorted(r.peer for r in part.receives)
    assert sorted(f.in_port for f in fake.flows.values()) == sorted(p.ofport for p in tunnels)


@SETTINGS
@given(a=plans(version=1), b=plans(version=2), host=st.sampled_from(HOSTS))
def test_a_then_b_then_a_equals_fresh_a(a, b, host):
    fresh, moved = FakeHost(), FakeHost()
    converge(fresh, desired_state(a, CONFIG[host]))
    for plan in (a, b, a):
        converge(moved, desired_state(plan, CONFIG[host]))
    assert fingerprint(moved) == fingerprint(fresh)


def target_shares(host: FakeHost) -> dict[tuple[str, str], float]:
    """Effective mirrored share per (VM port, target device) as the chain is configured now."""
    shares = {}
    for port, link in host.links.items():
        left = 1.0
        for f in sorted(link.filters.values(), key=lambda f: f.prio):
            q = match_probability(f.bytecode)
            if f.target is not None:
                shares[port, f.target] = shares.get((port, f.target), 0.0) + left * q
            left *= 1 - q
    return shares


def load(host: FakeHost) -> tuple[float, float]:
    """(sFlow rate, largest mirrored share over VM ports) as the host is configured now."""
    sflow = 1.0 / host.sflow.settings.sampling if host.sflow else 0.0
    mirrored = []
    for link in host.links.values():
        kept = 1.0
        for f in link.filters.values():
            if f.target is not None:
                kept *= 1 - match_probability(f.bytecode)
        mirrored.append(1 - kept)
    return sflow, max(mirrored)


def valley(values: list[float]) -> bool:
    """Non-increasing up to the minimum, non-decreasing after it."""
    low = values.index(min(values))
    return all(a >= b - 1e-12 for a, b in zip(values[:low], values[1 : low + 1])) and all(
        a <= b + 1e-12 for a, b in zip(values[low:], values[low + 1 :])
    )


@SETTINGS
@given(a=plans(version=1), b=plans(version=2), host=st.sampled_from(HOSTS))
def test_decreases_come_before_increases(a, b, host):
    fake = FakeHost()
    converge(fake, desired_state(a, CONFIG[host]))
    commands = reconcile(desired_state(b, CONFIG[host]), fake.observe("br-int"))
    loads, shares = [load(fake)], [target_shares(fake)]
    for command in commands:
        fake.apply(command)
        loads.append(load(fake))
        shares.append(target_shares(fake))
    assert valley([x[0] for x in loads]) and valley([x[1] for x in loads])
    for key in set().union(*shares):  # no target ever gets more than its old or new share
        bound = max(shares[0].get(key, 0.0), shares[-1].get(key, 0.0))
        assert all(step.get(key, 0.0) <= bound + 1e-12 for step in shares), key
    removals = [isinstance(x, DECREASES) for x in commands]
    additions = [type(x).__name__.startswith("Add") for x in commands]
    assert not any(removals[i] and any(additions[:i]) for i in range(len(commands)))
    # a drop flow is added before its port and removed after it
    adds = [x for x in commands if isinstance(x, (c.AddDropFlow, c.AddTunnelPort))]
    assert [type(x) for x in adds] == sorted(
        (type(x) for x in adds), key=lambda t: t is c.AddTunnelPort
    )


@SETTINGS
@given(
    a=plans(version=1), b=plans(version=2), host=st.sampled_from(HOSTS), seed=st.integers(0, 2**16)
)
def test_crash_at_any_step_then_next_run_converges(a, b, host, seed):
    fake = FakeHost()
    converge(fake, desired_state(a, CONFIG[host]))
    desired = desired_state(b, CONFIG[host])
    commands = reconcile(desired, fake.observe("br-int"))
    for command in commands[: random.Random(seed).randint(0, len(commands))]:
        fake.apply(command)  # killed after this prefix
    converge(fake, desired)
    assert reconcile(desired, fake.observe("br-int")) == []
    fresh = FakeHost()
    converge(fresh, desired)
    assert fingerprint(fake) == fingerprint(fresh)


@SETTINGS
@given(plan=plans(), host=st.sampled_from(HOSTS))
def test_vswitchd_restart_and_recreated_interface_are_repaired(plan, host):
    fake = FakeHost()
    desired = desired_state(plan, CONFIG[host])
    converge(fake, desired)
    expected = fingerprint(fake)
    fake.restart_vswitchd()
    fake.recreate_link("vm1")
    converge(fake, desired)
    assert fingerprint(fake) == expected


def test_recreated_mirror_device_gets_its_filters_back(make_plan):
    plan = plan_from_dict(make_plan())
    fake = FakeHost()
    desired = desired_state(plan, CONFIG_S1)
    converge(fake, desired)
    device = desired.mirrors[0].device
    fake.apply(c.AddMirrorDevice(device, "s2", "10.9.9.9", 5, None, 4789))  # changed under us
    commands = converge(fake, desired)
    assert any(isinstance(x, c.AddMirrorDevice) and x.replace for x in commands)
    assert all(f.target is not None for link in fake.links.values() for f in link.filters.values())
    assert reconcile(desired, fake.observe("br-int")) == []


CONFIG_S1 = make_config({"host": "s1"})


def test_foreign_sflow_row_is_reported_and_left_alone(make_plan):
    fake = FakeHost()
    fake.add_foreign_sflow()
    desired = desired_state(plan_from_dict(make_plan()), CONFIG_S1)
    commands = converge(fake, desired)
    assert not any(isinstance(x, (c.SetSflow, c.RemoveSflow)) for x in commands)
    assert fake.sflow.uuid == "foreign-uuid"
    assert any("foreign sFlow" in p for p in find_problems(desired, fake.observe("br-int")))


def test_missing_bridge_reported_and_nothing_done(make_plan):
    fake = FakeHost(bridge_exists=False)
    desired = desired_state(plan_from_dict(make_plan()), CONFIG_S1)
    assert reconcile(desired, fake.observe("br-int")) == []
    assert "does not exist" in find_problems(desired, fake.observe("br-int"))[0]


def test_foreign_ports_flows_and_filters_are_never_touched(make_plan):
    fake = FakeHost()
    fake.ports["uplink"] = ObservedPort("uplink", "vxlan", 7, owned=False)
    desired = desired_state(plan_from_dict(make_plan()), make_config({"host": "s2"}))
    converge(fake, desired)
    converge(fake, safe_state(make_config({"host": "s2"}), plan_from_dict(make_plan())))
    assert "uplink" in fake.ports
    assert [p.name for p in fake.ports.values() if p.owned] == []
    assert fake.flows == {}


def test_tunnel_ports_get_owned_port_numbers_and_drop_flows(make_plan):
    fake = FakeHost()
    desired = desired_state(plan_from_dict(make_plan()), make_config({"host": "s2"}))
    commands = converge(fake, desired)
    assert [type(x) for x in commands[:2]] == [c.AddDropFlow, c.AddTunnelPort]
    port = next(p for p in fake.ports.values() if p.owned)
    assert port.ofport == OFPORT_BASE and port.options["remote_ip"] == "10.0.0.1"
    assert fake.flows[commands[0].cookie].in_port == OFPORT_BASE


def test_safe_state_is_sparse_sflow_and_nothing_else(make_plan):
    fake = FakeHost()
    plan = plan_from_dict(make_plan())
    converge(fake, desired_state(plan, CONFIG_S1))
    converge(fake, safe_state(CONFIG_S1, plan))
    assert fake.sflow.settings.sampling == CONFIG_S1.safe_sampling
    assert fake.devices == {} and all(not link.filters for link in fake.links.values())


def test_sflow_rate_decrease_is_an_update_in_place(make_plan):
    fake = FakeHost()
    converge(fake, desired_state(plan_from_dict(make_plan()), CONFIG_S1))
    uuid = fake.sflow.uuid
    commands = converge(
        fake, desired_state(plan_from_dict(make_plan(version=101, sampling=20)), CONFIG_S1)
    )
    assert commands == [c.SetSflow("br-int", fake.sflow.settings, uuid)]
    assert fake.sflow.uuid == uuid and fake.sflow.settings.sampling == 20
