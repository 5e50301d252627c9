"""IPFIX from OVS's ``sample`` action through the estimator (collector/ipfixingest.py): the
estimate is unbiased and its interval covers, the probability comes from the record or the
plan, lost records are corrected for with a wider interval, and every message or record not
counted has a named reason. The same estimator on real OVS: test_ipfix_ovs.py."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ipfix_messages import record_message, sample_plan, template_message

from cosample.collector import attribution
from cosample.collector.estimate import Estimator
from cosample.collector.pcap import udp_payloads

EXPORTER, DOMAIN, P = "127.29.0.1", 7, 26214


def estimator(probability: int = P, **kwargs) -> Estimator:
    return Estimator(
        attribution.build(sample_plan(probability, DOMAIN, **kwargs)), window_s=None, name="c1"
    )


def row(snapshot, server: str = "s1") -> dict:
    table = snapshot["servers"]
    k = table["name"].index(server)
    return {key: values[k] for key, values in table.items() if values is not None}


def run_trace(
    seed: int, seconds: int = 20, flows: int = 4, pps_per_flow: int = 50, lose: float = 0.0
):
    """One host's flows sampled at P, one record per flow and second (OVS's cache with a 1-s
    active timeout); ``lose``: share of messages that never arrive. (estimator, truth)."""
    rng = random.Random(seed)
    est = estimator()
    est.ingest_ipfix(template_message(DOMAIN, 1), EXPORTER, 0.0)
    sequence, truth = 1, 0
    for second in range(seconds):
        for flow in range(flows):
            truth += pps_per_flow
            sampled = sum(rng.random() < P / 65535 for _ in range(pps_per_flow))
            edge = sequence <= 2 or (second, flow) == (seconds - 1, flows - 1)
            if sampled:  # a loss before the first or after the last arrival is invisible
                if edge or rng.random() >= lose:
                    est.ingest_ipfix(
                        record_message(DOMAIN, sequence, sampled, P),
                        EXPORTER,
                        second + flow / flows,
                    )
                sequence += 1
    est.ingest_ipfix(template_message(DOMAIN, sequence), EXPORTER, float(seconds))
    return est, truth


def estimate(est: Estimator) -> tuple[float, float, float, float]:
    data = est.snapshot_data()
    r = row(data)
    window = data["window_s"]
    return (
        r["packets_per_s"] * window,
        r["packets_per_s_ci95_low"] * window,
        r["packets_per_s_ci95_high"] * window,
        math.sqrt(r["packets_per_s_variance"]) * window,
    )


@pytest.mark.parametrize("lose", [0.0, 0.2])
def test_unbiased_and_covered_over_seeds(lose):
    """Also with a fifth of the messages lost: the correction keeps it unbiased, the
    record-level variance keeps the interval honest."""
    errors, covered = [], 0
    for seed in range(30):
        est, truth = run_trace(seed, lose=lose)
        packets, low, high, sd = estimate(est)
        errors.append((packets - truth) / sd)
        covered += low <= truth <= high
    mean = sum(errors) / len(errors)
    assert abs(mean) < 3 / math.sqrt(len(errors)), errors  # unbiased within noise
    assert covered >= 25  # nominal 95 % of 30


def test_the_probability_from_the_record_else_the_plan():
    """A record states the plan's P, or states none (the plan's is used); a record stating
    another P is not the record the plan describes: dropped by name, never weighed (issue 41:
    observationPointId 1 weighed 65,535)."""
    est = estimator(probability=26214)
    est.ingest_ipfix(template_message(DOMAIN), EXPORTER, 0.0)
    est.ingest_ipfix(record_message(DOMAIN, 0, 10, 26214), EXPORTER, 0.5)  # factor 2
    est.ingest_ipfix(record_message(DOMAIN, 1, 4, 26214, point=False), EXPORTER, 1.0)  # plan's
    est.ingest_ipfix(record_message(DOMAIN, 2, 10, 13107), EXPORTER, 1.2)  # factor 5: not P
    est.ingest_ipfix(record_message(DOMAIN, 3, 3, 1), EXPORTER, 1.4)  # weight 65535
    data = est.snapshot_data()
    r = row(data)
    assert r["samples"] == 14
    assert r["packets_per_s"] * data["window_s"] == pytest.approx(14 * 65535 / 26214)
    assert r["bytes_per_s"] * data["window_s"] == pytest.approx(14 * 65535 / 26214 * 100)
    assert est.ipfix_records == 2
    assert est.dropped == {"ipfix_unplanned_probability": 2}
    assert data["agents"] == [EXPORTER]


def test_lost_records_are_corrected_with_a_wider_interval():
    whole, _ = run_trace(3, lose=0.0)
    lossy, truth = run_trace(3, lose=0.2)
    packets, low, high, sd = estimate(lossy)
    _, _, _, sd_whole = estimate(whole)
    received = lossy.ipfix_records
    assert received < whole.ipfix_records
    uncorrected = sum(acc[1] for _, sums, _ in lossy._buckets for acc in sums.values())
    assert packets > uncorrected * 1.1  # the lost records were added back
    assert abs(packets - truth) <= 3 * sd
    assert sd > sd_whole


def test_the_exporters_statistics_continue_the_sequence():
    est = estimator()
    est.ingest_ipfix(template_message(DOMAIN), EXPORTER, 0.0)
    est.ingest_ipfix(template_message(0), EXPORTER, 0.0)
    est.ingest_ipfix(record_message(DOMAIN, 5, 2, P), EXPORTER, 0.1)
    est.ingest_ipfix(record_message(DOMAIN, 6, 2, P), EXPORTER, 0.2)
    stats = record_message(0, 7, 1, P)  # domain 0: OVS's exporter statistics
    est.ingest_ipfix(stats, EXPORTER, 0.3)
    est.ingest_ipfix(record_message(DOMAIN, 8, 2, P), EXPORTER, 0.4)
    est.ingest_ipfix(record_message(DOMAIN, 9, 2, P), EXPORTER, 0.5)
    assert not est._lost and est.ipfix_records == 4


def test_every_message_or_record_not_counted_has_a_reason():
    est = Estimator(None, window_s=None)
    est.ingest_ipfix(template_message(DOMAIN), EXPORTER, 0.0)
    assert est.dropped == {"ipfix_no_plan": 1}
    est = estimator()
    est.ingest_ipfix(template_message(DOMAIN), "127.29.0.9", 0.0)
    est.ingest_ipfix(record_message(DOMAIN, 0, 1, P), EXPORTER, 0.1)  # template not yet known
    est.ingest_ipfix(template_message(DOMAIN), EXPORTER, 0.2)
    est.ingest_ipfix(template_message(DOMAIN + 1), EXPORTER, 0.2)
    est.ingest_ipfix(record_message(DOMAIN + 1, 1, 1, P), EXPORTER, 0.3)
    bad = bytearray(record_message(DOMAIN, 2, 3, P))
    bad[-25] ^= 1  # packetDeltaCount 3 x 2 + 1: not a multiple of 65535 // P
    est.ingest_ipfix(bytes(bad), EXPORTER, 0.4)
    est.ingest_ipfix(record_message(DOMAIN, 3, 1, P), EXPORTER, 0.5)
    est.ingest_ipfix(record_message(DOMAIN, 3, 1, P), EXPORTER, 0.6)  # UDP duplicated it
    est.ingest_ipfix(b"\0\x0a\0\x10", EXPORTER, 0.7)
    est.ingest_ipfix(b"\0\x05" + bytes(30), EXPORTER, 0.8)
    assert est.dropped == {
        "ipfix_unplanned_exporter": 1,
        "ipfix_unknown_template": 1,
        "ipfix_domain_mismatch": 1,
        "ipfix_bad_packet_count": 1,
        "ipfix_duplicate": 1,
        "ipfix_truncated": 1,
        "ipfix_bad_version": 1,
    }
    assert est.ipfix_records == 1
    assert est.snapshot_data()["dropped"] == dict(sorted(est.dropped.items()))


def test_an_ipv4_mapped_source_is_the_exporter():
    est = estimator()
    est.ingest_ipfix(template_message(DOMAIN), "::ffff:" + EXPORTER, 0.0)
    est.ingest_ipfix(record_message(DOMAIN, 0, 3, P), "::ffff:" + EXPORTER, 0.1)
    assert est.ipfix_records == 1 and not est.dropped


def test_sflow_hosts_beside_a_sample_host_are_unchanged():
    est = estimator(others={"s2": (16, {})})
    assert est.attribution.servers["s2"].ipfix_key is None
    assert est.attribution.rates("s1", {}) == (P / 65535, 0.0)
    assert est.attribution.rates("s2", {}) == (1 / 16, 0.0)
    assert est.streams.runs("s1", "ipfix/7", 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 3))
def test_random_input_never_raises(data, position):
    est = estimator()
    est.ingest_ipfix(template_message(DOMAIN), EXPORTER, 0.0)
    valid = record_message(DOMAIN, 0, 3, P)
    for message in (data, valid[: position * 20] + data, valid + data):
        est.ingest_ipfix(message, EXPORTER, 1.0)
    est.snapshot_data()


def test_the_real_ovs_capture():
    """tests/data/ipfix/ovs-sample-cache.pcap (README there): 4000 packets through OVS's sample
    action at 26214/65535, 1602 sampled by OVS's own count."""
    capture = Path(__file__).resolve().parents[1] / "data" / "ipfix" / "ovs-sample-cache.pcap"
    est = Estimator(
        attribution.build(sample_plan(26214, 2130706433, agents="127.0.0")), window_s=None
    )
    for when, data in udp_payloads(capture):
        est.ingest_ipfix(data, "127.0.0.1", when)
    packets, low, high, sd = estimate(est)
    assert est.samples == 1602 and est.ipfix_records == 16 and not est.dropped
    assert packets == 1602 * 65535 / 26214
    assert abs(packets - 4000) <= 4.5 * math.sqrt(4000 * (65535 / 26214 - 1))
    assert low <= 4000 <= high
