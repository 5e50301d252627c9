"""The agents' real-OVS sandbox, shared by test_sandbox and test_hardening (tests/ is on sys.path).

A private ovsdb-server + ``ovs-vswitchd --enable-dummy`` with bridge ``cabr1`` holding two VM
ports ``VM_PORTS`` (veth pairs in the root namespace, so tc filters and VXLAN devices are
real; that part needs root and is skipped otherwise), an agent configuration for host s1 and a
plan file to write. The root-namespace names (the VM ports, the agent's mirror devices
``DEVICE_PREFIX-*``) carry this process's run tag (``cosample.lab.names``), so two runs or
two pytest-xdist workers never share them.
"""

from __future__ import annotations

import json

import pytest

from cosample.agents.runner import Agent
from cosample.dataplane.run import run
from cosample.lab.names import run_prefix, run_tag
from cosample.lab.netns import netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

#: the start of every root-namespace link of the sandbox (and of the tests' extra ones)
PORT_PREFIX = run_prefix("ca")
BRIDGE, VM_PORTS = "cabr1", (f"{PORT_PREFIX}V1", f"{PORT_PREFIX}V2")
DEVICE_PREFIX = f"m{run_tag()}"


def _delete_links(names):
    for name in names:
        run(["ip", "link", "del", name], check=False)


def _our_vxlan_devices():
    links = json.loads(run(["ip", "-j", "link", "show", "type", "vxlan"]).stdout or "[]")
    return [link["ifname"] for link in links if link["ifname"].startswith(f"{DEVICE_PREFIX}-")]


@pytest.fixture
def root_links():
    reason = netns_available()
    if reason:
        pytest.skip(f"mirrors need real interfaces for tc: {reason}")
    _delete_links(VM_PORTS)
    for name in VM_PORTS:
        run(["ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p"])
        run(["ip", "link", "set", name, "up"])
    yield VM_PORTS
    _delete_links(VM_PORTS)
    _delete_links(_our_vxlan_devices())


@pytest.fixture
def sandbox(tmp_path, root_links, make_plan, to_bytes):
    """(ovs, config path, plan path, write_plan) with bridge cabr1 holding the VM ports."""
    reason = ovs_available()
    if reason:
        pytest.skip(reason)
    with OvsInstance(tmp_path / "ovs", dummy=True) as ovs:
        ovs.vsctl("add-br", BRIDGE, "--", "set", "Bridge", BRIDGE, "datapath_type=dummy")
        for name in VM_PORTS:
            ovs.vsctl("add-port", BRIDGE, name)
        plan_path = tmp_path / "plan.json"
        config_path = tmp_path / "agent.toml"
        config_path.write_text(
            f'host = "s1"\nplan = "{plan_path}"\novsdb = "{ovs.remote}"\nbridge = "{BRIDGE}"\n'
            f'state_dir = "{tmp_path / "state"}"\nmirror_device_prefix = "{DEVICE_PREFIX}"\n'
            f'tunnel_port_prefix = "car"\ntimeout_s = 3\njitter_s = 0\n'
            f"insecure_unsigned = true\n"
        )

        def write_plan(document):
            plan_path.write_bytes(to_bytes(document))

        yield ovs, config_path, plan_path, write_plan


def agent(config_path, clock=None, **overrides) -> Agent:
    from cosample.agents.config import load_config
    from cosample.times import utcnow

    return Agent(load_config(str(config_path), overrides), clock=clock or utcnow)


def fingerprint(a: Agent):
    """Everything the agent could have touched, without UUIDs and port numbers."""
    observed = a.host.observe(BRIDGE, VM_PORTS)
    names = {p.ofport: p.name for p in observed.ports}
    return (
        observed.sflow.settings if observed.sflow else None,
        observed.sflow.owned if observed.sflow else None,
        sorted(
            (p.name, p.type, p.owned, tuple(sorted(p.options.items())), p.peer)
            for p in observed.ports
        ),
        sorted((names.get(f.in_port), f.priority, f.actions) for f in observed.flows),
        observed.links,
        observed.devices,
    )


def receiver_plan(make_plan, version):
    """s1 becomes a receiver of s2's traffic (the other plan has s1 as the sender)."""
    doc = make_plan(version=version, sender_mirrors=())
    doc["hosts"]["s2"].update(
        role="sender", local_rate=0.25, sflow_sampling=4, mirrors=[{"to": "s1", "rate": 0.5}]
    )
    doc["hosts"]["s1"].update(
        role="receiver",
        local_rate=1.0,
        sflow_sampling=1,
        mirrors=[],
        receives=[{"from": "s2", "rate": 0.5, "pps": 1.0}],
    )
    return doc
