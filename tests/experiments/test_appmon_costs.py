"""The application mechanisms' cost experiment (``cosample.experiments.appmon_costs``): the
share flows, the fit from a phases table with a known answer, the JSON it writes, and a tiny
real run (root, OVS, nginx, wrk)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from numeric import same_numbers

from cosample.costmodel.calibration_file import AppmonCalibration, read_calibration_file
from cosample.experiments import appmon_costs
from cosample.lab.appmirror import rig_unavailable, selective_flows
from cosample.planner.appmon_costs import costs_from_calibration

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "appmon-costs"


def test_share_flows_match_client_port_bits_above_bit_0():
    to_server, to_client = selective_flows(1, 2, 3, "10.77.0.2", 80, share_bits=2)
    assert "tp_dst=80,tp_src=0/0x6,actions" in to_server
    assert "tp_src=80,tp_dst=0/0x6,actions" in to_client
    assert "0/0x" not in "".join(selective_flows(1, 2, 3, "10.77.0.2", 80))
    with pytest.raises(ValueError, match="share_bits"):
        selective_flows(1, 2, 3, "10.77.0.2", 80, share_bits=16)


def table(rounds: int = 3, kernel: bool = False) -> pd.DataFrame:
    """Phases of a host with 100 us per request unmonitored; the selective mirror adds 10 us
    per request at share 1 (a = 0.1), the truncated one 4 us; the sniffer 50 us (a = 0.5);
    with ``kernel``, the kernel mirror 3 us in ovs-vswitchd and 3 us in nginx (a = 0.06)."""
    rows = []
    for number in range(rounds):

        def row(
            arm,
            nominal,
            truncate=None,
            vswitchd=50e-6,
            monitor=0.0,
            copies=0.0,
            fabric=0.0,
            requests=10_000,
            packets=8.0,
            server=50e-6,
        ):
            rows.append(
                {column: None for column in appmon_costs.COLUMNS}
                | {
                    "round": number,
                    "arm": arm,
                    "truncate": truncate,
                    "share_nominal": nominal,
                    "seconds": 4,
                    "connections": 32,
                    "requests": requests,
                    "requests_per_s": 2000,
                    "server_cpu_s": server * requests,
                    "vswitchd_cpu_s": vswitchd * requests,
                    "monitor_cpu_s": monitor * requests,
                    "server_port_packets": packets * requests,
                    "analysis_inner_packets": copies * requests,
                    "analysis_bytes": fabric * requests,
                }
            )

        row("none", 0.0)
        row("sniffer_onsite", 1.0, monitor=50e-6)
        for share in (0.25, 0.5, 1.0):
            row(
                "selective_mirror",
                share,
                vswitchd=(50 + 10 * share) * 1e-6,
                monitor=30e-6 * share,
                copies=2 * share,
                fabric=1500 * share,
            )
            row(
                "truncated_mirror",
                share,
                truncate=78,
                vswitchd=(50 + 4 * share) * 1e-6,
                monitor=20e-6 * share,
                copies=2 * share,
                fabric=256 * share,
            )
            if kernel:
                row(
                    "kernel_mirror",
                    share,
                    vswitchd=(50 + 3 * share) * 1e-6,
                    server=(50 + 3 * share) * 1e-6,
                    monitor=30e-6 * share,
                    copies=2 * share,
                    fabric=1520 * share,
                )
    return pd.DataFrame(rows, columns=list(appmon_costs.COLUMNS))


def test_fit_gives_the_known_coefficients():
    section = appmon_costs.fit(table())
    mechanisms = section["mechanisms"]
    assert section["base_cpu_s_per_request"] == pytest.approx(100e-6)
    assert mechanisms["sniffer_onsite"]["coefficient"] == pytest.approx(0.5)
    assert mechanisms["sniffer_onsite"]["cpu_s_per_packet"] == pytest.approx(50e-6 / 8)
    assert mechanisms["selective_mirror"]["coefficient"] == pytest.approx(0.1)
    assert mechanisms["selective_mirror"]["cpu_s_per_packet"] == pytest.approx(5e-6)
    assert mechanisms["truncated_mirror"]["coefficient"] == pytest.approx(0.04)
    assert mechanisms["truncated_mirror"]["truncate_bytes"] == 78
    assert mechanisms["analysis_selective"]["cpu_s_per_request"] == pytest.approx(30e-6)
    assert mechanisms["analysis_truncated"]["cpu_s_per_packet"] == pytest.approx(10e-6)
    assert mechanisms["selective_mirror"]["fabric_bytes_per_request"] == pytest.approx(1500)
    assert mechanisms["analysis_truncated"]["fabric_bytes_per_request"] == pytest.approx(256)


def test_the_kernel_mirror_costs_the_server_and_switch_cpu_together():
    mechanisms = appmon_costs.fit(table(kernel=True))["mechanisms"]
    kernel = mechanisms["kernel_mirror"]
    assert kernel["coefficient"] == pytest.approx(0.06)
    assert kernel["cpu_s_per_request"] == pytest.approx(6e-6)
    assert kernel["cpu_s_per_packet"] == pytest.approx(3e-6)
    assert kernel["fabric_bytes_per_request"] == pytest.approx(1520)
    assert mechanisms["analysis_kernel"]["cpu_s_per_request"] == pytest.approx(30e-6)
    assert mechanisms["selective_mirror"]["coefficient"] == pytest.approx(0.1)  # untouched
    assert "kernel_mirror" not in appmon_costs.fit(table())["mechanisms"]  # older phases CSVs


def test_the_planner_reads_the_fitted_kernel_mirror_as_its_sender_cost():
    section = AppmonCalibration.model_validate(appmon_costs.fit(table(kernel=True)))
    costs, notes = costs_from_calibration(section, "calibration.json")
    unit = section.forwarding_cpu_s_per_packet
    assert costs["kernel_mirror_sender"] == pytest.approx(6e-6 / unit)
    assert costs["mirror_sender"] == pytest.approx(10e-6 / unit)
    assert not any("kernel_mirror" in note for note in notes)


def test_from_csv_writes_a_valid_calibration_beside_alpha_and_beta(tmp_path):
    phases = tmp_path / "phases.csv"
    table().to_csv(phases, index=False)
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"alpha": 1.5, "beta": 0.4, "capacity_pps": 90000.0}))
    out = tmp_path / "out.json"
    assert (
        appmon_costs.main(["--from-csv", str(phases), "--base", str(base), "--out", str(out)]) == 0
    )
    document = read_calibration_file(out)
    assert (document.alpha, document.beta) == (1.5, 0.4)
    assert document.appmon.mechanisms["selective_mirror"].coefficient == pytest.approx(0.1)


def test_bad_inputs_exit_non_zero_and_write_nothing(tmp_path, capsys):
    phases = tmp_path / "phases.csv"
    table()[lambda f: f["arm"] != "none"].to_csv(phases, index=False)
    out = tmp_path / "out.json"
    assert appmon_costs.main(["--from-csv", str(phases), "--out", str(out)]) == 2
    assert "no phase without monitoring" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit):
        appmon_costs.parse_args(["--out", str(out), "--confidence", "1.5"])


def test_committed_measurement_refits_to_the_committed_json(tmp_path):
    out = tmp_path / "again.json"
    assert appmon_costs.main(["--from-csv", str(DATA / "appmon_costs.csv"), "--out", str(out)]) == 0
    committed = json.loads((DATA / "calibration-appmon.json").read_text())
    # the same numbers to the libraries' last digits (tests/numeric.py), never bit for bit
    same_numbers(json.loads(out.read_text())["appmon"], committed["appmon"])


@pytest.mark.root
@pytest.mark.slow
def test_tiny_real_run(tmp_path):
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "calibration-appmon.json"
    assert (
        appmon_costs.main(
            ["--seconds", "1", "--rounds", "2", "--connections", "16", "--out", str(out)]
        )
        == 0
    )
    frame = pd.read_csv(tmp_path / "calibration-appmon.csv")
    assert len(frame) == 2 * len(appmon_costs.ARMS)
    section = read_calibration_file(out).appmon
    full = section.mechanisms["selective_mirror"].fabric_bytes_per_request
    truncated = section.mechanisms["truncated_mirror"].fabric_bytes_per_request
    assert 0 < truncated < full  # truncation must cut the bytes on the fabric
    assert section.mechanisms["sniffer_onsite"].cpu_s_per_request > 0
    kernel = frame[frame["arm"] == "kernel_mirror"]
    # the tc copies reach vx1: every connection's at share 1; at 1/4 or 1/2 a 1-s phase of 16
    # connections may select none (a CI run under load had one such phase), so only in total
    assert (kernel[kernel["share_bits"] == 0]["analysis_inner_packets"] > 0).all()
    assert kernel[kernel["share_bits"] > 0]["analysis_inner_packets"].sum() > 0
    assert section.mechanisms["kernel_mirror"].fabric_bytes_per_request > 0
    onsite = frame[frame["arm"] == "sniffer_onsite"]
    assert (onsite["analysis_inner_packets"] == 0).all()  # nothing crosses the fabric
