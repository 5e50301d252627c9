"""A selective mirror with a planned ``share`` < 1 copies the connections whose client port's
low bits fall below the selected residue: exhaustively on the masks, in the desired flows, and
in the text real OVS prints back (so reconcile is idempotent)."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess

import pytest

from cosample.agents.appmon_state import (
    analyser_spec,
    bpf_filter,
    client_port_masks,
    desired_appmon,
)
from cosample.plan.appmon import SHARE_BITS, selected_share
from cosample.plan.document import plan_from_dict

WHOLE = 1 << SHARE_BITS


def selected_by(masks: tuple[str, ...]) -> set[int]:
    chosen = set()
    for text in masks:
        value, mask = (int(part, 16) for part in text.split("/"))
        chosen |= {port for port in range(WHOLE) if port & mask == value}
    return chosen


@pytest.mark.parametrize("selected", range(1, WHOLE))
def test_masks_select_exactly_the_residues_below(selected):
    masks = client_port_masks(selected)
    assert selected_by(masks) == set(range(selected))
    assert len(masks) == bin(selected).count("1")


def test_shares_round_down_and_keep_one():
    assert selected_share(None) == selected_share(1.0) == WHOLE
    assert selected_share(0.5) == WHOLE // 2
    assert selected_share(0.999) == WHOLE - 1
    assert selected_share(1e-6) == 1
    assert client_port_masks(WHOLE) == ("",)


def _plan(make_plan, share):
    doc = make_plan()
    entry = {
        "service": {"address": "10.0.0.12", "port": 8080},
        "mechanism": "selective_mirror",
        "to": "s4",
    }
    if share is not None:
        entry["share"] = share
    doc["hosts"]["s1"]["appmon"] = [copy.deepcopy(entry)]
    return plan_from_dict(doc)


def test_desired_flows_carry_the_masks(make_plan):
    plan = _plan(make_plan, 0.375)
    (rule,) = desired_appmon(plan, plan.hosts["s1"]).rules
    assert sorted(match for _, match in rule.matches) == [
        "tcp,nw_dst=10.0.0.12,tp_src=0x0/0xc0,tp_dst=8080,tcp_flags=+psh",
        "tcp,nw_dst=10.0.0.12,tp_src=0x40/0xe0,tp_dst=8080,tcp_flags=+psh",
        "tcp,nw_src=10.0.0.12,tp_src=8080,tp_dst=0x0/0xc0,tcp_flags=+psh",
        "tcp,nw_src=10.0.0.12,tp_src=8080,tp_dst=0x40/0xe0,tcp_flags=+psh",
    ]
    everything = _plan(make_plan, None)
    (whole,) = desired_appmon(everything, everything.hosts["s1"]).rules
    assert len(whole.matches) == 2


def test_ovs_prints_the_flows_as_the_agent_writes_them(make_plan, ovs_sandbox):
    plan = _plan(make_plan, 0.7)
    (rule,) = desired_appmon(plan, plan.hosts["s1"]).rules
    bridge = "brshare"
    ovs_sandbox.vsctl("add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=dummy")
    for priority, match in rule.matches:
        ovs_sandbox.ofctl(
            "add-flow", bridge, f"cookie=0x7,priority={priority},{match},actions=NORMAL"
        )
    dumped = ovs_sandbox.ofctl("--no-stats", "--no-names", "dump-flows", bridge)
    printed = {
        re.sub(r"^\s*cookie=0x7, ", "", line).strip()
        for line in dumped.splitlines()
        if "cookie=0x7" in line
    }
    assert printed == {f"priority={p},{m} actions=NORMAL" for p, m in rule.matches}
    assert len(printed) == 2 * bin(selected_share(0.7)).count("1")


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump (Debian package) absent")
@pytest.mark.parametrize("address", ["10.0.0.12", "fd00::c"])
def test_the_sniffers_filter_selects_the_same_connections(address):
    text = bpf_filter(address, 8080, "psh", selected_share(0.375))
    assert text.count("& 255) < 96") == 2
    result = subprocess.run(["tcpdump", "-d", text], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr
    assert bpf_filter(address, 8080, "psh") == bpf_filter(address, 8080, "psh", WHOLE)


def test_the_analyser_spec_says_what_share_to_renormalise_by(make_plan):
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = [
        {
            "service": {"address": "10.0.0.12", "port": 8080},
            "mechanism": "sniffer",
            "interface": "vm1",
            "to": None,
            "share": 0.375,
        },
        {
            "service": {"address": "10.0.0.13", "port": 80},
            "mechanism": "selective_mirror",
            "to": "s4",
            "share": 0.5,
        },
    ]
    plan = plan_from_dict(doc)
    (sniffer,) = analyser_spec(plan, plan.hosts["s1"])
    assert sniffer["share"] == 0.375 and "< 96" in sniffer["bpf"]
    (mirrored,) = analyser_spec(plan, plan.hosts["s4"])
    assert mirrored["share"] == 0.5 and "<" not in mirrored["bpf"]


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump (Debian package) absent")
@pytest.mark.parametrize("address, client", [("10.0.0.12", "10.0.0.99"), ("fd00::c", "fd00::63")])
def test_the_sniffers_filter_keeps_whole_connections_on_real_frames(tmp_path, address, client):
    """tcpdump reads a capture of 64 connections (request PSH and response PSH each) through the
    filter: exactly the connections below the residue pass, both their directions."""
    from cosample.appmon.pcap import tcp_frame, write_pcap

    psh_ack = 0x18
    ports = [40000 + 37 * i for i in range(64)]
    records = []
    for i, port in enumerate(ports):
        records.append((1.0 + i, tcp_frame(client, address, port, 8080, 1, psh_ack, b"GET /")))
        records.append((1.5 + i, tcp_frame(address, client, 8080, port, 1, psh_ack, b"HTTP")))
    capture = write_pcap(tmp_path / "c.pcap", records)
    selected = selected_share(0.3)
    result = subprocess.run(
        ["tcpdump", "-nn", "-r", str(capture), "-q", bpf_filter(address, 8080, "psh", selected)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 0, result.stderr
    kept = sorted(
        int(re.search(r"\.(\d+) [<>]", line).group(1))
        if f".{8080} >" not in line
        else int(re.search(r"\.(\d+):", line).group(1))
        for line in result.stdout.splitlines()
    )
    expected = sorted([p for p in ports if p & 0xFF < selected] * 2)
    assert kept == expected and 0 < len(expected) < 2 * len(ports)
