"""``cosample fit`` and ``cosample calibrate`` through ``cosample.cli.main``, and the planner
reading the calibration JSON that ``fit -o`` writes."""

from __future__ import annotations

import json

import pytest

from cosample.cli import build_parser, main
from cosample.costmodel.data import write_measurements
from cosample.costmodel.model import simulate
from cosample.planner.datacentre import DataCentre


@pytest.fixture
def measurements(tmp_path):
    data = simulate({"sflow": 0.6, "mirror": 0.2}, 80_000, noise=0.01, seed=5)
    return write_measurements(data.assign(protocol="udp"), tmp_path / "m.csv")


def test_parsing_is_separate_from_main():
    args = build_parser().parse_args(["fit", "m.csv", "-o", "c.json", "--bootstrap", "200"])
    assert (args.data, args.output, args.bootstrap) == ("m.csv", "c.json", 200)
    args = build_parser().parse_args(
        [
            "calibrate",
            "--testbed",
            "--rates",
            "0,0.5,1",
            "--mechanisms",
            "mirror",
            "--protocol",
            "tcp",
        ]
    )
    assert args.rates == (0.0, 0.5, 1.0) and args.mechanisms == ("mirror",) and args.testbed
    with pytest.raises(SystemExit):
        build_parser().parse_args(["calibrate", "--rates", "0,x"])


def test_fit_prints_and_writes_calibration_and_figure(measurements, tmp_path, capsys):
    out, figure = tmp_path / "c.json", tmp_path / "fit.png"
    assert (
        main(
            [
                "fit",
                str(measurements),
                "-o",
                str(out),
                "--figure",
                str(figure),
                "--bootstrap",
                "200",
                "--protocol",
                "udp",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "sflow" in printed and "mirror" in printed and "capacity_pps" in printed
    document = json.loads(out.read_text())
    assert document["alpha"] == pytest.approx(0.6, abs=0.05)
    assert document["beta"] == pytest.approx(0.2, abs=0.05)
    assert document["capacity_pps"] == pytest.approx(80_000, rel=0.02)
    for name in ("sflow", "mirror"):
        entry = document["mechanisms"][name]
        assert entry["coefficient_ci"][0] < entry["coefficient"] < entry["coefficient_ci"][1]
        assert entry["r_squared"] > 0.9
    assert document["metadata"]["protocol"] == "udp"
    assert figure.stat().st_size > 20_000 and figure.read_bytes()[:4] == b"\x89PNG"


def test_planner_loads_our_calibration(measurements, tmp_path):
    assert (
        main(["fit", str(measurements), "-o", str(tmp_path / "server1.json"), "--bootstrap", "100"])
        == 0
    )
    calibration = json.loads((tmp_path / "server1.json").read_text())
    description = {
        "cost": {"alpha": 1.54, "beta": 0.46},
        "servers": [
            {"name": "s1", "calibration": "server1.json"},
            {"name": "s2", "capacity_pps": 1000},
        ],
        "traffic_pps": {"s1": {"s2": 100}},
    }
    (tmp_path / "dc.json").write_text(json.dumps(description))
    dc = DataCentre.load(tmp_path / "dc.json")
    assert dc.alpha[0] == calibration["alpha"] and dc.beta[0] == calibration["beta"]
    assert dc.capacity_pps[0] == calibration["capacity_pps"]
    assert (dc.alpha[1], dc.beta[1]) == (1.54, 0.46)  # no calibration: the defaults


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty file"),
        ("mechanism,rate\nsflow,0.5\n", "missing column 'throughput_pps'"),
        ("mechanism,rate,throughput_pps\nsflow,-0.2,100\n", "line 2: rate must be >= 0"),
        ("mechanism,rate,throughput_pps\nsflow,0.5,100\n", "at least 3 measurements"),
    ],
)
def test_fit_bad_data_exits_2_and_writes_nothing(tmp_path, capsys, content, message):
    (tmp_path / "bad.csv").write_text(content)
    out = tmp_path / "c.json"
    assert main(["fit", str(tmp_path / "bad.csv"), "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_fit_protocol_filter_errors(measurements, capsys):
    assert main(["fit", str(measurements), "--protocol", "tcp"]) == 2
    assert "no rows with protocol 'tcp'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["calibrate"], "choose where to calibrate"),
        (["calibrate", "--testbed", "--bridge", "br0"], "choose where to calibrate"),
        (["calibrate", "--testbed", "--rates", "0"], "needs a rate > 0"),
        (
            ["calibrate", "--testbed", "--rates", "0.5", "--design", "independent"],
            "at least 2 distinct",
        ),
        (
            ["calibrate", "--testbed", "--mechanisms", "sflow,gre"],
            "choose from sflow, mirror, mirror_vxlan",
        ),
        (["calibrate", "--testbed", "--prefix", "much-too-long-prefix"], "testbed prefix"),
        (
            ["calibrate", "--method", "throughput", "--bridge", "br0", "--sender-port", "p1"],
            "receiver port is required",
        ),
        (["calibrate", "--bridge", "br0", "--sender-port", "p1"], "--account-cgroup"),
        (["calibrate", "--testbed", "--duration", "2"], "too short for 120 phases"),
        (["calibrate", "--testbed", "--target-ci", "0.1", "--max-time", "2"], "max time"),
    ],
)
def test_calibrate_refuses_bad_requests_before_touching_anything(tmp_path, capsys, argv, message):
    out = tmp_path / "c.json"
    assert main([*argv, "-d", str(tmp_path / "m.csv"), "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "m.csv").exists()


def test_fit_uses_blocks_unless_told_not_to(tmp_path, capsys):
    data = simulate({"sflow": 0.5}, 1e5, rates=(0, 1), repetitions=6, noise=0.01, seed=2)
    data["block"] = data["trial"]
    data["throughput_pps"] *= 1 + data["block"] * 0.2  # each run at its own capacity
    path = write_measurements(data, tmp_path / "m.csv")
    for extra, blocks in (([], 6), (["--ignore-blocks"], 1)):
        out = tmp_path / f"c{blocks}.json"
        assert main(["fit", str(path), "-o", str(out), "--bootstrap", "100", *extra]) == 0
        entry = json.loads(out.read_text())["mechanisms"]["sflow"]
        assert entry["n_blocks"] == blocks
    assert json.loads((tmp_path / "c6.json").read_text())["alpha"] == pytest.approx(0.5, abs=0.03)


def test_beta_can_come_from_another_mechanism(tmp_path, capsys):
    data = simulate({"sflow": 0.3, "mirror": 0.1, "mirror_vxlan": 0.5}, 1e5, noise=0.01, seed=9)
    path = write_measurements(data, tmp_path / "m.csv")
    out = tmp_path / "c.json"
    assert (
        main(
            ["fit", str(path), "-o", str(out), "--bootstrap", "100", "--beta-from", "mirror_vxlan"]
        )
        == 0
    )
    document = json.loads(out.read_text())
    assert document["beta"] == pytest.approx(0.5, abs=0.03)
    assert document["roles"] == {"alpha": "sflow", "beta": "mirror_vxlan"}
    assert "beta = 0.5" in capsys.readouterr().out
    assert main(["fit", str(path), "--beta-from", "sflow"]) == 2
    assert "cannot both come from 'sflow'" in capsys.readouterr().err


def test_fit_takes_a_covariate_per_mechanism_and_refuses_unknown_ones(tmp_path, capsys):
    from tests.costmodel.test_ancova import synthetic

    data = tmp_path / "m.csv"
    synthetic(seed=7).to_csv(data, index=False)
    assert (
        main(["fit", str(data), "--covariate", "sflow=receiver", "-o", str(tmp_path / "c.json")])
        == 0
    )
    out = capsys.readouterr().out
    assert "cluster-robust" in out and "covariate receiver" in out
    assert main(["fit", str(data), "--covariate", "sflow=none"]) == 0
    assert "covariate receiver" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["fit", str(data), "--covariate", "sflow=vcpu"])


def test_fit_chooses_the_small_sample_correction_and_refuses_unknown_ones(tmp_path, capsys):
    from tests.costmodel.test_ancova import synthetic

    data = tmp_path / "m.csv"
    synthetic(seed=7).to_csv(data, index=False)
    assert main(["fit", str(data)]) == 0
    assert "CR2, Bell-McCaffrey" in capsys.readouterr().out
    assert main(["fit", str(data), "--ci-method", "cluster-cr1"]) == 0
    assert "(CR1) over 8 runs" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["fit", str(data), "--ci-method", "cr3"])
    assert "expected one of auto, cluster, cluster-cr1, bootstrap" in capsys.readouterr().err


def test_the_cpu_methods_vxlan_mirror_runs_shorter_runs_unless_told(tmp_path, monkeypatch):
    import cosample.costmodel.calibrate_cli as cli

    seen = []

    def measure(args, settings, target):
        seen.append(settings)
        raise KeyboardInterrupt  # stop before anything is built or written

    monkeypatch.setattr(cli, "_measure", measure)
    base = [
        "calibrate",
        "--testbed",
        "--mechanisms",
        "sflow,mirror_vxlan",
        "-d",
        str(tmp_path / "m.csv"),
        "-o",
        str(tmp_path / "c.json"),
    ]
    for extra in ([], ["--duration", "12"], ["--guard", "0.04"], ["--method", "throughput"]):
        assert main(base + extra) != 0  # interrupted: reported, nothing written
    default, told, guarded, throughput = seen
    assert default.run_design("mirror_vxlan") == (2.0, 8, 0.05)
    assert default.run_design("sflow") == (12.0, 120, 0.02)
    assert default.run_design("mirror") == (12.0, 120, 0.02)
    assert told.run_design("mirror_vxlan") == (12.0, 120, 0.02) and told.run_lengths == ()
    assert guarded.run_design("sflow") == (12.0, 120, 0.04) and guarded.run_lengths == ()
    assert throughput.run_lengths == ()
    assert not (tmp_path / "m.csv").exists() and not (tmp_path / "c.json").exists()


def test_a_campaign_with_the_cached_sample_action_gives_alpha_sample(tmp_path, capsys):
    from cosample.costmodel.calibration_file import read_calibration_file
    from cosample.costmodel.coefficients import coefficients, intervals

    data = simulate(
        {"sflow": 0.8, "mirror": 0.3, "sample_action_cached": 0.5}, 1e5, noise=0.01, seed=4
    )
    path = write_measurements(data, tmp_path / "m.csv")
    out = tmp_path / "c.json"
    assert main(["fit", str(path), "-o", str(out), "--bootstrap", "100"]) == 0
    document = json.loads(out.read_text())
    assert document["alpha_sample"] == pytest.approx(0.5, abs=0.03)
    assert document["roles"] == {
        "alpha": "sflow",
        "beta": "mirror",
        "alpha_sample": "sample_action_cached",
    }
    assert "alpha_sample = 0.5" in capsys.readouterr().out
    read = read_calibration_file(out)
    assert coefficients(read, out)["alpha_sample"] == pytest.approx(document["alpha_sample"])
    low, high = intervals(read)["alpha_sample"]
    assert low < document["alpha_sample"] < high
    # a campaign without it names no such role (files as before)
    plain = write_measurements(
        simulate({"sflow": 0.8, "mirror": 0.3}, 1e5, seed=4), tmp_path / "p.csv"
    )
    assert main(["fit", str(plain), "-o", str(tmp_path / "p.json"), "--bootstrap", "100"]) == 0
    document = json.loads((tmp_path / "p.json").read_text())
    assert "alpha_sample" not in document and "alpha_sample" not in document["roles"]
