"""The kernel mirror (``kernel_mirror``) in the agent: desired filters, reconcile against the
fake host beside the sFlow mirror chain (the real one: test_appmon_dataplane.py)."""

from __future__ import annotations

import copy

from cosample.agents import appmon_reconcile as a
from cosample.agents import commands as c
from cosample.agents.appmon_state import bpf_filter
from cosample.agents.desired import desired_state
from cosample.agents.fakehost import FakeHost
from cosample.agents.hoststate import DesiredState
from cosample.agents.reconcile import find_problems, reconcile
from cosample.agents.state import PRIO_BASE, ObservedKernelFilter
from cosample.dataplane.tcmirror import (
    KERNEL_MIRROR_COOKIE_TAG,
    KERNEL_MIRROR_PRIO_BASE,
    KERNEL_MIRROR_PRIO_COUNT,
    selective_filter_argv,
)
from cosample.plan.document import plan_from_dict

SERVICE = {"address": "10.0.0.12", "port": 8080}


def kernel(**extra):
    return {
        "service": SERVICE,
        "mechanism": "kernel_mirror",
        "to": "s4",
        "interface": "vm2",
        **extra,
    }


def desired(make_plan, config_for, *entries) -> DesiredState:
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [copy.deepcopy(e) for e in entries]
    return desired_state(plan_from_dict(doc), config_for("s1"))


def converge(host: FakeHost, want: DesiredState) -> list:
    applied = []
    for _ in range(3):
        commands = reconcile(
            want, host.observe(want.bridge, (*(want.vm_ports or ()), "vm1", "vm2"))
        )
        if not commands:
            return applied
        for command in commands:
            host.apply(command)
        applied += commands
    raise AssertionError(f"no convergence: {commands}")


def test_its_range_is_its_own_and_tried_before_the_sflow_chain():
    assert KERNEL_MIRROR_PRIO_BASE + KERNEL_MIRROR_PRIO_COUNT <= PRIO_BASE


def test_both_hooks_get_the_sniffers_filter_toward_the_tunnel(make_plan, config_for):
    want = desired(make_plan, config_for, kernel(share=0.25)).appmon
    (device,) = [d for d in want.devices if d.attach]
    assert [(f.interface, f.direction, f.prio) for f in want.kernel_filters] == [
        ("vm2", "ingress", KERNEL_MIRROR_PRIO_BASE),
        ("vm2", "egress", KERNEL_MIRROR_PRIO_BASE),
    ]
    for f in want.kernel_filters:
        assert (f.target, f.peer) == (device.name, "s4")
        assert f.expression == bpf_filter("10.0.0.12", 8080, "psh", 64)
        assert f.cookie.startswith(KERNEL_MIRROR_COOKIE_TAG) and len(f.cookie) == 24
    # the analyser on s4 renormalises by the quarter; the copies arrive selected
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [kernel(share=0.25)]
    (item,) = desired_state(plan_from_dict(doc), config_for("s4")).appmon.spec
    assert (item["mechanism"], item["share"]) == ("kernel_mirror", 0.25)
    assert item["bpf"] == bpf_filter("10.0.0.12", 8080, "psh")


def test_a_changed_entry_changes_the_cookie(make_plan, config_for):
    one = desired(make_plan, config_for, kernel()).appmon.kernel_filters[0]
    two = desired(make_plan, config_for, kernel(segments="all")).appmon.kernel_filters[0]
    assert one.cookie != two.cookie and one.prio == two.prio


def test_two_services_on_one_port_take_consecutive_prios(make_plan, config_for):
    other = kernel(service={"address": "10.0.0.12", "port": 8081})
    prios = [f.prio for f in desired(make_plan, config_for, kernel(), other).appmon.kernel_filters]
    assert prios == [KERNEL_MIRROR_PRIO_BASE] * 2 + [KERNEL_MIRROR_PRIO_BASE + 1] * 2


def test_converges_beside_the_sflow_chain_and_is_removed_leaving_it(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    base = desired(make_plan, config_for)
    assert base.mirrors  # the default plan's s1 mirrors sFlow traffic: a chain on vm1 and vm2
    converge(host, base)
    chain = {name: dict(link.filters) for name, link in host.links.items()}
    assert all(chain.values())

    want = desired(make_plan, config_for, kernel())
    applied = converge(host, want)
    kinds = [type(x) for x in applied]
    assert kinds.count(a.SetKernelMirrorFilter) == 2
    assert kinds.index(a.AddAppmonDevice) < kinds.index(a.SetKernelMirrorFilter)
    assert c.AddClsact not in kinds  # the sFlow chain's qdisc is shared
    assert sorted(host.links["vm2"].kernel) == [
        ("egress", KERNEL_MIRROR_PRIO_BASE),
        ("ingress", KERNEL_MIRROR_PRIO_BASE),
    ]
    assert {name: dict(link.filters) for name, link in host.links.items()} == chain
    assert reconcile(want, host.observe(want.bridge, ("vm1", "vm2"))) == []  # idempotent
    assert not find_problems(want, host.observe(want.bridge, ("vm1", "vm2")))

    applied = converge(host, base)  # the entry dropped
    assert {type(x) for x in applied if isinstance(x, a.KERNEL_MIRROR_COMMANDS)} == {
        a.RemoveKernelMirrorFilter
    }
    assert host.links["vm2"].kernel == {} and host.links["vm2"].clsact
    assert {name: dict(link.filters) for name, link in host.links.items()} == chain


def test_on_a_port_without_sflow_it_adds_and_removes_the_qdisc(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    doc = make_plan(sender_mirrors=())
    doc["hosts"]["s1"]["appmon"] = [kernel()]
    want = desired_state(plan_from_dict(doc), config_for("s1"))
    assert not want.mirrors
    applied = converge(host, want)
    assert [type(x) for x in applied if type(x) in (c.AddClsact, a.SetKernelMirrorFilter)] == [
        c.AddClsact,
        a.SetKernelMirrorFilter,
        a.SetKernelMirrorFilter,
    ]
    assert host.links["vm2"].clsact and not host.links["vm1"].clsact
    applied = converge(host, DesiredState(bridge="br-int", sflow=None, vm_ports=(), mode="removed"))
    kinds = [type(x) for x in applied]
    assert kinds.index(a.RemoveKernelMirrorFilter) < kinds.index(c.RemoveClsact)
    assert not host.links["vm2"].clsact and not host.appmon.devices


def test_a_foreign_filter_stays_and_keeps_the_qdisc(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    doc = make_plan(sender_mirrors=())
    doc["hosts"]["s1"]["appmon"] = [kernel()]
    converge(host, desired_state(plan_from_dict(doc), config_for("s1")))
    host.links["vm2"].foreign_filters = 1
    converge(host, DesiredState(bridge="br-int", sflow=None, vm_ports=(), mode="removed"))
    assert host.links["vm2"].clsact and host.links["vm2"].kernel == {}


def test_a_recreated_tunnel_device_gets_its_filters_again(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    want = desired(make_plan, config_for, kernel())
    converge(host, want)
    name = want.appmon.kernel_filters[0].target
    stale = {
        key: ObservedKernelFilter(f.direction, f.prio, f.cookie, None)
        for key, f in host.links["vm2"].kernel.items()
    }
    host.links["vm2"].kernel = stale  # the device went: mirred points at nothing
    kinds = [type(x) for x in converge(host, want)]
    assert kinds.count(a.SetKernelMirrorFilter) == 2
    assert all(f.target == name for f in host.links["vm2"].kernel.values())


def test_a_missing_interface_is_reported(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1",))
    want = desired(make_plan, config_for, kernel())
    converge(host, want)
    assert any(
        "vm2 (a kernel mirror's) not found" in p
        for p in find_problems(want, host.observe(want.bridge, ("vm1", "vm2")))
    )


def test_the_underlay_interface_is_refused(make_plan, config_for):
    host = FakeHost(vm_ports=("vm1", "vm2"))
    host.appmon.underlay = {"vm2"}
    want = desired(make_plan, config_for, kernel())
    commands = reconcile(want, host.observe(want.bridge, ("vm1", "vm2")))
    refused = []
    for command in commands:
        try:
            host.apply(command)
        except Exception as exc:  # noqa: BLE001 - the host's refusal is what is checked
            refused.append(str(exc))
    assert refused and all("carries the route" in r for r in refused)


def test_the_filter_argv_continues_and_carries_the_cookie():
    argv = selective_filter_argv(
        "vm2",
        "cosas-1",
        "1,6 0 0 0",
        prio=KERNEL_MIRROR_PRIO_BASE,
        direction="egress",
        cookie=KERNEL_MIRROR_COOKIE_TAG + "00",
        then_continue=True,
    )
    assert argv[-5:] == ["dev", "cosas-1", "continue", "cookie", KERNEL_MIRROR_COOKIE_TAG + "00"]
    assert argv[argv.index("prio") + 1] == str(KERNEL_MIRROR_PRIO_BASE)
