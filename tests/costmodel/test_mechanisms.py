"""sFlow and tc-mirror mechanisms: pure decisions, then against a real OVSDB and real tc."""

from __future__ import annotations

import pytest

from cosample.costmodel.errors import HarnessError
from cosample.costmodel.mechanisms import (
    TAG,
    SflowSampling,
    TcMirror,
    sampling_n,
    sflow_create_args,
    sflow_detach_args,
)
from cosample.dataplane.run import run
from cosample.lab.netns import Lab, netns_available


def test_sampling_n_is_one_in_round_inverse():
    assert sampling_n(0.0) is None
    assert sampling_n(1.0) == 1
    assert sampling_n(0.3) == 3 and sampling_n(0.2) == 5
    assert sampling_n(1e-12) == 2**32 - 1
    with pytest.raises(HarnessError, match="sampling rate"):
        sampling_n(1.2)


def test_sflow_arguments_tag_what_they_create():
    args = sflow_create_args("br", "127.0.0.1:6343", 4)
    assert TAG in args and "sampling=4" in args
    assert args[-5:] == ["add", "bridge", "br", "sflow", "@s"]  # refuses a second row
    assert sflow_detach_args("br", "u-1") == ["remove", "bridge", "br", "sflow", "u-1"]


@pytest.mark.ovs
def test_sflow_on_a_real_ovsdb(ovs_sandbox):
    ovs = ovs_sandbox
    ovs.vsctl("add-br", "ccm0", "--", "set", "bridge", "ccm0", "datapath_type=dummy")
    sflow = SflowSampling(ovs.vsctl, "ccm0", "127.0.0.1:6343")
    assert sflow.set_rate(0.25) == 0.25
    row = ovs.vsctl("get", "bridge", "ccm0", "sflow").strip()
    assert ovs.vsctl("get", "sflow", row, "sampling").strip() == "4"
    assert ovs.vsctl("get", "sflow", row, "external_ids:cosample").strip().strip('"') == "costmodel"
    assert sflow.set_rate(0.3) == pytest.approx(1 / 3)
    assert ovs.vsctl("get", "bridge", "ccm0", "sflow").strip() == row  # updated in place
    assert ovs.vsctl("get", "sflow", row, "sampling").strip() == "3"
    assert sflow.set_rate(0.0) == 0.0
    assert ovs.vsctl("get", "bridge", "ccm0", "sflow").strip() == "[]"
    assert ovs.vsctl("list", "sflow").strip() == ""  # garbage-collected, nothing left behind


@pytest.mark.ovs
def test_sflow_switches_with_one_vsctl_call_each_way(ovs_sandbox):
    """A calibration switches sFlow every phase; each ovs-vsctl call waits for ovs-vswitchd."""
    ovs = ovs_sandbox
    ovs.vsctl("add-br", "ccm2", "--", "set", "bridge", "ccm2", "datapath_type=dummy")
    calls = []
    sflow = SflowSampling(lambda *a: calls.append(a) or ovs.vsctl(*a), "ccm2", "127.0.0.1:6343")
    for _ in range(3):
        calls.clear()
        assert sflow.set_rate(1.0) == 1.0
        assert len(calls) == 1 and ovs.vsctl("get", "bridge", "ccm2", "sflow").strip() == sflow.row
        calls.clear()
        assert sflow.set_rate(0.0) == 0.0
        assert len(calls) == 1 and ovs.vsctl("get", "bridge", "ccm2", "sflow").strip() == "[]"
    assert ovs.vsctl("list", "sflow").strip() == ""


@pytest.mark.ovs
def test_sflow_adopts_its_own_leftover_row_and_leaves_a_replacement(ovs_sandbox):
    ovs = ovs_sandbox
    ovs.vsctl("add-br", "ccm3", "--", "set", "bridge", "ccm3", "datapath_type=dummy")
    SflowSampling(ovs.vsctl, "ccm3", "127.0.0.1:6343").set_rate(0.5)  # an interrupted run's row
    leftover = ovs.vsctl("get", "bridge", "ccm3", "sflow").strip()
    sflow = SflowSampling(ovs.vsctl, "ccm3", "127.0.0.1:6343")
    assert sflow.set_rate(0.25) == 0.25 and sflow.row == leftover
    assert ovs.vsctl("get", "sflow", leftover, "sampling").strip() == "4"
    # someone else's sFlow replaces ours mid-run: clearing ours must leave theirs
    ovs.vsctl(
        "--",
        "--id=@s",
        "create",
        "sflow",
        'targets="10.0.0.9:6343"',
        "sampling=64",
        "--",
        "set",
        "bridge",
        "ccm3",
        "sflow=@s",
    )
    foreign = ovs.vsctl("get", "bridge", "ccm3", "sflow").strip()
    sflow.clear()
    assert ovs.vsctl("get", "bridge", "ccm3", "sflow").strip() == foreign


@pytest.mark.ovs
def test_foreign_sflow_row_is_refused_and_kept(ovs_sandbox):
    ovs = ovs_sandbox
    ovs.vsctl(
        "add-br",
        "ccm1",
        "--",
        "set",
        "bridge",
        "ccm1",
        "datapath_type=dummy",
        "--",
        "--id=@s",
        "create",
        "sflow",
        'targets="10.0.0.9:6343"',
        "sampling=64",
        "--",
        "set",
        "bridge",
        "ccm1",
        "sflow=@s",
    )
    sflow = SflowSampling(ovs.vsctl, "ccm1", "127.0.0.1:6343")
    with pytest.raises(HarnessError, match="did not create"):
        sflow.set_rate(0.5)
    sflow.clear()
    row = ovs.vsctl("get", "bridge", "ccm1", "sflow").strip()
    assert ovs.vsctl("get", "sflow", row, "sampling").strip() == "64"


def test_mirror_rejects_bad_rate():
    with pytest.raises(HarnessError, match="mirror rate"):
        TcMirror("x", "y").set_rate(-0.5)


@pytest.mark.root
@pytest.mark.skipif(netns_available() is not None, reason=f"real tc: {netns_available()}")
def test_tc_mirror_installs_updates_and_removes_only_its_own():
    with Lab.unique("ccM") as lab:
        port = lab.veth(f"{lab.prefix}p", peer=f"{lab.prefix}pp")
        target = lab.veth(f"{lab.prefix}t", peer=f"{lab.prefix}tp")
        mirror = TcMirror(port, target)
        assert mirror.set_rate(0.5) == 0.5
        shown = run(["tc", "filter", "show", "dev", port, "ingress"]).stdout
        assert "53 1 0 2147483648" in shown and f"Mirror to device {target}" in shown
        mirror.set_rate(1.0)
        shown = run(["tc", "filter", "show", "dev", port, "ingress"]).stdout
        assert "1,6 0 0 4294967295" in shown and shown.count("bytecode") == 1
        mirror.set_rate(0.0)
        assert "bpf" not in run(["tc", "filter", "show", "dev", port, "ingress"]).stdout
        mirror.clear()
        assert "clsact" not in run(["tc", "qdisc", "show", "dev", port]).stdout
        # a clsact that was there before is left in place
        run(["tc", "qdisc", "add", "dev", target, "clsact"])
        other = TcMirror(target, port)
        other.set_rate(0.2)
        other.clear()
        assert "clsact" in run(["tc", "qdisc", "show", "dev", target]).stdout
