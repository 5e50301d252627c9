"""A short real calibration: iperf3 through a private OVS (userspace datapath) in namespaces.

Numbers here are noisy (shared CPUs, 1-second runs), so the test checks what must hold
whatever the noise: the files exist and are well-formed, coefficients and intervals are
finite, each trial moved packets, the mechanisms copied about the fraction they were set to,
and the testbed left nothing behind.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from costmodel_leftovers import leftovers
from waiting import interrupt

from cosample.cli import main
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.onehost import OneHostTestbed, one_host_testbed_unavailable
from cosample.dataplane.run import run

REASON = one_host_testbed_unavailable()
pytestmark = [
    pytest.mark.root,
    pytest.mark.ovs,
    pytest.mark.slow,
    pytest.mark.skipif(REASON is not None, reason=f"real calibration: {REASON}"),
]
PREFIX = "ccI"


def test_short_real_calibration(tmp_path):
    data, output, figure = tmp_path / "m.csv", tmp_path / "c.json", tmp_path / "c.png"
    code = main(
        [
            "calibrate",
            "--testbed",
            "--prefix",
            PREFIX,
            "--method",
            "throughput",
            "--protocol",
            "udp",
            "--mechanisms",
            "sflow,mirror,mirror_vxlan",
            "--rates",
            "0,0.5,1",
            "--repetitions",
            "1",
            "--duration",
            "4",
            "--phases",
            "4",
            "--warmup",
            "1",
            "--bootstrap",
            "200",
            "--no-progress",
            "-d",
            str(data),
            "-o",
            str(output),
            "--figure",
            str(figure),
        ]
    )
    assert code == 0
    assert leftovers(PREFIX) == []
    frame = pd.read_csv(data)
    document = json.loads(output.read_text())
    # a phase the load did not cover (it ended, or forwarded nothing) is measured again: a
    # loaded host costs time and these counts, never a row
    metadata = document["metadata"]
    remeasured = {k: metadata[k] for k in ("empty_phases", "restarted_loads", "unmeasured_phases")}
    assert remeasured["unmeasured_phases"] == 0, remeasured
    # paired design: 3 mechanisms x 2 rates x 1 repetition runs, 4 phases each, half at rate 0
    assert len(frame) == 24, (frame.groupby("block").size().to_dict(), remeasured)
    assert set(frame["mechanism"]) == {"sflow", "mirror", "mirror_vxlan"}
    assert frame["block"].nunique() == 6 and (frame["rate"] == 0).sum() == 12
    assert (frame["throughput_pps"] > 1000).all() and (frame["sent_pps"] > 1000).all()
    # the configured fraction is what the mechanisms really copied (generous: short, noisy runs)
    mirror = frame[frame["mechanism"].isin(["mirror", "mirror_vxlan"])]
    observed = mirror["copies_pps"] / mirror["sent_pps"]
    assert observed.to_numpy() == pytest.approx(mirror["rate"].to_numpy(), abs=0.15)
    sflow = frame[(frame["mechanism"] == "sflow") & (frame["rate"] > 0)]
    observed = sflow["copies_pps"] / sflow["throughput_pps"]  # UDP: samples of what OVS forwarded
    assert observed.to_numpy() == pytest.approx(sflow["rate"].to_numpy(), rel=0.35)
    assert (mirror[mirror["rate"] == 0]["copies_pps"] < 50).all()  # stray IPv6 ND at most
    for key in ("alpha", "beta", "capacity_pps"):
        assert math.isfinite(document[key])
    for entry in document["mechanisms"].values():
        low, high = entry["coefficient_ci"]
        assert math.isfinite(low) and math.isfinite(high) and low <= high
        assert entry["n_points"] == 8 and entry["n_blocks"] == 2
    assert figure.stat().st_size > 10_000


def test_testbed_removes_what_it_built_on_error():
    with pytest.raises(HarnessError, match="boom"):
        with OneHostTestbed(PREFIX, tunnel=True) as testbed:
            assert testbed.endpoints.bridge == f"{PREFIX}br0"
            assert f"{PREFIX}va" in testbed.ovs.vsctl("list-ports", f"{PREFIX}br0")
            assert testbed.endpoints.tunnel_target == f"{PREFIX}vx"
            directory = testbed.directory
            assert (directory / "conf.db").exists()
            raise HarnessError("boom")
    assert leftovers(PREFIX) == [] and not directory.exists()


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_calibration_cleans_up_and_writes_nothing(tmp_path, signal_number):
    prefix = "ccJ"
    data, output = tmp_path / "m.csv", tmp_path / "c.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "calibrate",
            "--testbed",
            "--prefix",
            prefix,
            "--method",
            "throughput",
            "--rates",
            "0,1",
            "--repetitions",
            "5",
            "--duration",
            "4",
            "--warmup",
            "0",
            "--no-progress",
            "-d",
            str(data),
            "-o",
            str(output),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and f"{prefix}vb" not in run(["ip", "-o", "link"]).stdout:
            time.sleep(0.2)
        time.sleep(3)  # inside the first runs
    finally:
        stderr = interrupt(process, signal_number)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert leftovers(prefix) == [] and not data.exists() and not output.exists()


def test_existing_endpoints_mode_touches_only_its_mechanisms(tmp_path):
    """A bridge and 'VMs' built beforehand stand in for a real server: calibrate drives them
    through --ovsdb, port names and exec prefixes, and leaves them as it found them."""
    data, output = tmp_path / "m.csv", tmp_path / "c.json"
    with OneHostTestbed("ccK") as testbed:
        e = testbed.endpoints
        code = main(
            [
                "calibrate",
                "--method",
                "throughput",
                "--ovsdb",
                testbed.ovs.remote,
                "--bridge",
                e.bridge,
                "--sender-port",
                e.sender_port,
                "--receiver-port",
                e.receiver_port,
                "--receiver-ip",
                e.receiver_ip,
                "--mirror-target",
                e.mirror_target,
                "--sender-exec",
                " ".join(e.sender_exec),
                "--receiver-exec",
                " ".join(e.receiver_exec),
                "--rates",
                "0,0.5,1",
                "--repetitions",
                "1",
                "--duration",
                "2",
                "--phases",
                "2",
                "--warmup",
                "0",
                "--bootstrap",
                "100",
                "--no-progress",
                "-d",
                str(data),
                "-o",
                str(output),
            ]
        )
        assert code == 0
        assert testbed.ovs.vsctl("get", "bridge", e.bridge, "sflow").strip() == "[]"
        assert "clsact" not in run(["tc", "qdisc", "show", "dev", e.sender_port]).stdout
        assert set(testbed.ovs.vsctl("list-ports", e.bridge).split()) == {
            e.sender_port,
            e.receiver_port,
        }
    frame = pd.read_csv(data)
    assert len(frame) == 8 and (frame["throughput_pps"] > 0).all()
    metadata = json.loads(output.read_text())["metadata"]
    assert metadata["mode"] == "existing endpoints" and metadata["datapath"] == "netdev"
