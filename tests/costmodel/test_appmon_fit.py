"""The application mechanisms' fit (``costmodel.appmon_fit``) on phases with a known answer, and
the calibration JSON's optional ``appmon`` section."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from cosample.costmodel import appmon_fit
from cosample.costmodel.calibration_file import CalibrationFileError, read_calibration_file


def phases(
    a: float,
    c0: float = 100e-6,
    rounds: int = 6,
    noise: float = 0.0,
    copies: float = 4.0,
    seed: int = 7,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A host spending c0 per request unmonitored (half server, half switch), and a mirror
    adding a*c0 per request at share 1 to the switch, with ``copies`` copies per request."""
    rng = np.random.default_rng(seed)
    base, mirror = [], []
    for number in range(rounds):
        requests = 10_000
        base.append(
            {
                "round": number,
                "share": 0.0,
                "requests": requests,
                "server_cpu_s": c0 / 2 * requests,
                "vswitchd_cpu_s": c0 / 2 * requests * (1 + rng.normal(0, noise)),
            }
        )
        for share in (0.25, 0.5, 1.0):
            per_request = c0 / 2 + a * c0 * share
            mirror.append(
                {
                    "round": number,
                    "share": share,
                    "share_nominal": share,
                    "requests": requests,
                    "server_cpu_s": c0 / 2 * requests,
                    "vswitchd_cpu_s": per_request * requests * (1 + rng.normal(0, noise)),
                    "analysis_inner_packets": copies * share * requests,
                    "analysis_bytes": 300.0 * share * requests,
                    "monitor_cpu_s": 20e-6 * share * requests,
                    "mirrored_requests": share * requests,
                }
            )
    return pd.DataFrame(base), pd.DataFrame(mirror)


def test_exact_phases_give_the_coefficient_back():
    base, mirror = phases(a=0.3)
    law = appmon_fit.host_law(base, mirror, "vswitchd_cpu_s", "analysis_inner_packets")
    assert law["law"] == "share" and law["n_rounds"] == 6
    assert law["coefficient"] == pytest.approx(0.3)
    assert law["cpu_s_per_request"] == pytest.approx(30e-6)
    assert law["base_cpu_s_per_request"] == pytest.approx(100e-6)
    assert law["cpu_s_per_packet"] == pytest.approx(30e-6 / 4)
    low, high = law["coefficient_ci"]
    assert low == pytest.approx(0.3) and high == pytest.approx(0.3)


def test_noisy_phases_cover_the_truth_and_narrow_with_rounds():
    few = appmon_fit.host_law(*phases(a=0.3, noise=0.05, rounds=4), "vswitchd_cpu_s")
    many = appmon_fit.host_law(*phases(a=0.3, noise=0.05, rounds=40), "vswitchd_cpu_s")
    for law in (few, many):
        assert law["coefficient_ci"][0] < 0.3 < law["coefficient_ci"][1]
    width = [law["coefficient_ci"][1] - law["coefficient_ci"][0] for law in (few, many)]
    assert width[1] < width[0] / 2


def test_linear_cost_and_fabric_bytes():
    base, mirror = phases(a=0.3)
    cost = appmon_fit.linear_cost(
        mirror, "monitor_cpu_s", "mirrored_requests", "analysis_inner_packets"
    )
    assert cost["law"] == "linear"
    assert cost["cpu_s_per_request"] == pytest.approx(20e-6)
    assert cost["cpu_s_per_packet"] == pytest.approx(5e-6)
    fabric = appmon_fit.fabric_bytes(pd.concat([base.assign(analysis_bytes=0.0), mirror]))
    assert fabric["fabric_bytes_per_request"] == pytest.approx(300.0)


def test_realised_share_is_copies_relative_to_the_full_phase():
    frame = pd.DataFrame(
        {
            "round": [0, 0, 0, 1, 1, 1],
            "share_nominal": [0.25, 0.5, 1.0] * 2,
            "requests": [100] * 6,
            "analysis_inner_packets": [100, 200, 400, 0, 220, 440],
        }
    )
    assert list(appmon_fit.realised_share(frame)) == [0.25, 0.5, 1.0, 0.0, 0.5, 1.0]
    with pytest.raises(appmon_fit.AppmonFitError, match="share-1 phase"):
        appmon_fit.realised_share(frame[frame["share_nominal"] < 1])


def test_one_share_only_is_refused():
    base, mirror = phases(a=0.3)
    with pytest.raises(appmon_fit.AppmonFitError, match="one share only"):
        appmon_fit.host_law(base, mirror[mirror["share"] == 1.0], "vswitchd_cpu_s")
    with pytest.raises(appmon_fit.AppmonFitError, match="no phase without monitoring"):
        appmon_fit.host_law(base.iloc[:0].assign(round=[]), mirror, "vswitchd_cpu_s")


def test_one_round_has_no_interval():
    estimate = appmon_fit.over_rounds([2.0])
    assert (estimate.value, estimate.low, estimate.high, estimate.n_rounds) == (2.0, None, None, 1)
    with pytest.raises(appmon_fit.AppmonFitError, match="no round"):
        appmon_fit.over_rounds([float("nan")])


SECTION = {
    "mechanisms": {
        "selective_mirror": {
            "host": "monitored",
            "law": "share",
            "coefficient": 0.1,
            "coefficient_ci": [0.05, 0.15],
            "cpu_s_per_request": 1e-5,
            "fabric_bytes_per_request": 1500.0,
            "n_rounds": 5,
        }
    }
}


def test_calibration_file_with_and_without_appmon(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"alpha": 1.5, "beta": 0.4}))
    assert read_calibration_file(old).appmon is None
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"alpha": 1.5, "beta": 0.4, "appmon": SECTION}))
    entry = read_calibration_file(new).appmon.mechanisms["selective_mirror"]
    assert (entry.coefficient, entry.fabric_bytes_per_request) == (0.1, 1500.0)


def test_bad_appmon_entry_names_the_field_path(tmp_path):
    bad = json.loads(json.dumps(SECTION))
    bad["mechanisms"]["selective_mirror"]["cpu_s_per_request"] = "fast"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"appmon": bad}))
    with pytest.raises(
        CalibrationFileError, match=r"appmon\.mechanisms\.selective_mirror\.cpu_s_per_request"
    ):
        read_calibration_file(path)


def test_forwarding_cost_per_packet_and_packets_per_request():
    base, _ = phases(a=0.3, c0=100e-6)
    base = base.assign(server_port_packets=5 * base["requests"])
    out = appmon_fit.forwarding(base)
    assert out["forwarding_cpu_s_per_packet"] == pytest.approx(50e-6 / 5)  # switch half of c0
    assert out["packets_per_request"] == pytest.approx(5.0)
    with pytest.raises(appmon_fit.AppmonFitError, match="no packets"):
        appmon_fit.forwarding(base.assign(server_port_packets=0))
