"""Parsing and the error paths of ``cosample testbed``; the integration test runs the happy path."""

from __future__ import annotations

import json

import pytest

from cosample.cli import build_parser, main


def test_parsing_defaults():
    args = build_parser().parse_args(["testbed", "run"])
    assert (args.duration, args.alpha, args.beta, args.solver) == (10.0, None, None, "exact")
    args = build_parser().parse_args(["testbed", "up", "--servers", "4", "--prefix", "cx"])
    assert (args.servers, args.prefix, args.state_dir) == (4, "cx", "/tmp/cosample-testbed")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["testbed"])


def test_run_without_a_testbed_says_so(tmp_path, capsys):
    assert main(["testbed", "run", "--state-dir", str(tmp_path / "none")]) == 2
    assert "no testbed is up" in capsys.readouterr().err


def test_down_without_a_testbed_says_so(tmp_path, capsys):
    assert main(["testbed", "down", "--state-dir", str(tmp_path / "none")]) == 2
    assert "no testbed is up" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--duration", "0.5"], "--duration: must be >= 1 (iperf3 runs whole seconds), got 0.5"),
        (["--alpha", "-1"], "--alpha: must be > 0"),
        (["--calibration", "x.json", "--alpha", "1"], "exclude each other"),
        (["--calibration", "missing.json"], "cannot read"),
        (["--capacity-pps", "0"], "--capacity-pps: must be > 0"),
    ],
)
def test_run_rejects_bad_options_before_touching_anything(tmp_path, capsys, argv, message):
    assert main(["testbed", "run", "--state-dir", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_up_rejects_a_bad_config_file(tmp_path, capsys):
    config = tmp_path / "tb.json"
    config.write_text(json.dumps({"servers": [{"capacity_pps": 1, "disks": 2}]}))
    assert (
        main(["testbed", "up", "--config", str(config), "--state-dir", str(tmp_path / "st")]) == 2
    )
    assert capsys.readouterr().err == (
        f"cosample: error: {config}: servers[0].disks: extra inputs are not permitted (got 2)\n"
    )
    assert not (tmp_path / "st").exists()
