"""The ``sample`` local mechanism (issue 24): plan fields, desired state and reconcile against the
in-memory host. The same decisions on a real OVS, with traffic and IPFIX records, are in
test_sample_real.py."""

from __future__ import annotations

import pytest

from cosample.agents import sample as s
from cosample.agents.desired import desired_state, safe_state
from cosample.agents.fakehost import FakeHost
from cosample.agents.reconcile import find_problems, reconcile
from cosample.agents.report import Metrics, summarise
from cosample.dataplane.ipfix import SAMPLE_COLLECTOR_SET_ID, SAMPLE_PROBABILITY_SCALE
from cosample.plan.document import plan_from_dict
from cosample.plan.errors import PlanError

PROBABILITY, DOMAIN = 26214, 167772161  # 0.4; 10.0.0.1 as a 32-bit integer


def sample_document(make_plan, probability=PROBABILITY, domain=DOMAIN, ipfix=None, **kwargs):
    """The usual plan with s1 (a sender mirroring to s2 and s3) sampling by the sample action."""
    doc = make_plan(**kwargs)
    doc["hosts"]["s1"].update(
        local_mechanism="sample",
        sflow_sampling=None,
        sample_probability=probability,
        observation_domain=domain,
        local_rate=probability / SAMPLE_PROBABILITY_SCALE,
    )
    doc["ipfix"] = ipfix if ipfix is not None else {"collector": "127.0.0.1:4739"}
    return doc


def converge(host: FakeHost, desired) -> list:
    commands = reconcile(desired, host.observe(desired.bridge))
    for command in commands:
        host.apply(command)
    return commands


def kinds(commands) -> list[str]:
    return [type(command).__name__ for command in commands]


# plan fields ---------------------------------------------------------------------------------
#: The contract fixes the rules, not which of two related fields an error names: either will do.
@pytest.mark.parametrize(
    "change, field",
    [
        ({"sample_probability": None}, "(sample_probability|local_mechanism)"),
        ({"observation_domain": None}, "(observation_domain|local_mechanism)"),
        ({"sample_probability": 0}, "sample_probability"),
        ({"sample_probability": 65536}, "sample_probability"),
        ({"observation_domain": 2**32}, "observation_domain"),
        ({"sflow_sampling": 2}, "(sflow_sampling|local_mechanism)"),
        ({"local_rate": 0.5}, "(local_rate|sample_probability)"),
        ({"local_mechanism": "tc"}, "local_mechanism"),
    ],
)
def test_a_sample_host_is_refused_naming_the_field(make_plan, change, field):
    doc = sample_document(make_plan)
    doc["hosts"]["s1"].update(change)
    with pytest.raises(PlanError, match=rf"hosts\.s1\.{field}"):
        plan_from_dict(doc)


def test_a_sample_host_receives_nothing_and_domains_are_unique(make_plan):
    doc = sample_document(make_plan)
    doc["hosts"]["s2"].update(
        local_mechanism="sample",
        sflow_sampling=None,
        sample_probability=65535,
        observation_domain=7,
    )
    with pytest.raises(PlanError, match=r"hosts\.s2\.(receives|local_mechanism)"):
        plan_from_dict(doc)
    doc = sample_document(make_plan)
    doc["hosts"]["s4"].update(
        local_mechanism="sample",
        sflow_sampling=None,
        local_rate=1.0,
        sample_probability=65535,
        observation_domain=DOMAIN,
    )
    with pytest.raises(PlanError, match=r"observation_domain"):
        plan_from_dict(doc)


def test_sflow_hosts_carry_no_sample_fields_and_old_plans_read_as_before(make_plan):
    doc = make_plan()
    plan = plan_from_dict(doc)
    assert plan.hosts["s1"].local_mechanism == "sflow" and plan.ipfix.collector is None
    doc["hosts"]["s1"]["sample_probability"] = 100
    with pytest.raises(PlanError, match=r"hosts\.s1\.(sample_probability|local_mechanism)"):
        plan_from_dict(doc)


def test_the_ipfix_object_is_checked(make_plan):
    for bad in (
        {"collector": "nowhere"},
        {"cache_active_timeout_s": 0},
        {"cache_max_flows": 2**32},
    ):
        with pytest.raises(PlanError, match=r"ipfix\."):
            plan_from_dict(sample_document(make_plan, ipfix=bad))


# desired state -------------------------------------------------------------------------------
def test_a_sample_host_has_no_sflow_and_plan_values_win(make_plan, config_for):
    plan = plan_from_dict(
        sample_document(
            make_plan,
            ipfix={
                "collector": "192.0.2.7:4739",
                "cache_active_timeout_s": 5,
                "cache_max_flows": 99,
            },
        )
    )
    desired = desired_state(
        plan, config_for(collector="127.0.0.1:6343", ipfix_collector="127.0.0.1:9999")
    )
    assert desired.sflow is None
    assert desired.sample == s.SampleSettings(
        s.IpfixSettings("192.0.2.7:4739", 5, 99), PROBABILITY, DOMAIN
    )
    assert [m.peer for m in desired.mirrors] == ["s2", "s3"]  # mirrors are independent of it
    summary = summarise(desired)
    assert (
        summary["local_mechanism"],
        summary["sample_probability"],
        summary["observation_domain"],
    ) == ("sample", PROBABILITY, DOMAIN)


def test_the_config_fills_what_the_plan_leaves_out(make_plan, config_for):
    plan = plan_from_dict(sample_document(make_plan, ipfix={}))
    desired = desired_state(plan, config_for(ipfix_collector="127.0.0.1:9999"))
    assert desired.sample.ipfix == s.IpfixSettings("127.0.0.1:9999", 1, 1024)
    with pytest.raises(PlanError, match=r"ipfix\.collector.*ipfix_collector"):
        desired_state(plan, config_for())
    others = desired_state(plan, config_for("s2"))  # an sFlow host of the same plan
    assert others.sample is None and others.sflow is not None


# reconcile -----------------------------------------------------------------------------------
def test_a_sample_plan_converges_in_one_pass_and_a_second_changes_nothing(make_plan, config_for):
    host = FakeHost()
    desired = desired_state(plan_from_dict(sample_document(make_plan)), config_for())
    first = converge(host, desired)
    assert "SetSampleExporter" in kinds(first) and "SetSampleFlow" in kinds(first)
    assert kinds(first).index("SetSampleExporter") < kinds(first).index("SetSampleFlow")
    assert host.sflow is None
    [exporter] = host.exporters.values()
    assert (exporter.set_id, exporter.owned, exporter.ipfix) == (
        SAMPLE_COLLECTOR_SET_ID,
        True,
        s.IpfixSettings("127.0.0.1:4739", 1, 1024),
    )
    flow = host.flows[s.SAMPLE_COOKIE]
    assert flow.priority == s.SAMPLE_PRIORITY
    assert (
        f"sample(probability={PROBABILITY},collector_set_id={SAMPLE_COLLECTOR_SET_ID},"
        f"obs_domain_id={DOMAIN},obs_point_id={PROBABILITY})"
    ) in flow.actions
    assert reconcile(desired, host.observe(desired.bridge)) == []
    host.restart_vswitchd()  # flows are not in OVSDB
    assert kinds(converge(host, desired)) == ["SetSampleFlow"] + [
        k for k in kinds(first) if k.startswith("SetAppmonFlows")
    ]


def test_a_changed_probability_rewrites_the_flow_only(make_plan, config_for):
    host = FakeHost()
    converge(host, desired_state(plan_from_dict(sample_document(make_plan)), config_for()))
    for probability in (1000, 60000):
        desired = desired_state(
            plan_from_dict(sample_document(make_plan, probability=probability)), config_for()
        )
        assert reconcile(desired, host.observe(desired.bridge)) == [
            s.SetSampleFlow(desired.bridge, probability, DOMAIN)
        ]
        converge(host, desired)
        assert f"probability={probability}," in host.flows[s.SAMPLE_COOKIE].actions


def test_changed_exporter_settings_update_the_row_in_place(make_plan, config_for):
    host = FakeHost()
    converge(host, desired_state(plan_from_dict(sample_document(make_plan)), config_for()))
    [before] = host.exporters.values()
    desired = desired_state(
        plan_from_dict(
            sample_document(make_plan, ipfix={"collector": "127.0.0.1:4740", "cache_max_flows": 10})
        ),
        config_for(),
    )
    commands = converge(host, desired)
    assert commands == [
        s.SetSampleExporter(desired.bridge, desired.sample.ipfix, before.ipfix_uuid)
    ]
    [after] = host.exporters.values()
    assert after.uuid == before.uuid and after.ipfix == desired.sample.ipfix


def test_back_to_sflow_removes_the_flow_then_the_exporter_then_sets_sflow(make_plan, config_for):
    host = FakeHost()
    converge(host, desired_state(plan_from_dict(sample_document(make_plan)), config_for()))
    desired = desired_state(plan_from_dict(make_plan(version=101)), config_for())
    order = kinds(converge(host, desired))
    assert (
        order.index("RemoveSampleFlow")
        < order.index("RemoveSampleExporter")
        < order.index("SetSflow")
    )
    assert host.exporters == {} and s.SAMPLE_COOKIE not in host.flows
    assert host.sflow is not None and host.sflow.settings.sampling == 10
    assert reconcile(desired, host.observe(desired.bridge)) == []


def test_safe_state_and_a_missing_bridge(make_plan, config_for):
    host = FakeHost()
    plan = plan_from_dict(sample_document(make_plan))
    converge(host, desired_state(plan, config_for()))
    safe = safe_state(config_for(collector="127.0.0.1:6343"), plan)
    converge(host, safe)
    assert host.exporters == {} and s.SAMPLE_COOKIE not in host.flows
    assert host.sflow.settings.sampling == 4096
    gone = FakeHost(bridge_exists=False)
    gone.exporters["x"] = s.ObservedExporter(
        "br-int", "x", SAMPLE_COLLECTOR_SET_ID, True, "y", None
    )
    assert kinds(converge(gone, desired_state(plan, config_for()))) == ["RemoveSampleExporter"]


def test_a_receiver_turned_sample_host_loses_its_tunnels_and_drop_flows(make_plan, config_for):
    """s2 receives (sFlow 1-in-1, tunnel port, drop flow), then samples; and back: A->B->A."""
    host = FakeHost()
    receiver = desired_state(plan_from_dict(make_plan()), config_for("s2"))
    converge(host, receiver)
    fresh = (host.sflow.settings, sorted((f.priority, f.actions) for f in host.flows.values()))
    doc = make_plan(version=101, sender_mirrors=())
    doc["hosts"]["s2"].update(
        local_mechanism="sample",
        sflow_sampling=None,
        sample_probability=65535,
        observation_domain=2,
        local_rate=1.0,
    )
    doc["ipfix"] = {"collector": "127.0.0.1:4739"}
    converge(host, desired_state(plan_from_dict(doc), config_for("s2")))
    assert [f.cookie for f in host.flows.values()] == [s.SAMPLE_COOKIE]
    assert not any(p.owned for p in host.ports.values()) and host.sflow is None
    receiver = desired_state(plan_from_dict(make_plan(version=102)), config_for("s2"))
    converge(host, receiver)
    assert (
        host.sflow.settings,
        sorted((f.priority, f.actions) for f in host.flows.values()),
    ) == fresh
    assert host.exporters == {}


def test_a_foreign_collector_set_with_our_id_is_reported_and_left_alone(make_plan, config_for):
    host = FakeHost()
    host.add_foreign_collector_set()
    desired = desired_state(plan_from_dict(sample_document(make_plan)), config_for())
    commands = converge(host, desired)
    assert not any(isinstance(c, s.SAMPLE_COMMANDS) for c in commands)
    assert list(host.exporters) == ["foreign-set"] and s.SAMPLE_COOKIE not in host.flows
    assert any(
        "foreign Flow_Sample_Collector_Set" in p
        for p in find_problems(desired, host.observe(desired.bridge))
    )
    other = FakeHost()
    other.add_foreign_collector_set(set_id=7)  # another id: none of the agent's business
    converge(other, desired)
    assert other.exporters["foreign-set"].set_id == 7 and s.SAMPLE_COOKIE in other.flows
    assert find_problems(desired, other.observe(desired.bridge)) == []


def test_a_crash_after_any_prefix_of_commands_converges(make_plan, config_for):
    desired = desired_state(plan_from_dict(sample_document(make_plan)), config_for())
    commands = reconcile(desired, FakeHost().observe(desired.bridge))
    for cut in range(len(commands) + 1):
        host = FakeHost()
        for command in commands[:cut]:
            host.apply(command)
        converge(host, desired)
        assert reconcile(desired, host.observe(desired.bridge)) == [], cut
        assert len(host.exporters) == 1


def test_the_metric_shows_the_probability(make_plan, config_for):
    from cosample.agents.report import CycleReport

    desired = desired_state(plan_from_dict(sample_document(make_plan)), config_for())
    metrics = Metrics()
    metrics.record(CycleReport("s1", "t", "ok", "plan", ""), desired, 0.0, [])
    text = metrics.text().decode()
    assert f"cosample_agent_sample_probability {float(PROBABILITY)}" in text
    assert "cosample_agent_sflow_sampling_n 0.0" in text


def test_appmon_flows_are_the_same_with_the_sample_mechanism(make_plan, config_for):
    """The sample flow composes by its mark and resubmit: the appmon flows do not change."""
    entry = {
        "service": {"address": "10.0.0.12", "port": 8080},
        "mechanism": "selective_mirror",
        "to": "s4",
    }
    flows = {}
    for mechanism, doc in (("sflow", make_plan()), ("sample", sample_document(make_plan))):
        doc["hosts"]["s1"]["appmon"] = [dict(entry)]
        host = FakeHost()
        desired = desired_state(plan_from_dict(doc), config_for())
        for _ in range(2):
            converge(host, desired)
        assert reconcile(desired, host.observe(desired.bridge)) == []
        flows[mechanism] = set().union(*host.appmon.flows.values())
        assert (s.SAMPLE_COOKIE in host.flows) == (mechanism == "sample")
    assert flows["sflow"] == flows["sample"] and any("NORMAL" in f for f in flows["sample"])
