"""The seeds' comparison (``cosample.experiments.appmon_comparison``): its pure parts, and a
very short real run (root, OVS, nginx, wrk, tcpdump, tshark) whose table must have its shape,
order the mirrored bytes as the mechanisms must, and count exactly where every packet is copied."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from cosample.experiments import appmon_comparison as comparison
from cosample.experiments.appmon_monitors import parse_wrk
from cosample.experiments.errors import ExperimentError
from cosample.lab.appmirror import (
    SELECTIVE_COOKIE,
    port_mirror_args,
    rig_unavailable,
    selective_flows,
    wire_flows,
)

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "appmon"

WRK = """Running 2s test @ http://10.77.0.2/?mean_ms=1
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.07ms    1.38ms  14.50ms   71.77%
    Req/Sec     1.31k   106.42     1.48k    70.00%
  Latency Distribution
     50%    2.84ms
     75%    3.79ms
     90%    4.86ms
     99%    1.02s 
  2612 requests in 2.00s, 10.91MB read
Requests/sec:   1305.66
Transfer/sec:      5.45MB
"""


def test_wrk_report_parsed_with_units():
    report = parse_wrk(WRK)
    assert (report.requests, report.requests_per_s) == (2612, 1305.66)
    assert report.latency_mean_ms == pytest.approx(3.07)
    assert report.latency_p99_ms == pytest.approx(1020.0)


def test_wrk_report_without_distribution_is_named():
    with pytest.raises(ExperimentError, match="99th percentile"):
        parse_wrk(WRK.replace("     99%    1.02s \n", ""))


def test_mechanism_arguments():
    args = port_mirror_args("br", "vs", "vx", snaplen=128)
    assert "select_src_port=@p" in args and "select_dst_port=@p" in args
    assert "output_port=@o" in args and "snaplen=128" in args
    assert not any(a.startswith("snaplen") for a in port_mirror_args("br", "vs", "vx"))
    to_server, to_client = selective_flows(1, 2, 3, "10.77.0.2", 80, max_len=78)
    assert f"cookie={SELECTIVE_COOKIE:#x}" in to_server and "tcp_flags=+psh" in to_server
    assert "in_port=1,nw_dst=10.77.0.2,tp_dst=80" in to_server
    assert "in_port=2,nw_src=10.77.0.2,tp_src=80" in to_client
    assert to_client.endswith("actions=output:1,output(port=3,max_len=78)")
    assert selective_flows(1, 2, 3, "10.77.0.2", 80)[0].endswith("actions=output:2,output:3")
    assert wire_flows(1, 2) == [
        "priority=10,in_port=1,actions=output:2",
        "priority=10,in_port=2,actions=output:1",
    ]


def test_bad_arms_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        comparison.parse_args(["--arms", "none,bogus"])
    assert exit_info.value.code == 2
    assert "unknown bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        comparison.parse_args(["--arms", "tcpdump"])


@pytest.mark.root
@pytest.mark.slow
def test_short_comparison_on_real_traffic(tmp_path, capsys):
    reason = rig_unavailable() or (None if shutil.which("tshark") else "tshark not installed")
    if reason:
        pytest.skip(reason)
    assert (
        comparison.main(
            ["--seconds", "2", "--rounds", "1", "--connections", "4", "--out", str(tmp_path)]
        )
        == 0
    )
    frame = pd.read_csv(tmp_path / "appmon_comparison.csv")
    assert list(frame.columns) == list(comparison.COLUMNS)
    assert sorted(frame["arm"]) == sorted(arm.name for arm in comparison.ARMS)
    rows = frame.set_index("arm")
    assert (frame["requests_per_s"] > 0).all() and (frame["log_requests"] > 0).all()
    per_request = rows["analysis_bytes"] / rows["log_requests"]
    assert per_request["none"] < 1  # nothing is copied without a mechanism
    assert (
        per_request["truncated_mirror"]
        < per_request["selective_mirror"]
        < per_request["port_mirror"]
    ), per_request.to_dict()
    # every packet copied (or every segment cut to 78 bytes, or every record sent): exact; the
    # PSH copies too for requests and for the one-segment 500s (not for the 4000-byte 200s)
    for arm in (
        "port_mirror",
        "sniffer_onsite",
        "sniffer_offsite",
        "selective_all_truncated",
        "selective_mirror",
        "truncated_mirror",
    ):
        assert rows.loc[arm, "kernel_drops"] == 0
        assert rows.loc[arm, "monitor_requests"] == rows.loc[arm, "log_requests"], arm
        assert rows.loc[arm, "monitor_5xx"] == rows.loc[arm, "log_5xx"], arm
    assert (
        per_request["sniffer_offsite"]
        < per_request["truncated_mirror"]
        < per_request["selective_all_truncated"]
        < per_request["port_mirror"]
    ), per_request.to_dict()
    # OVS 3.1, userspace datapath: a Mirror's snaplen cuts the VXLAN-encapsulated copy without
    # fixing its outer lengths, and the analysis node's kernel drops every cut one: only frames
    # short enough to pass whole (bare acknowledgements) arrive (docs/ovs-facts.md)
    snaplen = rows.loc["port_mirror_snaplen"]
    assert snaplen["analysis_packets"] > snaplen["log_requests"]
    assert snaplen["analysis_inner_packets"] < snaplen["analysis_packets"] / 2
    assert snaplen["monitor_requests"] == 0 and snaplen["monitor_responses"] == 0
    assert (
        rows.loc["truncated_mirror", "analysis_inner_packets"] > 0
    )  # max_len cuts the inner frame
    summary = pd.read_csv(tmp_path / "appmon_comparison_summary.csv").set_index("arm")
    assert summary.loc["none", "throughput_vs_none"] == 1.0
    assert summary.loc["port_mirror", "bytes_vs_port_mirror"] == 1.0
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "appmon_comparison_summary.csv").exists()


@pytest.mark.parametrize("run", sorted(path.name for path in DATA.iterdir() if path.is_dir()))
def test_committed_summaries_are_what_the_tables_give(run, tmp_path):
    """docs/results/appmon.md quotes the committed runs: their summaries follow from their tables."""
    table = DATA / run / "appmon_comparison.csv"
    assert comparison.main(["--from-csv", str(table), "--out", str(tmp_path)]) == 0
    again = pd.read_csv(tmp_path / "appmon_comparison_summary.csv")
    committed = pd.read_csv(DATA / run / "appmon_comparison_summary.csv")
    pd.testing.assert_frame_equal(again, committed, check_exact=False, rtol=1e-8)
    frame = pd.read_csv(table)
    assert list(frame.columns) == list(comparison.COLUMNS)
    assert set(frame["round"]) == {0, 1, 2}
