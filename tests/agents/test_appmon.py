"""Application-monitoring mechanisms: the plan section, the desired state, reconcile against the
fake host (the real OVS test is test_appmon_dataplane.py)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys

import pytest

from cosample.agents import appmon_reconcile as a
from cosample.agents.appmon_state import (
    APPMON_COOKIE_TAG,
    ISOLATION_VLAN,
    bpf_filter,
    desired_appmon,
)
from cosample.agents.desired import desired_state
from cosample.agents.errors import HostError
from cosample.agents.fakehost import FakeHost
from cosample.agents.hoststate import DesiredState
from cosample.agents.reconcile import find_problems, reconcile
from cosample.agents.report import summarise
from cosample.dataplane.tunnels import RECORD_PORT, appmon_vni, pair_vni
from cosample.plan.document import content_digest, plan_from_dict
from cosample.plan.errors import PlanError

SERVICE = {"address": "10.0.0.12", "port": 8080}


def with_appmon(make_plan, *entries, host="s1"):
    doc = make_plan()
    doc["hosts"][host]["appmon"] = [copy.deepcopy(e) for e in entries]
    return doc


def selective(**extra):
    return {"service": SERVICE, "mechanism": "selective_mirror", "to": "s4", **extra}


def port_mirror(**extra):
    return {"service": SERVICE, "mechanism": "port_mirror", "to": "s4", "interface": "vm2", **extra}


def converge(host: FakeHost, desired: DesiredState) -> list:
    applied = []
    for _ in range(3):
        commands = reconcile(desired, host.observe(desired.bridge, desired.vm_ports or ()))
        if not commands:
            return applied
        for command in commands:
            host.apply(command)
        applied += commands
    raise AssertionError(f"no convergence: {commands}")


# plan format -----------------------------------------------------------------------------------
def test_a_plan_without_appmon_reads_as_before(make_plan):
    doc = make_plan()
    before = json.dumps(doc, sort_keys=True)
    plan = plan_from_dict(doc)
    assert all(host.appmon == () for host in plan.hosts.values())
    assert json.dumps(plan.raw, sort_keys=True) == before
    assert plan.digest == content_digest(json.loads(before))


@pytest.mark.parametrize(
    "change, where",
    [
        ({"to": "s1"}, "hosts.s1.appmon[0].to"),
        ({"to": "s9"}, "hosts.s1.appmon[0].to"),
        ({"to": None}, "hosts.s1.appmon[0].to"),
        ({"truncate_bytes": 13}, "hosts.s1.appmon[0].truncate_bytes"),
        ({"truncate_bytes": "64"}, "hosts.s1.appmon[0].truncate_bytes"),
        ({"interface": "vm1"}, "hosts.s1.appmon[0].interface"),
        ({"segments": "some"}, "hosts.s1.appmon[0].segments"),
        ({"mechanism": "tap"}, "hosts.s1.appmon[0].mechanism"),
        ({"service": {"address": "web", "port": 80}}, "hosts.s1.appmon[0].service.address"),
        ({"service": {"address": "10.0.0.1", "port": 0}}, "hosts.s1.appmon[0].service.port"),
        ({"service": {**SERVICE, "protocol": "smtp"}}, "hosts.s1.appmon[0].service.protocol"),
        ({"trunc": 64}, "hosts.s1.appmon[0].trunc"),
    ],
)
def test_bad_entries_are_refused_naming_the_field(make_plan, change, where):
    doc = with_appmon(make_plan, {**selective(), **change})
    with pytest.raises(PlanError, match="^" + re.escape(f"plan.json: {where}: ")):
        plan_from_dict(doc, "plan.json")


@pytest.mark.parametrize(
    "entry, where",
    [
        (port_mirror(segments="psh"), "segments"),
        ({**port_mirror(), "interface": None}, "interface"),
        ({"service": SERVICE, "mechanism": "sniffer"}, "interface"),
    ],
)
def test_mechanism_specific_fields(make_plan, entry, where):
    with pytest.raises(PlanError, match=re.escape(f"hosts.s1.appmon[0].{where}: ")):
        plan_from_dict(with_appmon(make_plan, entry), "plan.json")


def test_duplicates_and_two_snaplens_to_one_host_are_refused(make_plan):
    with pytest.raises(PlanError, match=r"appmon\[1\]: same service"):
        plan_from_dict(with_appmon(make_plan, selective(), selective()))
    other = {**port_mirror(truncate_bytes=128), "service": {**SERVICE, "port": 81}}
    with pytest.raises(PlanError, match=r"appmon\[1\]\.truncate_bytes: port mirrors to s4"):
        plan_from_dict(with_appmon(make_plan, port_mirror(), other))


# desired ---------------------------------------------------------------------------------------
def test_selective_flows_match_both_directions_with_psh(make_plan, config_for):
    plan = plan_from_dict(with_appmon(make_plan, selective(truncate_bytes=96)))
    desired = desired_state(plan, config_for("s1")).appmon
    (device,) = desired.devices
    assert (device.peer, device.remote_ip, device.local_ip, device.attach) == (
        "s4",
        "10.0.0.4",
        "10.0.0.1",
        True,
    )
    assert device.vni == appmon_vni("s1", "s4") != pair_vni("s1", "s4")
    (rule,) = desired.rules
    assert rule.cookie & APPMON_COOKIE_TAG == APPMON_COOKIE_TAG and rule.max_len == 96
    assert sorted(match for _, match in rule.matches) == [
        "tcp,nw_dst=10.0.0.12,tp_dst=8080,tcp_flags=+psh",
        "tcp,nw_src=10.0.0.12,tp_src=8080,tcp_flags=+psh",
    ]
    assert desired.mirrors == ()


@pytest.mark.parametrize("segments, flows", [("psh", 2), ("psh+ends", 6), ("all", 2)])
def test_segments_choose_the_flags(make_plan, config_for, segments, flows):
    plan = plan_from_dict(with_appmon(make_plan, selective(segments=segments)))
    (rule,) = desired_state(plan, config_for("s1")).appmon.rules
    assert len(rule.matches) == flows
    assert all(("tcp_flags" in m) == (segments != "all") for _, m in rule.matches)
    assert len({p for p, _ in rule.matches}) == (3 if segments == "psh+ends" else 1)


def test_ipv6_service(make_plan, config_for):
    entry = selective(service={"address": "fd00::c", "port": 80})
    plan = plan_from_dict(with_appmon(make_plan, entry))
    (rule,) = desired_state(plan, config_for("s1")).appmon.rules
    assert {m for _, m in rule.matches} == {
        "tcp6,ipv6_dst=fd00::c,tp_dst=80,tcp_flags=+psh",
        "tcp6,ipv6_src=fd00::c,tp_src=80,tcp_flags=+psh",
    }


def test_the_analysis_host_gets_a_receive_device_and_the_spec(make_plan, config_for):
    plan = plan_from_dict(with_appmon(make_plan, selective(truncate_bytes=128), port_mirror()))
    desired = desired_state(plan, config_for("s4")).appmon
    (device,) = desired.devices
    assert (device.peer, device.attach, device.vni) == ("s1", False, appmon_vni("s1", "s4"))
    assert [item["mechanism"] for item in desired.spec] == ["selective_mirror", "port_mirror"]
    assert {item["interface"] for item in desired.spec} == {device.name}
    assert desired.spec[0]["snaplen"] == 128 and desired.spec[0]["from"] == "s1"
    assert "appmon" in summarise(desired_state(plan, config_for("s4")))
    assert "appmon" not in summarise(desired_state(plan, config_for("s2")))


def test_the_sniffer_changes_nothing_on_the_switch(make_plan, config_for):
    entry = {"service": SERVICE, "mechanism": "sniffer", "interface": "vm2", "truncate_bytes": 200}
    plan = plan_from_dict(with_appmon(make_plan, entry))
    desired = desired_state(plan, config_for("s1")).appmon
    assert (desired.devices, desired.rules, desired.mirrors) == ((), (), ())
    (item,) = desired.spec
    assert (item["interface"], item["snaplen"], item["send_to"]) == ("vm2", 200, None)
    assert item["bpf"] == (
        "tcp and ((src host 10.0.0.12 and src port 8080) or (dst host "
        "10.0.0.12 and dst port 8080)) and (tcp[tcpflags] & (tcp-push) != 0)"
    )


def test_refusals_in_the_plan(make_plan, config_for):
    doc = with_appmon(make_plan, selective(), {**selective(), "to": "s2"})
    with pytest.raises(PlanError, match=r"appmon\[1\]: a second selective mirror"):
        desired_state(plan_from_dict(doc), config_for("s1"))
    doc = with_appmon(make_plan, selective())
    del doc["hosts"]["s4"]["tunnel_ip"]
    with pytest.raises(PlanError, match=r"hosts\.s4\.tunnel_ip: required"):
        desired_state(plan_from_dict(doc), config_for("s1"))


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump (Debian package) absent")
@pytest.mark.parametrize("address", ["10.0.0.12", "fd00::c"])
@pytest.mark.parametrize("segments", ["psh", "psh+ends", "all"])
def test_bpf_filters_compile(address, segments):
    result = subprocess.run(
        ["tcpdump", "-d", bpf_filter(address, 8080, segments)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 0, result.stderr


# reconcile with the fake host ------------------------------------------------------------------
def test_selective_mirror_converges_and_is_removed(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    desired = desired_state(
        plan_from_dict(with_appmon(make_plan, selective(truncate_bytes=64))), config_for("s1")
    )
    applied = converge(host, desired)
    assert [type(x) for x in applied if isinstance(x, a.APPMON_COMMANDS)] == [
        a.AddAppmonDevice,
        a.AddAppmonPort,
        a.SetAppmonFlows,
        a.SetAppmonFlows,
    ]
    (port,) = host.appmon.ports.values()
    assert port.tag == ISOLATION_VLAN  # NORMAL never floods to it
    flows = set().union(*host.appmon.flows.values())
    assert f"priority=40000,in_port={port.ofport} actions=drop" in flows
    assert (
        f"priority=40102,tcp,nw_dst=10.0.0.12,tp_dst=8080,tcp_flags=+psh actions="
        f"output(port={port.ofport},max_len=64),NORMAL" in flows
    )
    assert reconcile(desired, host.observe("br-int")) == []
    host.restart_vswitchd()
    assert {type(x) for x in converge(host, desired)} >= {a.SetAppmonFlows}
    converge(host, DesiredState(bridge="br-int", sflow=None, vm_ports=(), mode="removed"))
    assert (host.appmon.devices, host.appmon.ports, host.appmon.flows) == ({}, {}, {})


def test_port_mirror_unisolates_after_the_mirror_and_back(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    both = desired_state(
        plan_from_dict(with_appmon(make_plan, selective(), port_mirror(truncate_bytes=100))),
        config_for("s1"),
    )
    applied = [x for x in converge(host, both) if isinstance(x, a.APPMON_COMMANDS)]
    kinds = [type(x) for x in applied]
    assert kinds.index(a.SetAppmonMirror) < kinds.index(a.SetAppmonPortTag)
    (mirror,) = host.appmon.mirrors.values()
    assert (mirror.src, mirror.snaplen) == (frozenset({"vm2"}), 100)
    assert next(iter(host.appmon.ports.values())).tag is None
    only_flows = desired_state(
        plan_from_dict(with_appmon(make_plan, selective())), config_for("s1")
    )
    applied = [x for x in converge(host, only_flows) if isinstance(x, a.APPMON_COMMANDS)]
    assert [type(x) for x in applied] == [a.SetAppmonPortTag, a.RemoveAppmonMirror]
    assert next(iter(host.appmon.ports.values())).tag == ISOLATION_VLAN
    assert host.appmon.mirrors == {}


def test_plan_changes_a_to_b_to_a(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    plan_a = desired_state(plan_from_dict(with_appmon(make_plan, selective())), config_for("s1"))
    plan_b = desired_state(
        plan_from_dict(with_appmon(make_plan, {**selective(truncate_bytes=80), "to": "s2"})),
        config_for("s1"),
    )
    converge(host, plan_a)
    fresh = copy.deepcopy((host.appmon.devices, host.appmon.flows))
    converge(host, plan_b)
    assert {p.peer for p in host.appmon.ports.values()} == {"s2"}
    converge(host, plan_a)
    assert (host.appmon.devices, host.appmon.flows) == fresh


def test_no_truncation_on_this_datapath_is_refused(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    host.appmon.truncate = False
    desired = desired_state(
        plan_from_dict(with_appmon(make_plan, selective(truncate_bytes=64))), config_for("s1")
    )
    with pytest.raises(HostError, match="no truncate action"):
        converge(host, desired)


def test_port_mirror_of_a_port_not_on_the_bridge_is_refused(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1",))
    desired = desired_state(plan_from_dict(with_appmon(make_plan, port_mirror())), config_for("s1"))
    with pytest.raises(HostError, match="vm2"):
        converge(host, desired)


def test_a_foreign_interface_with_the_devices_name_is_reported_and_left(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    desired = desired_state(plan_from_dict(with_appmon(make_plan, selective())), config_for("s1"))
    (device,) = desired.appmon.devices
    host.appmon.foreign.add(device.name)
    converge(host, desired)
    assert host.appmon.devices == {} and host.appmon.flows == {}
    problems = find_problems(desired, host.observe("br-int"))
    assert any(device.name in p and "not the agent's" in p for p in problems)


def test_appmon_spec_cli(make_plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps(
            with_appmon(
                make_plan,
                port_mirror(truncate_bytes=100),
                {
                    "service": {"address": "10.0.0.13", "port": 80},
                    "mechanism": "sniffer",
                    "interface": "vm1",
                    "to": "s4",
                },
            )
        )
    )
    argv = [sys.executable, "-m", "cosample", "agent", "appmon-spec", "--plan", str(path)]
    spec = {}
    for host in ("s1", "s4"):
        result = subprocess.run([*argv, "--host", host], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        spec[host] = json.loads(result.stdout)["analyser"]
    assert [(i["mechanism"], i["interface"], i["send_to"]) for i in spec["s1"]] == [
        ("sniffer", "vm1", "s4")
    ]
    assert [(i["mechanism"], i["snaplen"], i["from"]) for i in spec["s4"]] == [
        ("port_mirror", 100, "s1"),
        ("sniffer", None, "s1"),
    ]
    # the sniffer sends its compact records to s4's tunnel address, where s4's analyser listens
    plan = json.loads(path.read_text())
    endpoint = f"{plan['hosts']['s4']['tunnel_ip']}:{RECORD_PORT}"
    assert spec["s1"][0]["send_records"] == endpoint
    assert (spec["s4"][1]["interface"], spec["s4"][1]["receive_records"]) == (None, endpoint)
    assert "send_records" not in spec["s4"][0] and "receive_records" not in spec["s1"][0]
    # records are taken only from the sender's tunnel address, which it sends from
    sender_ip = plan["hosts"]["s1"]["tunnel_ip"]
    assert spec["s1"][0]["send_records_from"] == spec["s4"][1]["records_from"] == sender_ip
    result = subprocess.run([*argv, "--host", "s9"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "s9" in result.stderr


def test_vni_collision_with_sflow_tunnels_is_refused(make_plan):
    plan = plan_from_dict(with_appmon(make_plan, selective()))
    with pytest.raises(PlanError, match="collide"):
        desired_appmon(plan, plan.hosts["s1"], sflow_vnis=(appmon_vni("s1", "s4"),))


def test_a_transition_adds_application_mirrors_only_in_its_second_phase(make_plan, now):
    from cosample.plan.transition import plan_set

    kept, dropped, added = (
        selective(),
        port_mirror(),
        {**selective(), "service": {"address": "10.0.0.13", "port": 80}},
    )
    old = with_appmon(make_plan, kept, dropped)
    new = with_appmon(make_plan, kept, added)
    new["version"] = old["version"] + 1
    phases = plan_set(
        old, new, old["version"], new["version"], plan_from_dict(new).expires, now, 120.0
    )["plans"]
    assert phases[0]["hosts"]["s1"]["appmon"] == [kept]
    assert phases[1]["hosts"]["s1"]["appmon"] == [kept, added]
    assert "appmon" not in phases[0]["hosts"]["s2"]  # plans without the section stay so
    plain = plan_set(make_plan(), make_plan(), 1, 2, plan_from_dict(new).expires, now, 120.0)
    assert all("appmon" not in host for p in plain["plans"] for host in p["hosts"].values())


def test_a_port_mirror_of_the_underlay_port_is_refused(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    host.appmon.underlay = {"vm2"}
    desired = desired_state(plan_from_dict(with_appmon(make_plan, port_mirror())), config_for("s1"))
    with pytest.raises(HostError, match="route to the analysis host"):
        converge(host, desired)


def test_each_protocol_copies_what_it_needs(make_plan):
    """HTTP/1.x messages start segments and end with PSH; HTTP/2 frames and TLS records start
    anywhere in a segment: their mirrors copy every segment unless the entry says otherwise."""
    entries = [
        selective(service={**SERVICE, "port": port, "protocol": protocol})
        for port, protocol in ((8080, "http"), (8081, "h2c"), (8443, "tls"), (8444, "h2"))
    ]
    entries.append(selective(service={**SERVICE, "port": 9443, "protocol": "tls"}, segments="psh"))
    plan = plan_from_dict(with_appmon(make_plan, *entries))
    segments = {e.service.port: e.copied_segments for e in plan.hosts["s1"].appmon}
    assert segments == {8080: "psh", 8081: "all", 8443: "all", 8444: "all", 9443: "psh"}
    assert plan_from_dict(
        with_appmon(make_plan, selective(service={**SERVICE, "protocol": "tls"}, truncate_bytes=96))
    )  # a TLS record header at each segment's start is enough: truncation is allowed


@pytest.mark.parametrize(
    "change, where",
    [({"truncate_bytes": 96}, "truncate_bytes"), ({"segments": "psh"}, "segments")],
)
def test_h2c_needs_every_segment_whole(make_plan, change, where):
    entry = selective(service={**SERVICE, "protocol": "h2c"}, **change)
    with pytest.raises(PlanError, match=re.escape(f"hosts.s1.appmon[0].{where}: a h2c service")):
        plan_from_dict(with_appmon(make_plan, entry), "plan.json")
