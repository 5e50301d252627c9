"""The plan format's ``sample`` local mechanism (docs/formats.md; the contract of issue 24
item 4): every rule refused with the field path and value, old plans read as before, and a
host's slice carries what the agent reads from the whole plan."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan.document import parse_plan, plan_from_dict
from cosample.plan.errors import PlanError
from cosample.plan.slicebuild import build_slices
from cosample.plan.slices import read_slice


def sampled(doc, host="s1", probability=13107, domain=167772161):
    """``host`` switched to the sample mechanism at ``probability``/65535."""
    entry = doc["hosts"][host]
    entry.update(
        local_mechanism="sample",
        sample_probability=probability,
        observation_domain=domain,
        sflow_sampling=None,
        local_rate=probability / SAMPLE_PROBABILITY_SCALE,
    )
    return doc


def test_a_sample_host_reads_with_its_fields(make_plan, to_bytes):
    doc = sampled(make_plan())
    doc["ipfix"] = {
        "collector": "10.1.0.1:4739",
        "cache_active_timeout_s": 1,
        "cache_max_flows": 4096,
    }
    plan = parse_plan(to_bytes(doc))
    s1 = plan.hosts["s1"]
    assert (s1.local_mechanism, s1.sample_probability, s1.observation_domain) == (
        "sample",
        13107,
        167772161,
    )
    assert s1.sflow_sampling is None and s1.local_rate == pytest.approx(0.2)
    assert plan.ipfix.collector == "10.1.0.1:4739" and plan.ipfix.cache_max_flows == 4096
    assert plan.hosts["s2"].local_mechanism == "sflow"


def test_old_plans_read_as_before(make_plan, to_bytes):
    plan = parse_plan(to_bytes(make_plan()))
    assert {h.local_mechanism for h in plan.hosts.values()} == {"sflow"}
    assert all(
        h.sample_probability is None and h.observation_domain is None for h in plan.hosts.values()
    )
    assert plan.ipfix.collector is None and plan.ipfix.cache_active_timeout_s is None


def _change(host_fields=None, top=None, host="s1", base=True):
    def mutate(doc):
        if base:
            sampled(doc)
        doc["hosts"][host].update(host_fields or {})
        doc.update(top or {})
        return doc

    return mutate


#: (mutation, the field path the error names, text it must say, the value it shows)
BAD = [
    (_change({"local_mechanism": "tc"}), "hosts.s1.local_mechanism", "'sflow' or 'sample'", "'tc'"),
    (_change({"sample_probability": None}), "hosts.s1.sample_probability", "required", "None"),
    (
        _change({"sample_probability": 0}),
        "hosts.s1.sample_probability",
        "greater than or equal to 1",
        "0",
    ),
    (
        _change({"sample_probability": 65536}),
        "hosts.s1.sample_probability",
        "less than or equal to 65535",
        "65536",
    ),
    (_change({"sample_probability": 1.5}), "hosts.s1.sample_probability", "integer", "1.5"),
    (_change({"observation_domain": None}), "hosts.s1.observation_domain", "required", "None"),
    (
        _change({"observation_domain": 0}),
        "hosts.s1.observation_domain",
        "greater than or equal to 1",
        "0",
    ),
    (
        _change({"observation_domain": 2**32}),
        "hosts.s1.observation_domain",
        "less than or equal to",
        "4294967296",
    ),
    (
        _change({"sflow_sampling": 5, "local_rate": 0.2}),
        "hosts.s1.sflow_sampling",
        "must be null",
        "5",
    ),
    (_change({"local_rate": 0.25}), "hosts.s1.local_rate", "sample_probability/65535", "0.25"),
    (
        _change(
            {
                "local_mechanism": "sample",
                "sample_probability": 65535,
                "observation_domain": 7,
                "sflow_sampling": None,
            },
            host="s2",
        ),
        "hosts.s2.receives",
        "receives nothing",
        "1",
    ),
    (
        _change({"sample_probability": 100}, host="s4", base=False),
        "hosts.s4.sample_probability",
        "only with local_mechanism 'sample'",
        "100",
    ),
    (
        _change({"observation_domain": 9}, host="s2", base=False),
        "hosts.s2.observation_domain",
        "only with local_mechanism 'sample'",
        "9",
    ),
    (
        _change(
            {
                "local_mechanism": "sample",
                "sample_probability": 65535,
                "local_rate": 1.0,
                "observation_domain": 167772161,
                "sflow_sampling": None,
            },
            host="s4",
        ),
        "hosts.s4.observation_domain",
        "also the observation domain of s1",
        "167772161",
    ),
    (
        _change(top={"ipfix": {"collector": "nohost"}}),
        "ipfix.collector",
        "ADDRESS:PORT",
        "'nohost'",
    ),
    (
        _change(top={"ipfix": {"cache_active_timeout_s": 0}}),
        "ipfix.cache_active_timeout_s",
        "greater than or equal to 1",
        "0",
    ),
    (
        _change(top={"ipfix": {"cache_active_timeout_s": 3601}}),
        "ipfix.cache_active_timeout_s",
        "less than or equal to 3600",
        "3601",
    ),
    (
        _change(top={"ipfix": {"cache_max_flows": 2**32}}),
        "ipfix.cache_max_flows",
        "less than or equal to",
        "4294967296",
    ),
    (_change(top={"ipfix": {"cache_max_flows": "10"}}), "ipfix.cache_max_flows", "integer", "'10'"),
]


@pytest.mark.parametrize(
    "mutate, field, says, value", BAD, ids=[f"{field}:{says[:20]}" for _, field, says, _ in BAD]
)
def test_each_rule_is_refused_naming_the_field_and_value(
    make_plan, to_bytes, mutate, field, says, value
):
    with pytest.raises(PlanError) as caught:
        parse_plan(to_bytes(mutate(make_plan())), source="plan.json")
    message = str(caught.value)
    assert message.startswith(f"plan.json: {field}: "), message
    assert says in message and f"got {value}" in message, message


def test_a_peer_slice_of_a_sample_sender_reads_as_the_whole_plan(make_plan):
    doc = sampled(make_plan())
    doc["ipfix"] = {"collector": "10.1.0.1:4739"}
    whole = plan_from_dict(json.loads(json.dumps(doc)))
    slices = build_slices([doc], None)
    for host in doc["hosts"]:
        (plan,) = read_slice(slices.document(host), host, None)
        assert plan.ipfix == whole.ipfix
        assert plan.hosts[host] == whole.hosts[host]
        for peer, entry in plan.hosts.items():  # s2's and s3's views hold s1, a sample sender
            assert entry.local_mechanism == whole.hosts[peer].local_mechanism
            assert entry.sample_probability == whole.hosts[peer].sample_probability
            assert entry.observation_domain == whole.hosts[peer].observation_domain


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # make_plan: fresh copies
@given(
    probability=st.integers(1, SAMPLE_PROBABILITY_SCALE),
    domain=st.integers(1, 2**32 - 1),
    timeout=st.none() | st.integers(1, 3600),
    flows=st.none() | st.integers(1, 2**32 - 1),
)
def test_any_valid_sample_host_round_trips(
    make_plan, to_bytes, probability, domain, timeout, flows
):
    doc = sampled(make_plan(), probability=probability, domain=domain)
    doc["ipfix"] = {"cache_active_timeout_s": timeout, "cache_max_flows": flows}
    plan = parse_plan(to_bytes(doc))
    again = parse_plan(to_bytes(json.loads(to_bytes(doc))))
    assert plan.hosts["s1"] == again.hosts["s1"] and plan.ipfix == again.ipfix
    s1 = plan.hosts["s1"]
    assert (s1.sample_probability, s1.observation_domain) == (probability, domain)
    assert s1.local_rate * SAMPLE_PROBABILITY_SCALE == pytest.approx(probability, rel=1e-12)
    assert (plan.ipfix.cache_active_timeout_s, plan.ipfix.cache_max_flows) == (timeout, flows)
