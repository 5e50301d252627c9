"""The plan fields the collector reads for the ``sample`` mechanism (the contract's names):
accepted as the contract says, refused with the field named otherwise."""

from __future__ import annotations

import json

import pytest
from collector_plans import plan_document

from cosample.plan.document import parse_plan
from cosample.plan.errors import PlanError

P = 26214


def document(**s1):
    doc = plan_document({"s1": (None, {}), "s2": (16, {})})
    doc["hosts"]["s1"].update(
        local_mechanism="sample", sample_probability=P, observation_domain=7, local_rate=P / 65535
    )
    doc["hosts"]["s1"].update(s1)
    return doc


def parse(doc):
    return parse_plan(json.dumps(doc).encode())


def test_a_sample_host_and_plans_without_the_fields():
    plan = parse(document())
    s1, s2 = plan.hosts["s1"], plan.hosts["s2"]
    assert (s1.local_mechanism, s1.sample_probability, s1.observation_domain) == ("sample", P, 7)
    assert (s2.local_mechanism, s2.sample_probability, s2.observation_domain) == (
        "sflow",
        None,
        None,
    )


@pytest.mark.parametrize(
    "change, field",
    [
        ({"sample_probability": None}, "sample_probability"),
        ({"observation_domain": None}, "observation_domain"),
        ({"sample_probability": 0}, "sample_probability"),
        ({"sample_probability": 65536}, "sample_probability"),
        ({"observation_domain": 0}, "observation_domain"),
        ({"observation_domain": 1 << 32}, "observation_domain"),
        ({"sflow_sampling": 2}, "sflow_sampling"),
        ({"receives": [{"from": "s2", "rate": 0.1}]}, "receives"),
        ({"local_rate": 0.5}, "local_rate"),
        ({"local_mechanism": "ipfix"}, "local_mechanism"),
    ],
)
def test_refused_naming_the_field(change, field):
    with pytest.raises(PlanError) as caught:
        parse(document(**change))
    assert f"hosts.s1.{field}" in str(caught.value)


def test_sflow_hosts_carry_no_sample_fields():
    doc = document()
    doc["hosts"]["s2"]["observation_domain"] = 9
    with pytest.raises(PlanError) as caught:
        parse(doc)
    assert "hosts.s2" in str(caught.value)


def test_observation_domains_are_unique():
    doc = document()
    doc["hosts"]["s2"].update(
        local_mechanism="sample",
        sample_probability=100,
        observation_domain=7,
        local_rate=100 / 65535,
        sflow_sampling=None,
        receives=[],
    )
    with pytest.raises(PlanError) as caught:
        parse(doc)
    assert "observation_domain" in str(caught.value)
