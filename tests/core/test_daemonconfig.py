"""``--config FILE.toml`` of ``collector run`` and ``controller run`` (cosample/daemonconfig.py):
the file's keys are the options, flags given on the command line win, and every bad key or value
is one line naming the file and the key."""

from __future__ import annotations

import pytest

from cosample.cli import build_parser, main
from cosample.daemonconfig import ConfigFileError, apply_config


def parsed(*argv: str):
    args = build_parser().parse_args(list(argv))
    args.argv = list(argv)
    return args


def write(tmp_path, text: str, name: str = "daemon.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_file_gives_the_options_and_flags_win(tmp_path):
    config = write(
        tmp_path,
        'plan = "http://controller.example:8080/plan.json"\nlisten = "0.0.0.0:6343"\n'
        'window = 60\nmetrics_port = 9478\ninsecure_unsigned = true\nstate_dir = "/srv/c"\n'
        'log_level = "warning"\n',
    )
    args = apply_config(parsed("collector", "run", "--config", config, "--window", "30"))
    assert args.plan == "http://controller.example:8080/plan.json"
    assert args.listen == "0.0.0.0:6343"
    assert args.window == 30.0  # the flag, not the file's 60
    assert args.metrics_port == 9478 and args.insecure_unsigned is True
    assert str(args.state_dir) == "/srv/c" and args.log_level == "warning"
    # an abbreviated flag and the --opt=value form count as given too
    args = apply_config(parsed("collector", "run", "--config", config, "--win=45"))
    assert args.window == 45.0


def test_repeated_options_and_durations(tmp_path):
    config = write(
        tmp_path,
        'inventory = "dc.yaml"\ncollector = ["http://a:9478", "http://b:9478"]\n'
        'serve = "0.0.0.0:8080"\ncollector_key = "/etc/cosample/snapshot.pub"\n'
        'interval = "10s"\nvalid_for = 7200\ninsecure_unsigned = true\n',
    )
    args = apply_config(parsed("controller", "run", "--config", config))
    assert args.collector == ["http://a:9478", "http://b:9478"]
    assert args.collector_key == ["/etc/cosample/snapshot.pub"]
    assert args.interval == 10.0 and args.valid_for == 7200.0
    # a repeatable flag on the command line replaces the file's list, not adds to it
    args = apply_config(parsed("controller", "run", "--config", config, "--collector", "http://c"))
    assert args.collector == ["http://c"]


def test_a_flag_replaces_the_files_choice_among_exclusive_options(tmp_path):
    config = write(
        tmp_path,
        'inventory = "dc.yaml"\ncollector = ["http://a:9478"]\nserve = "0.0.0.0:8080"\n'
        "insecure_unsigned = true\ninsecure_unsigned_snapshots = true\n",
    )
    args = apply_config(parsed("controller", "run", "--config", config, "--publish", "/srv/p"))
    assert args.publish == "/srv/p" and args.serve is None
    args = apply_config(parsed("controller", "run", "--config", config, "--key", "k.pem"))
    assert args.key == "k.pem" and args.insecure_unsigned is False


@pytest.mark.parametrize(
    "text,message",
    [
        ("window = 'x'\n", "window: expected a number, got 'x'"),
        ("window = true\n", "window: expected a number, got True"),
        ("metrics_port = 9478.5\n", "metrics_port: expected an integer"),
        ("insecure_unsigned = 1\n", "insecure_unsigned: expected true or false, got 1"),
        ("plan = 3\n", "plan: expected a string, got 3"),
        ("log_level = 'loud'\n", "log_level: expected one of debug, info, warning, error"),
        ("bogus = 1\n", "'bogus': not a setting of `cosample collector run`"),
        ("window = \n", "not valid TOML"),
    ],
)
def test_bad_keys_and_values_are_one_line(tmp_path, text, message):
    config = write(tmp_path, text)
    with pytest.raises(ConfigFileError) as caught:
        apply_config(parsed("collector", "run", "--config", config))
    assert message in str(caught.value) and str(caught.value).startswith(config)
    assert "\n" not in str(caught.value)


def test_bad_duration_in_a_file_is_the_options_own_message(tmp_path):
    config = write(tmp_path, 'interval = "soon"\n')
    with pytest.raises(ConfigFileError, match=r"interval: expected a duration"):
        apply_config(parsed("controller", "run", "--config", config))


def test_required_options_from_either_place(tmp_path, capsys):
    assert main(["collector", "run", "--listen", "127.0.0.1:0"]) == 2
    assert "--plan is required (on the command line, or plan in the --config file)" in (
        capsys.readouterr().err
    )
    config = write(tmp_path, 'inventory = "dc.yaml"\ncollector = ["http://a"]\n')
    assert main(["controller", "run", "--config", config, "--key", "k"]) == 2
    assert "one of --serve or --publish is required" in capsys.readouterr().err
    config = write(
        tmp_path,
        'inventory = "i"\ncollector = "u"\nserve = "0.0.0.0:1"\npublish = "/srv"\n',
        "both.toml",
    )
    with pytest.raises(ConfigFileError, match="--serve and --publish exclude each other"):
        apply_config(parsed("controller", "run", "--config", config))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigFileError, match="cannot read configuration"):
        apply_config(parsed("collector", "run", "--config", str(tmp_path / "none.toml")))
