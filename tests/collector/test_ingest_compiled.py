"""The estimator's compiled common case (``_sflow.ingest``, collector/_sflow.c) changes exactly
what the Python code would: two estimators fed the same datagrams, one with it and one without
(``_compiled = None``), end in the same state, whatever the stream does to them (samples lost,
duplicated, reordered, a plan change that starts a mirror and changes rates, forged rates and
frames, counter samples, agents nobody planned, windows that slide)."""

from __future__ import annotations

import json
import random

from collector_plans import FOUR, plan_document
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.collector.attribution import build
from cosample.collector.decode import compiled_ingest
from cosample.collector.encode import SampleSpec, counter_sample, datagram, flow_sample
from cosample.collector.estimate import Estimator
from cosample.lab.sflowstream import frame, simulate, vm_address
from cosample.plan.document import parse_plan

TRUTH = {"s1": 6_000, "s2": 500, "s3": 800, "s4": 3_000}
#: the plan after the change: s1 samples 1-in-16 and mirrors half to s3, which samples 1-in-1
AFTER = {"s1": (16, {"s3": 0.5}), "s2": (1, {}), "s3": (1, {}), "s4": (16, {})}


def test_it_is_built():
    assert compiled_ingest is not None


def odd(rng: random.Random, when: float) -> tuple[float, bytes]:
    """A datagram the common case must leave to Python."""
    header, length = frame(vm_address(0), vm_address(1, 2), 500)
    kind = rng.randrange(4)
    if kind == 0:  # a rate nobody planned, from s4's own agent
        spec = SampleSpec(rng.randrange(1, 100), 2**31, 2**31, header, length, source_index=5)
        return when, datagram("172.29.0.4", rng.randrange(1000), 5, [flow_sample(spec)])
    if kind == 1:  # a frame no interface carries
        spec = SampleSpec(rng.randrange(1, 100), 16, 16, header, 70_000, source_index=5)
        return when, datagram("172.29.0.4", rng.randrange(1000), 5, [flow_sample(spec)])
    if kind == 2:  # counters beside a flow sample
        spec = SampleSpec(rng.randrange(1, 100), 16, 16, header, length, source_index=6)
        samples = [flow_sample(spec), counter_sample(1, 3, 10, 100, 20, 200)]
        return when, datagram("172.29.0.4", rng.randrange(1000), 5, samples)
    spec = SampleSpec(1, 16, 16, header, length)  # an agent no plan names
    return when, datagram("172.29.0.99", 1, 1, [flow_sample(spec)])


def state(est: Estimator) -> tuple:
    data = est.snapshot_data(est._now)
    return (
        json.dumps(data, default=str, sort_keys=True),
        est.datagrams,
        est.samples,
        sorted(est.rate_of.items()),
        repr(sorted((k, v) for k, v in est._last.items())),
        [(b, sorted(s.items()), sorted(t.items())) for b, s, t in est._buckets],
        repr(
            sorted(
                (key, entry[0], entry[2], sorted((src, vars_(st)) for src, st in entry[1].items()))
                for key, entry in est.loss._agents.items()
            )
        ),
    )


def vars_(sampler) -> tuple:
    return tuple(getattr(sampler, name) for name in type(sampler).__slots__)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), window=st.sampled_from([None, 2.0, 30.0]))
def test_the_compiled_common_case_is_the_python_code(seed, window):
    rng = random.Random(seed)
    before = plan_document(FOUR, version=7)
    after = plan_document(AFTER, version=8)
    stream = simulate(parse_plan(json.dumps(before).encode()), TRUTH, duration_s=5.0, seed=seed)
    datagrams = []
    for when, data in stream.datagrams:
        draw = rng.random()
        if draw < 0.04:
            continue  # lost
        datagrams.append((when, bytes(data)))
        if draw > 0.97:
            datagrams.append((when + 0.001, bytes(data)))  # duplicated
        if draw < 0.08:
            datagrams.append(odd(rng, when))
    for k in range(0, len(datagrams) - 1, 13):  # reordered
        if rng.random() < 0.5:
            datagrams[k], datagrams[k + 1] = datagrams[k + 1], datagrams[k]
    switch = datagrams[len(datagrams) // 2][0]
    runs = []
    for compiled in (True, False):
        est = Estimator(build(parse_plan(json.dumps(before).encode())), window_s=window)
        if not compiled:
            est._compiled = None
        switched = False
        for when, data in datagrams:
            if not switched and when >= switch:
                est.set_attribution(build(parse_plan(json.dumps(after).encode())), when)
                switched = True
            est.ingest(data, when)
        runs.append(state(est))
    assert runs[0] == runs[1]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_a_guards_report_changes_the_same_in_both(seed):
    """s1's guard halves its mirrors (rung 1) mid-stream and sheds them (rung 4) later: the
    compiled and the Python ingest end alike, and alike an estimator that keeps no decision
    (every group decided afresh): the report clears the decisions kept for s1's copies."""
    from cosample.dataplane.guardwire import GuardReport, encode

    document = plan_document(FOUR, version=7)
    document["hosts"]["s1"]["guard"] = {"floor_sampling": 1024}
    plan = parse_plan(json.dumps(document).encode())
    stream = simulate(plan, TRUTH, duration_s=5.0, seed=seed)
    datagrams = [(when, bytes(data)) for when, data in stream.datagrams]
    steps = {len(datagrams) // 3: (1, 0.5), 2 * len(datagrams) // 3: (4, 0.0)}
    runs = []
    for compiled, keeps in ((True, True), (False, True), (False, False)):
        est = Estimator(build(plan), window_s=30.0)
        if not compiled:
            est._compiled = None
        if not keeps:
            est._slots = est._context[2] = Forgetful()
        for k, (when, data) in enumerate(datagrams):
            if k in steps:
                rung, scale = steps[k]
                report = GuardReport("s1", 7, rung, 64, scale, when, 0.95)
                est.guard_report(encode(report), "172.29.0.1", when)
            est.ingest(data, when)
        assert est.guards.accepted == 2 and est.dropped.get("guard_shed", 0) > 0
        runs.append(state(est)[:4])  # the snapshot, counts and rates (no slot in them)
    assert runs[0] == runs[1] == runs[2]


class Forgetful(dict):
    """Slots never kept: every group of samples decided again (``Estimator._slot``)."""

    def __setitem__(self, key, value) -> None:
        pass
