"""The cpu method, adaptive stopping and the passive capacity for real: a private OVS (userspace
datapath) in namespaces, iperf3 at a fixed packet rate, a cgroup counting the forwarding.

Numbers are noisy on a shared machine, so the checks are what must hold whatever the noise:
the load was offered at the set rate and forwarded, the CPU time counted is positive and
contains ovs-vswitchd's, the files are well-formed, a CPU hog lowers the passive capacity, and
nothing is left behind (namespaces, links, cgroups).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from costmodel_leftovers import leftovers
from waiting import interrupt

from cosample.cli import main
from cosample.costmodel.accounting import accounting_hierarchy
from cosample.costmodel.onehost import one_host_testbed_unavailable

REASON = one_host_testbed_unavailable()
pytestmark = [
    pytest.mark.root,
    pytest.mark.ovs,
    pytest.mark.slow,
    pytest.mark.skipif(REASON is not None, reason=f"real cpu calibration: {REASON}"),
]
PREFIX = "ccJ"


def test_short_adaptive_cpu_calibration(tmp_path):
    data, output = tmp_path / "m.csv", tmp_path / "c.json"
    code = main(
        [
            "calibrate",
            "--testbed",
            "--prefix",
            PREFIX,
            "--method",
            "cpu",
            "--mechanisms",
            "sflow,mirror",
            "--rates",
            "0,1",
            "--duration",
            "3",
            "--phases",
            "6",
            "--offered-pps",
            "5000",
            "--burst",
            "10",
            "--warmup",
            "1",
            "--target-ci",
            "0.05",
            "--max-time",
            "25",
            "--bootstrap",
            "200",
            "--no-progress",
            "-d",
            str(data),
            "-o",
            str(output),
        ]
    )
    assert code == 0
    assert leftovers(PREFIX) == []
    frame = pd.read_csv(data)
    assert (frame["method"] == "cpu").all() and set(frame["mechanism"]) == {"sflow", "mirror"}
    # the load was the offered one, in bursts, and it was forwarded (generous: a shared machine)
    assert frame["forwarded_pps"].median() == pytest.approx(5000, rel=0.2)
    assert (frame["cost_ns_per_packet"] > 0).all()
    assert (frame["cpu_counted"] > frame["cpu_ovs"]).all() and (frame["cpu_ovs"] > 0).all()
    capacity = frame["budget_cpus"] * 1e9 / frame["cost_ns_per_packet"]
    assert frame["throughput_pps"].to_numpy() == pytest.approx(capacity.to_numpy(), rel=1e-4)
    mirror = frame[(frame["mechanism"] == "mirror") & (frame["rate"] == 1)]
    assert (mirror["copies_pps"] / mirror["sent_pps"]).median() == pytest.approx(1, abs=0.15)
    document = json.loads(output.read_text())
    metadata = document["metadata"]
    assert metadata["method"] == "cpu" and metadata["offered_pps"] == 5000
    assert metadata["burst"] == 10
    assert set(metadata["rounds"]) == {"sflow", "mirror"} and min(metadata["rounds"].values()) >= 1
    assert set(metadata["target_met"]) == {"sflow", "mirror"}
    assert "cgroup" in metadata["accounting"]
    for entry in document["mechanisms"].values():
        low, high = entry["coefficient_ci"]
        assert math.isfinite(low) and low <= entry["coefficient"] <= high


def test_a_cpu_hog_lowers_the_passive_capacity_within_one_interval(tmp_path):
    data, figure = tmp_path / "hog.csv", tmp_path / "hog.png"
    code = main(
        [
            "calibrate",
            "--passive",
            "--testbed",
            "--prefix",
            PREFIX,
            "--count",
            "4",
            "--hog-at",
            "2",
            "--interval",
            "1.5",
            "--cpu-budget",
            "1",
            "--offered-pps",
            "5000",
            "-d",
            str(data),
            "--figure",
            str(figure),
        ]
    )
    assert code == 0
    assert leftovers(PREFIX) == []
    frame = pd.read_csv(data)
    assert frame["hog"].tolist() == [False, False, True, True]
    before = frame[~frame["hog"]]["capacity_pps"].min()
    first_with_hog = frame[frame["hog"]]["capacity_pps"].iloc[0]
    assert first_with_hog < 0.75 * before
    assert frame["cost_source"].tolist() == ["measured", "measured", "calibration", "calibration"]
    assert (frame["forwarded_pps"] > 2000).all()
    assert figure.stat().st_size > 10_000


def test_interrupted_cpu_calibration_removes_its_cgroup_and_writes_nothing(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    data, output = tmp_path / "m.csv", tmp_path / "c.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "calibrate",
            "--testbed",
            "--prefix",
            PREFIX,
            "--method",
            "cpu",
            "--mechanisms",
            "mirror",
            "--offered-pps",
            "5000",
            "--target-ci",
            "0.001",
            "--max-time",
            "60",
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
        cgroup = accounting_hierarchy() / f"cosample-{PREFIX}"
        while time.monotonic() < deadline and not cgroup.exists():
            time.sleep(0.2)
        time.sleep(3)  # inside the first run
    finally:
        stderr = interrupt(process, signal.SIGTERM)
    assert process.returncode == 130, stderr
    assert leftovers(PREFIX) == [] and not data.exists() and not output.exists()
