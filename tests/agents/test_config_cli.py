"""Strict configuration, and the CLI paths that need no OVS (the rest run in test_sandbox)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from cosample.agents.cli import duration
from cosample.agents.config import load_config, make_config
from cosample.agents.errors import ConfigError
from cosample.cli import build_parser, main


def test_config_file_and_flags_merge(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text(
        'host = "s1"\ninterval_s = 10\nvm_ports = ["tap1"]\novsdb = "unix:/run/x/db.sock"\n'
    )
    config = load_config(str(path), {"interval_s": 5.0, "bridge": None})
    assert (config.host, config.interval_s, config.vm_ports) == ("s1", 5.0, ("tap1",))
    assert config.rundir == "/run/x"
    yaml_path = tmp_path / "agent.yaml"
    yaml_path.write_text("host: s2\ncollector: 10.0.0.9:6343\n")
    assert load_config(str(yaml_path), {}).collector == "10.0.0.9:6343"


@pytest.mark.parametrize(
    "values,message",
    [
        (
            {"host": "s1", "intervall_s": 3},
            r"^config: intervall_s: extra inputs are not permitted \(got 3\)",
        ),
        (
            {"host": "s1", "interval_s": "soon"},
            r"^config: interval_s: input should be a valid number \(got 'soon'\)",
        ),
        (
            {"host": "s1", "interval_s": 0},
            r"^config: interval_s: input should be greater than 0 \(got 0\)",
        ),
        ({"host": "s1", "safe_sampling": 1.5}, "safe_sampling: input should be a valid integer"),
        ({"host": "s1", "safe_sampling": 2**40}, "safe_sampling: input should be less than"),
        ({"host": "s1", "vm_ports": "tap1"}, "vm_ports"),
        ({"host": "s1", "vm_ports": ["a/b"]}, r"vm_ports\[0\]"),
        ({"host": "s1", "collector": "nowhere"}, "collector"),
        ({"host": "s1", "collector": '127.0.0.1:1","192.0.2.66:6343'}, "collector"),
        ({"host": "s1", "ipfix_collector": "127.0.0.1"}, "ipfix_collector"),
        ({"host": "s1", "ipfix_cache_active_timeout_s": 0}, "ipfix_cache_active_timeout_s"),
        ({"host": "s1", "ipfix_cache_max_flows": 2**32}, "ipfix_cache_max_flows"),
        ({"host": "s1", "sflow_agent": 'eth0" header=1'}, "sflow_agent"),
        ({"host": "s1", "header_bytes": 10**6}, "header_bytes"),
        ({"host": "s1", "mirror_device_prefix": "a-very-long"}, "mirror_device_prefix"),
        ({"host": "s1", "bridge": "x" * 16}, "bridge"),
        ({"host": "s1", "metrics_port": 70000}, "metrics_port"),
        (
            {"host": "s1", "max_plan_mib": 0},
            r"max_plan_mib: input should be greater than or equal to 1",
        ),
        ({"host": "s1", "max_plan_mib": 10**6}, "max_plan_mib: input should be less than or equal"),
        (
            {"host": "s1", "insecure_unsigned": "yes"},
            "insecure_unsigned: input should be a valid boolean",
        ),
        ({}, "host: field required"),
    ],
)
def test_bad_config_names_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        make_config(values)


def test_bad_config_file_is_named(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text("host = \n")
    with pytest.raises(ConfigError, match="agent.toml: not valid TOML"):
        load_config(str(path), {})


@pytest.mark.parametrize(
    "name, text, kind",
    [
        ("agent.conf", "host = \n", "TOML"),  # no known extension: TOML, the documented default
        ("agent.yml", "host: [s1\n", "YAML"),
    ],
)
def test_bad_config_names_the_format_it_was_read_as(tmp_path, name, text, kind):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"{name}: not valid {kind}"):
        load_config(str(path), {})


def test_unreadable_config_is_named(tmp_path):
    with pytest.raises(ConfigError, match="missing.toml: cannot read agent configuration"):
        load_config(str(tmp_path / "missing.toml"), {})


def test_durations():
    assert [duration(x) for x in ("30s", "2m", "1h", "500ms", "7")] == [30, 120, 3600, 0.5, 7]
    parser = build_parser()
    args = parser.parse_args(
        [
            "agent",
            "run",
            "--host",
            "s1",
            "--plan",
            "p.json",
            "--interval",
            "1m",
            "--ovsdb",
            "unix:/tmp/db.sock",
        ]
    )
    assert args.interval_s == 60 and args.ovsdb == "unix:/tmp/db.sock"
    with pytest.raises(SystemExit):
        parser.parse_args(["agent", "run", "--interval", "soon"])


def test_cli_check_config(capsys):
    assert main(["agent", "check-config", "--host", "s1", "--vm-port", "tap1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["vm_ports"] == ["tap1"] and printed["safe_sampling"] == 4096
    assert printed["slices"] == "auto"
    assert main(["agent", "check-config", "--host", "s1", "--slices", "never"]) == 0
    assert json.loads(capsys.readouterr().out)["slices"] == "never"
    assert (
        main(["agent", "check-config", "--host", "s1", "--ipfix-collector", "127.0.0.1:4739"]) == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert (
        printed["ipfix_collector"],
        printed["ipfix_cache_active_timeout_s"],
        printed["ipfix_cache_max_flows"],
    ) == ("127.0.0.1:4739", 1, 1024)
    assert main(["agent", "check-config"]) == 2
    assert "host: field required" in capsys.readouterr().err


def test_cli_keygen_sign_validate(tmp_path, capsys, make_plan, to_bytes):
    plan = tmp_path / "plan.json"
    plan.write_bytes(to_bytes(make_plan()))
    key, pub = tmp_path / "k", tmp_path / "k.pub"
    assert main(["agent", "keygen", str(key), str(pub)]) == 0
    assert main(["agent", "sign", str(plan), "--key", str(key)]) == 0
    assert main(["agent", "validate", str(plan), "--host", "s1", "--public-key", str(pub)]) == 0
    assert "plan version 100" in capsys.readouterr().out
    plan.write_bytes(plan.read_bytes().replace(b'"version": 100', b'"version": 101'))
    assert main(["agent", "validate", str(plan), "--public-key", str(pub)]) == 2
    assert "does not verify" in capsys.readouterr().err
    assert main(["agent", "validate", str(plan), "--host", "nosuch"]) == 2
    assert "no entry for this host 'nosuch'" in capsys.readouterr().err


def test_cli_validate_honours_the_plan_size_limit(tmp_path, capsys, make_plan, to_bytes):
    """``validate`` fetches as an agent with the same ``max_plan_mib`` would: from the option,
    else the config file, else the default (256 MiB)."""
    plan = tmp_path / "plan.json"
    plan.write_bytes(to_bytes(make_plan()) + b" " * (1024 * 1024))  # valid JSON above 1 MiB
    assert main(["agent", "validate", str(plan)]) == 0
    capsys.readouterr()
    assert main(["agent", "validate", str(plan), "--max-plan-mib", "1"]) == 2
    assert "larger than 1048576 bytes" in capsys.readouterr().err
    config = tmp_path / "agent.toml"
    config.write_text('host = "s1"\nmax_plan_mib = 1\n')
    assert main(["agent", "validate", str(plan), "--config", str(config)]) == 2
    assert "larger than 1048576 bytes" in capsys.readouterr().err
    assert (
        main(["agent", "validate", str(plan), "--config", str(config), "--max-plan-mib", "2"]) == 0
    )  # the option wins
    assert "plan version 100" in capsys.readouterr().out
    assert main(["agent", "validate", str(plan), "--max-plan-mib", "0"]) == 2
    assert "max_plan_mib" in capsys.readouterr().err


def test_cli_transition_writes_a_valid_plan_set(tmp_path, capsys, make_plan, to_bytes):
    old, new, out = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "set.json"
    created = datetime.now(timezone.utc)
    old.write_bytes(to_bytes(make_plan(version=1, created=created)))
    new.write_bytes(to_bytes(make_plan(version=2, sampling=5, local_rate=0.2, created=created)))
    code = main(["agent", "transition", str(old), str(new), "--settle", "30s", "-o", str(out)])
    assert code == 0
    assert main(["agent", "validate", str(out)]) == 0
    assert "plan version 3" in capsys.readouterr().out


def test_cli_status(tmp_path, capsys):
    assert main(["agent", "status", "--state-dir", str(tmp_path)]) == 2
    assert "no status yet" in capsys.readouterr().err
    (tmp_path / "status.json").write_text(json.dumps({"result": "ok", "host": "s1"}))
    assert main(["agent", "status", "--state-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["host"] == "s1"


def test_the_documented_config_example_loads(tmp_path):
    """docs/agents.md's TOML example is a valid configuration."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "agents.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "agent.toml"
    path.write_text(example)
    config = load_config(str(path), {})
    assert config.host == "s1" and config.public_key == "/etc/cosample/plan.pub"
    assert config.safe_sampling == 4096 and config.metrics_port is None
    assert config.guard == "on" and config.guard_signals == ("vswitchd",)
