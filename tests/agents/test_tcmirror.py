"""The pure tc random-mirror builders: bytecode, thresholds, exclusive chains, argv."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosample.dataplane.tcmirror import (
    RANDOM_RANGE,
    TcMirrorError,
    bpf_random_bytecode,
    bytecode_from_ddd,
    chain_filter_argvs,
    chain_thresholds,
    clsact_add_argv,
    filter_delete_argv,
    match_probability,
    mirror_filter_argv,
    random_threshold,
    selective_filter_argv,
)


def test_bytecode_matches_the_documented_program():
    # docs/ovs-facts.md, "Sampled mirrors with tc": load random, jge T, match, no match.
    assert (
        bpf_random_bytecode(0.5) == "4,32 0 0 4294963256,53 1 0 2147483648,6 0 0 4294967295,6 0 0 0"
    )


def test_edges_use_constant_programs():
    assert bpf_random_bytecode(1.0) == "1,6 0 0 4294967295"
    assert bpf_random_bytecode(0.0) == "1,6 0 0 0"
    assert random_threshold(1.0) == RANDOM_RANGE - 1
    assert random_threshold(0.0) == 0


@given(st.floats(min_value=0.0, max_value=1.0))
def test_bytecode_round_trips_probability(p):
    assert match_probability(bpf_random_bytecode(p)) == pytest.approx(p, abs=1.0 / RANDOM_RANGE)


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, "x", None, True])
def test_bad_probability_is_rejected(bad):
    with pytest.raises(TcMirrorError, match="probability"):
        bpf_random_bytecode(bad)


def test_chain_gives_conditional_probabilities():
    assert chain_thresholds([0.3, 0.35]) == pytest.approx((0.3, 0.5))
    assert chain_thresholds([0.5, 0.5]) == pytest.approx((0.5, 1.0))
    assert chain_thresholds([1.0, 0.0]) == (1.0, 0.0)
    assert chain_thresholds([]) == ()


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=6))
def test_chain_reproduces_exclusive_shares(raw):
    total = sum(raw)
    shares = [x / total for x in raw] if total > 1 else raw
    q = chain_thresholds(shares)
    assert all(0.0 <= x <= 1.0 for x in q)
    not_taken = 1.0
    for share, qk in zip(shares, q):
        assert qk * not_taken == pytest.approx(share, abs=1e-9)
        not_taken *= 1.0 - qk


def test_chain_rejects_oversubscription():
    with pytest.raises(TcMirrorError, match="sum to 1.2"):
        chain_thresholds([0.6, 0.6])
    with pytest.raises(TcMirrorError, match=r"shares\[1\]"):
        chain_thresholds([0.1, -0.1])


def test_argv_builders():
    argv = mirror_filter_argv("ccva", "ccvm", 0.25, prio=7, netns="ccA")
    assert argv[:3] == ["tc", "-n", "ccA"]
    assert argv[argv.index("prio") + 1] == "7" and argv[-1] == "ccvm"
    assert match_probability(argv[argv.index("bytecode") + 1]) == 0.25
    assert clsact_add_argv("ccva") == ["tc", "qdisc", "add", "dev", "ccva", "clsact"]
    assert filter_delete_argv("ccva", prio=7)[-1] == "bpf"
    chain = chain_filter_argvs("ccva", ["t1", "t2"], [0.3, 0.35], first_prio=10)
    assert [a[a.index("prio") + 1] for a in chain] == ["10", "11"]
    with pytest.raises(TcMirrorError) as raised:
        mirror_filter_argv("x" * 16, "t", 0.5, prio=1)
    assert str(raised.value) == (
        "device: not an interface name (1 to 15 bytes, no '/', ':' or white space, "
        "not '.' or '..') (got 'xxxxxxxxxxxxxxxx')"
    )
    for refused in ("..", "eth0:1", "a b", ""):
        with pytest.raises(TcMirrorError, match="^device: "):
            clsact_add_argv(refused)
    with pytest.raises(TcMirrorError, match="prio"):
        mirror_filter_argv("a", "t", 0.5, prio=0)
    with pytest.raises(TcMirrorError, match="direction"):
        mirror_filter_argv("a", "t", 0.5, prio=1, direction="up")
    with pytest.raises(TcMirrorError, match="2 targets but 1 shares"):
        chain_filter_argvs("a", ["t1", "t2"], [0.5], first_prio=1)


# the kernel mirror of an application service (cosample.lab.appmirror's ``tc``) -----------------
DDD = "4\n40 0 0 12\n21 0 1 2048\n6 0 0 262144\n6 0 0 0\n"


def test_ddd_output_becomes_tc_bytecode():
    assert bytecode_from_ddd(DDD) == "4,40 0 0 12,21 0 1 2048,6 0 0 262144,6 0 0 0"


@pytest.mark.parametrize(
    "bad", ["", "x\n", "3\n40 0 0 12\n", "1\n40 0 12\n", "2\n6 0 0 1\n6 a 0 0\n"]
)
def test_bad_ddd_output_is_rejected(bad):
    with pytest.raises(TcMirrorError, match="tcpdump -ddd"):
        bytecode_from_ddd(bad)


def test_selective_filter_carries_the_given_program_on_the_given_hook():
    argv = selective_filter_argv(
        "sw0", "vt0", "1,6 0 0 65535", prio=40, direction="egress", netns="ns1"
    )
    assert argv == [
        "tc",
        "-n",
        "ns1",
        "filter",
        "replace",
        "dev",
        "sw0",
        "egress",
        "protocol",
        "all",
        "prio",
        "40",
        "handle",
        "1",
        "bpf",
        "bytecode",
        "1,6 0 0 65535",
        "action",
        "mirred",
        "egress",
        "mirror",
        "dev",
        "vt0",
    ]
    with pytest.raises(TcMirrorError, match="direction"):
        selective_filter_argv("sw0", "vt0", "1,6 0 0 1", prio=40, direction="both")
