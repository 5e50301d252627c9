"""Each protocol's monitoring costs calibrated as HTTP/1.x's are
(``cosample.experiments.appmon_protocol_calibration``): the fit per protocol from a phases table
with a known answer, the stopping rule, the JSON it writes beside an HTTP/1.x calibration, the
committed measurement refitted, and a tiny real run (root, OVS, nginx, wrk, h2load)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from numeric import same_numbers

from cosample.costmodel.adaptive import Target
from cosample.costmodel.calibration_file import read_calibration_file
from cosample.experiments import appmon_protocol_calibration as calibration
from cosample.lab.securemirror import secure_rig_unavailable
from cosample.planner.appmon_costs import costs_from_calibration, protocol_key

ROOT = Path(__file__).resolve().parents[2]
HTTP = ROOT / "docs" / "data" / "appmon-costs" / "calibration-appmon.json"
DATA = ROOT / "docs" / "data" / "appmon-protocols"
#: per protocol: (ovs-vswitchd's extra us per request at share 1 for the selective mirror, the
#: on-site analyser's, nginx's extra for the kernel mirror)
KNOWN = {"tls": (20.0, 40.0, 6.0), "h2c": (30.0, 120.0, 9.0), "http": (10.0, 50.0, 3.0)}


def table(rounds: int = 3, protocols=("tls", "h2c"), noise: float = 0.0) -> pd.DataFrame:
    """Phases of a host with 100 us per request unmonitored (nginx 30 us of the server's 50,
    ovs-vswitchd 50), each mechanism adding ``KNOWN`` at share 1 (the backend 7 more in the
    kernel mirror's phases); ``noise``: an alternating
    error of that many us per request on ovs-vswitchd's CPU in the mirrors' phases."""
    rows = []
    for protocol in protocols:
        selective, onsite, kernel = KNOWN[protocol]
        for number in range(rounds):

            def row(
                arm, nominal, truncate=None, vswitchd=50.0, nginx=30.0, monitor=0.0, backend=20.0
            ):
                requests, mirror = 10_000, arm.endswith("_mirror")
                error = mirror * noise * (1 if len(rows) % 2 else -1)
                rows.append(
                    {column: None for column in calibration.COLUMNS}
                    | {
                        "protocol": protocol,
                        "port": calibration.PORTS[protocol],
                        "round": number,
                        "arm": arm,
                        "truncate": truncate,
                        "share_nominal": nominal,
                        "seconds": 4,
                        "connections": 32,
                        "requests": requests,
                        "requests_per_s": 2000,
                        "server_cpu_s": (nginx + backend) * 1e-6 * requests,
                        "nginx_cpu_s": nginx * 1e-6 * requests,
                        "vswitchd_cpu_s": (vswitchd + error) * 1e-6 * requests,
                        "monitor_cpu_s": monitor * 1e-6 * requests,
                        "server_port_packets": 6 * requests,
                        "analysis_inner_packets": 6 * nominal * requests * mirror,
                        "analysis_bytes": 4000 * nominal * requests * mirror,
                    }
                )

            row("none", 0.0)
            row("sniffer_onsite", 1.0, monitor=onsite)
            for share in (0.25, 0.5, 1.0):
                row("selective_mirror", share, vswitchd=50 + selective * share, monitor=40 * share)
                if protocol != "h2c":
                    row("truncated_mirror", share, truncate=78, vswitchd=50 + selective * share)
                # the backend, past no mirror, busier by chance: not the kernel mirror's cost
                row(
                    "kernel_mirror",
                    share,
                    vswitchd=50 + kernel * share,
                    nginx=30 + kernel * share,
                    backend=20 + 7 * share,
                )
    return pd.DataFrame(rows, columns=list(calibration.COLUMNS))


def test_each_protocol_gets_its_own_known_costs():
    sections = calibration.fit(table())
    assert sorted(sections) == ["h2c", "tls"]
    for protocol, section in sections.items():
        selective, onsite, kernel = KNOWN[protocol]
        mechanisms = section["mechanisms"]
        assert section["base_cpu_s_per_request"] == pytest.approx(100e-6)
        assert mechanisms["selective_mirror"]["cpu_s_per_request"] == pytest.approx(
            selective * 1e-6
        )
        assert mechanisms["selective_mirror"]["coefficient"] == pytest.approx(selective / 100)
        assert mechanisms["sniffer_onsite"]["cpu_s_per_request"] == pytest.approx(onsite * 1e-6)
        # the kernel mirror: nginx's and ovs-vswitchd's extra together, not the backend's
        assert mechanisms["kernel_mirror"]["cpu_s_per_request"] == pytest.approx(2 * kernel * 1e-6)
        assert mechanisms["analysis_selective"]["cpu_s_per_request"] == pytest.approx(40e-6)
        assert section["metadata"]["protocol"] == protocol
        assert section["metadata"]["segments"] == "all"
    assert "truncated_mirror" not in sections["h2c"]["mechanisms"]  # h2c is never cut
    assert sections["tls"]["mechanisms"]["truncated_mirror"]["truncate_bytes"] == 78


def test_a_protocol_missing_an_arm_is_named():
    frame = table()
    frame = frame[~((frame["protocol"] == "tls") & (frame["arm"] == "selective_mirror"))]
    with pytest.raises(calibration.appmon_fit.AppmonFitError, match="protocol tls"):
        calibration.fit(frame)


def test_the_stopping_rule_waits_for_narrow_intervals():
    target = Target(relative=0.1, absolute=0.02, max_time_s=600, min_rounds=3)
    exact = calibration.targets_met(table(rounds=4), target)
    assert exact and all(exact.values())
    noisy = calibration.targets_met(table(rounds=4, noise=30.0), target)
    assert noisy["tls.selective_mirror"] is False
    assert noisy["tls.sniffer_onsite"] is True  # its CPU is the analyser's, untouched by noise


def test_from_csv_puts_the_protocols_beside_the_http_costs(tmp_path):
    phases = tmp_path / "phases.csv"
    table().to_csv(phases, index=False)
    out = tmp_path / "out.json"
    argv = ["--from-csv", str(phases), "--base", str(HTTP), "--out", str(out)]
    assert calibration.main(argv) == 0
    document = read_calibration_file(out)
    base = read_calibration_file(HTTP)
    assert document.appmon.mechanisms == base.appmon.mechanisms  # HTTP/1.x's kept
    assert sorted(document.appmon.protocols) == ["h2c", "tls"]
    tls = document.appmon.protocols["tls"]
    assert tls.mechanisms["selective_mirror"].cpu_s_per_request == pytest.approx(20e-6)
    costs, _ = costs_from_calibration(document.appmon, str(out))
    assert costs[protocol_key("tls", "mirror_sender")] == pytest.approx(
        20e-6 / tls.forwarding_cpu_s_per_packet
    )


def test_without_http_costs_nothing_is_written(tmp_path, capsys):
    phases = tmp_path / "phases.csv"
    table().to_csv(phases, index=False)
    out = tmp_path / "out.json"
    assert calibration.main(["--from-csv", str(phases), "--out", str(out)]) == 2
    assert "no HTTP/1.x costs" in capsys.readouterr().err
    assert not out.exists()
    # measured beside them, HTTP/1.x's phases give the section itself
    table(protocols=("http", "tls")).to_csv(phases, index=False)
    assert calibration.main(["--from-csv", str(phases), "--out", str(out)]) == 0
    appmon = read_calibration_file(out).appmon
    assert appmon.mechanisms["selective_mirror"].cpu_s_per_request == pytest.approx(10e-6)
    # HTTP/1.x is the section, not one of the protocols; theirs is compared with it, per run
    assert sorted(appmon.protocols) == ["tls"]
    versus = appmon.protocols["tls"].metadata["cpu_vs_http"]
    assert versus["selective_mirror"] == pytest.approx(20.0 / 10.0)
    assert versus["sniffer_onsite"] == pytest.approx(40.0 / 50.0)
    with pytest.raises(SystemExit):
        calibration.parse_args(["--out", str(out), "--protocols", "tls,quic"])


def test_committed_measurement_refits_to_the_committed_json(tmp_path):
    out = tmp_path / "again.json"
    argv = ["--from-csv", str(DATA / "appmon_protocol_calibration.csv"), "--out", str(out)]
    assert calibration.main([*argv, "--base", str(HTTP)]) == 0
    committed = json.loads((DATA / "calibration-protocols.json").read_text())["appmon"]
    again = json.loads(out.read_text())["appmon"]
    for section in committed["protocols"].values():
        section["metadata"].pop("run")  # how the measurement went: not in the phases
    # the same numbers to the libraries' last digits (tests/numeric.py), never bit for bit
    same_numbers(again, committed)


@pytest.mark.root
@pytest.mark.slow
def test_tiny_real_run(tmp_path):
    reason = secure_rig_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "calibration-protocols.json"
    argv = ["--seconds", "1", "--rounds", "2", "--min-rounds", "2", "--connections", "16"]
    argv += ["--protocols", "tls,h2c", "--base", str(HTTP), "--out", str(out)]
    assert calibration.main(argv) == 0
    frame = pd.read_csv(tmp_path / "calibration-protocols.csv")
    assert len(frame) == 2 * (len(calibration.arms("tls")) + len(calibration.arms("h2c")))
    assert len(calibration.arms("h2c")) == len(calibration.arms("tls")) - 3  # never truncated
    appmon = read_calibration_file(out).appmon
    tls, h2c = appmon.protocols["tls"], appmon.protocols["h2c"]
    assert (
        0
        < tls.mechanisms["truncated_mirror"].fabric_bytes_per_request
        < (tls.mechanisms["selective_mirror"].fabric_bytes_per_request)
    )
    assert "truncated_mirror" not in h2c.mechanisms
    # every segment is copied: at share 1 the copies are the packets of the server's port
    full = frame[(frame["share_nominal"] == 1) & frame["arm"].str.endswith("_mirror")]
    assert (full["analysis_inner_packets"] > 0.9 * full["server_port_packets"]).all()
    # the analysers read the protocol: TLS turns and h2c streams, nginx's requests
    onsite = frame[frame["arm"] == "sniffer_onsite"]
    assert (onsite["analyser_share"] > 0.9).all()
    assert h2c.mechanisms["sniffer_onsite"].cpu_s_per_request > 0
    assert tls.metadata["run"]["rounds_run"] == 2
