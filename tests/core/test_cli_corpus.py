"""Issue 43's bad command-line inputs, as a corpus: each must end in one line on standard error
that names the file (and the path in it, where there is one) and the problem, exit status 2, no
traceback, nothing half-written. In the style of the agents' bad-plan corpus
(tests/agents/test_hardening.py): ``CORPUS`` is a table of (command line, the text the one line
must carry); a ``{name}`` in a command line is a file of ``FILES`` written for the case. Add a
row for every new way a command line, or a file it names, can be wrong.

Beside the table: a closed pipe ends a command quietly; ``-o -`` and special files; ``--dry-run``
without OVSDB; ``agent validate`` on an expired plan and one about to expire; ``check`` output
is itself a description (tests/planner/test_cli.py plans both to the same plan_id).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from plan_documents import plan_bytes, plan_document

from cosample.cli import main

BIG = "9" * 5000  # Python's int() refuses more than 4,300 digits
DEEP = "[" * 100_000 + "]" * 100_000


def description(name: str = "s2") -> str:
    return json.dumps(
        {
            "cost": {"alpha": 1.5, "beta": 0.5},
            "servers": [{"name": "s1", "capacity_pps": 1e6}, {"name": name, "capacity_pps": 1e6}],
        }
    )


def inventory(name: str) -> str:
    return json.dumps(
        {"cost": {"alpha": 1.5, "beta": 0.5, "capacity_pps": 1e6}, "servers": [{"name": name}]}
    )


def plan_at(created: datetime, hours: float) -> bytes:
    return plan_bytes(plan_document(created=created.replace(microsecond=0), hours=hours))


NOW = datetime.now(timezone.utc)
#: name -> content (str or bytes) of the files the command lines name
FILES = {
    "big.json": f'{{"servers": [{{"name": "a", "capacity_pps": {BIG}}}]}}',
    "deep.json": DEEP,
    "big.yaml": f"servers:\n  - {{name: a, capacity_pps: {BIG}}}\n",
    "deep.yaml": DEEP,
    "big.toml": f"window = {BIG}\n",
    "deep.toml": "window = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "agent-big.toml": f'host = "s1"\ninterval_s = {BIG}\n',
    "agent-forever.toml": 'host = "s1"\ninterval_s = 1e12\n',
    "short.pcap": b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00",
    "empty.pcap": b"",
    "text.pcap": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "long-name.json": description("x" * 10**6),
    "nul-name.json": description("a\x00b"),
    "dots-name.json": description("../x"),
    "rtl-name.json": description("ab\u202ecd"),
    "dash-name.json": description("-rf"),
    "space-name.json": description("web 1"),
    "newline-name.json": description("a\nb"),
    "csv-name.json": '{"cost": {"alpha": 1.5, "beta": 0.5}, "servers": "csv-name-servers.csv"}',
    "csv-name-servers.csv": "name,capacity_pps\ns1,1000000\n../etc,1000000\n",
    "long-name-inventory.json": inventory("h" * 254),
    "slash-name-inventory.json": inventory("a/b"),
    "expired-plan.json": plan_at(NOW - timedelta(hours=7), hours=6),
    "not-a-snapshot.json": "[]",
}

DAEMON_CONTROLLER = [
    "controller",
    "run",
    "--inventory",
    "{missing}",
    "--collector",
    "http://127.0.0.1:1",
    "--publish",
    "{out}",
    "--insecure-unsigned",
    "--insecure-unsigned-snapshots",
    "--cycles",
    "1",
]
DAEMON_COLLECTOR = [
    "collector",
    "run",
    "--plan",
    "{missing}",
    "--listen",
    "127.0.0.1:0",
    "--insecure-unsigned",
]

#: (command line, text its one-line error must carry)
CORPUS = [
    # integers past Python's 4,300 digits, JSON nested 100,000 deep (issue 43: 9 tracebacks)
    *(
        (argv, "big.json: not valid JSON: a number with more than 4300 digits")
        for argv in (
            ["check", "{big.json}"],
            ["plan", "{big.json}"],
            ["collector", "merge", "{big.json}"],
            ["controller", "check", "--inventory", "{big.json}"],
        )
    ),
    (["agent", "validate", "{big.json}"], "big.json: not a plan (a number with more than 4300"),
    (["agent", "transition", "{big.json}", "{big.json}", "-o", "{out}"], "more than 4300 digits"),
    *(
        (argv, "deep.json: not valid JSON: nested too deeply")
        for argv in (
            ["check", "{deep.json}"],
            ["plan", "{deep.json}"],
            ["collector", "merge", "{deep.json}"],
            ["controller", "check", "--inventory", "{deep.json}"],
        )
    ),
    (["agent", "validate", "{deep.json}"], "deep.json: not a plan (JSON nested too deeply)"),
    (["check", "{big.yaml}"], "big.yaml: not valid YAML: a number with more than 4300 digits"),
    (["check", "{deep.yaml}"], "deep.yaml: not valid YAML: nested too deeply"),
    (["controller", "check", "--inventory", "{deep.yaml}"], "deep.yaml: not valid YAML"),
    (["collector", "run", "--config", "{big.toml}"], "big.toml: not valid TOML: a number with"),
    (["controller", "run", "--config", "{deep.toml}"], "deep.toml: not valid TOML: nested too"),
    (["agent", "check-config", "--config", "{agent-big.toml}"], "agent-big.toml: not valid TOML"),
    (["agent", "check-config", "--config", "{agent-forever.toml}"], "interval_s: input should be"),
    (["collector", "merge", "{not-a-snapshot.json}"], "not-a-snapshot.json"),
    # numbers past what the option means (issue 43: collector replay --window inf, 1e400)
    *(
        (["collector", "replay", "--window", window, "{short.pcap}"], "--window: must be a number")
        for window in ("inf", "1e400", "nan", "-1", "0")
    ),
    (["plan", "--valid-for", "99999999d"], "--valid-for: expected a duration of at most ten"),
    (["plan", "--valid-for", "9" * 400], "--valid-for: expected a duration of at most ten"),
    (["plan", "--plan-version", str(10**14)], "--plan-version: expected 0 to"),
    (["plan", "--plan-version", "-1"], "--plan-version: expected 0 to"),
    (["plan", "--time-limit", "nan"], "--time-limit: expected a number of seconds > 0"),
    (["plan", "--json", "-o", "-"], "--json and -o -: both write standard output"),
    (["plan", "-q", "-o", "{dir}"], "cannot write: a directory"),
    (["plan", "-q", "-o", "{missing}/plan.json"], "cannot write: No such file or directory"),
    *(
        ([*DAEMON_CONTROLLER, flag, value], message)
        for flag, value, message in (
            ("--min-gain", "nan", "--min-gain: expected >= 0"),
            ("--change", "nan", "--change: expected a fraction >= 0"),
            ("--jump", "inf", "--jump: expected a factor above 1"),
            ("--implausible-slack", "inf", "--implausible-slack: expected a fraction >= 0"),
            ("--measure-sampling", str(2**40), "--measure-sampling: expected N from 1 to"),
            ("--margin", "nan", "--margin: expected a fraction in [0, 1)"),
        )
    ),
    *(
        ([*DAEMON_COLLECTOR, flag, value], message)
        for flag, value, message in (
            ("--band", "nan", "--band: expected a fraction >= 0"),
            ("--metrics-port", "99999", "--metrics-port: expected 0 to 65535"),
            ("--receive-buffer", str(2**50), "--receive-buffer: expected 1 to"),
            ("--window", "inf", "--window: must be a number > 0"),
            ("--max-silence", "1e400", "--max-silence: expected a duration"),
            ("--max-silence", "0", "--max-silence: expected a positive duration"),
        )
    ),
    # the event options both daemons take (``cosample.events.add_event_arguments``)
    *(
        (["appmon", "run", flag, value], message)
        for flag, value, message in (
            ("--band", "nan", "--band: expected a fraction >= 0"),
            ("--max-silence", "0", "--max-silence: expected a positive duration"),
        )
    ),
    # captures that are not what they seem (issue 43: "not a pcap capture (magic d4c3b2a1)")
    (["collector", "replay", "{short.pcap}"], "short.pcap: truncated: 10 bytes, shorter than a"),
    (["appmon", "replay", "{short.pcap}"], "short.pcap: truncated: 10 bytes, shorter than a"),
    (["collector", "replay", "{empty.pcap}"], "empty.pcap: empty file (0 bytes)"),
    (["appmon", "replay", "{empty.pcap}"], "empty.pcap: empty file (0 bytes)"),
    (["appmon", "replay", "{text.pcap}"], "text.pcap: not a pcap capture (it starts with"),
    # names no agent would take, refused where they enter (issue 43: planned and printed raw)
    *(
        (["plan", f"{{{name}}}"], "servers[1].name")
        for name in (
            "long-name.json",
            "nul-name.json",
            "dots-name.json",
            "rtl-name.json",
            "dash-name.json",
            "space-name.json",
            "newline-name.json",
        )
    ),
    (["check", "{rtl-name.json}"], "not a server name"),
    (["plan", "{csv-name.json}"], "csv-name-servers.csv: row 3"),
    (["controller", "check", "--inventory", "{long-name-inventory.json}"], "servers[0].name"),
    (["controller", "check", "--inventory", "{slash-name-inventory.json}"], "servers[0].name"),
    # a state directory that is a file (found by walking every option with bad values)
    (["agent", "status", "--state-dir", "{big.json}"], "big.json/status.json: cannot read"),
    (["agent", "appmon-spec", "--state-dir", "{big.json}"], "cannot read the agent's status"),
    # a plan no agent runs any more (issue 43: "valid")
    (["agent", "validate", "{expired-plan.json}"], "expired-plan.json: plan version 100: expired"),
]


def _argv(argv: list[str], tmp_path: Path) -> list[str]:
    out = []
    for name, content in FILES.items():  # all of them: a description may name a CSV file
        path = tmp_path / name
        if not path.exists():
            (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    for word in argv:
        for name in FILES:
            word = word.replace(f"{{{name}}}", str(tmp_path / name))
        (tmp_path / "dir").mkdir(exist_ok=True)
        word = word.replace("{dir}", str(tmp_path / "dir"))
        word = word.replace("{missing}", str(tmp_path / "missing"))
        word = word.replace("{out}", str(tmp_path / "out"))
        out.append(word)
    return out


@pytest.mark.parametrize("argv,message", CORPUS, ids=[" ".join(argv)[:60] for argv, _ in CORPUS])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    argv = _argv(argv, tmp_path)
    before = set(tmp_path.rglob("*"))
    status = main(argv)  # a traceback would raise here and fail the test
    err = capsys.readouterr().err
    assert status == 2, err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0], err
    assert len(errors[0]) < 600, errors[0]  # a 10^6-character name is shown cut short
    assert "\x00" not in err and "\u202e" not in err  # shown escaped, never raw
    written = set(tmp_path.rglob("*")) - before
    assert not written, written  # nothing half-written


def test_an_agent_refuses_what_the_corpus_refuses_the_planner():
    """The rule names are held to: every name the planner accepts fits a plan's host name."""
    from cosample.validation import SERVER_NAME

    assert SERVER_NAME.fullmatch("h" * 253) and not SERVER_NAME.fullmatch("h" * 254)
    for name in ("host1.example", "web-1", "rack_7.s3", "_x"):
        assert SERVER_NAME.fullmatch(name), name
    for name in (".", "..", "-x", "a/b", "a b", "a\x00", "é", "a\u202e"):
        assert not SERVER_NAME.fullmatch(name), name


# a closed pipe, standard output and special files -----------------------------------------------


def cosample(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cosample", *args], **kwargs)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "docs/examples/fleet.json"],
        ["plan", "docs/examples/fleet.json", "-o", "-"],
        ["plan", "docs/examples/fleet.json"],
        ["controller", "check", "--inventory", "docs/examples/inventory.yaml"],
        ["plan"],
    ],
)
def test_a_closed_pipe_ends_the_command_quietly(argv):
    """``cosample ... | head -c 100``: the reader goes away after 100 bytes (issue 43: four
    BrokenPipeError tracebacks); the command stops without a word, status 141 (SIGPIPE's)."""
    root = Path(__file__).resolve().parents[2]
    process = cosample(*argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(process.stdout.read(100)) == 100
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    # 0: all of it fitted in the pipe before the reader went; -o -: the table on stderr
    assert process.returncode in (0, 141), err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    if "-o" not in argv:
        assert err == b"", err.decode()


def test_plan_to_standard_output_and_to_special_files(tmp_path):
    """``-o -`` is standard output (the table then on standard error); ``/dev/stdout`` is the
    same, never replaced; a FIFO and a link to a file are written in place, never renamed over."""
    piped = subprocess.run(
        [sys.executable, "-m", "cosample", "plan", "-o", "-"], capture_output=True, timeout=120
    )
    assert piped.returncode == 0 and json.loads(piped.stdout)["format"] == "cosample.plan"
    assert b"collected" in piped.stderr and b"standard output" in piped.stderr
    redirected = tmp_path / "redirected.json"
    with open(redirected, "wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "cosample", "plan", "-q", "-o", "/dev/stdout"],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(redirected.read_text())["format"] == "cosample.plan"  # nothing else in it
    assert os.path.islink("/dev/stdout")
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(["plan", "-q", "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_text())["format"] == "cosample.plan"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert main(["plan", "-q", "-o", str(fifo)]) == 0
    assert json.loads(reader.communicate(timeout=60)[0])["format"] == "cosample.plan"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_plan_json_summary(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--json", "-o", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    plan = json.loads(out.read_text())
    assert summary["plan_id"] == plan["plan_id"] and summary["written_to"] == str(out)
    assert summary["summary"]["collected_pps"] == plan["summary"]["collected_pps"] > 0


# the agent's reading of a host it cannot read, and of plans near their end ---------------------


def no_ovsdb(tmp_path) -> Path:
    """An agent configuration whose OVSDB is not there, its plan a good one."""
    plan = tmp_path / "plan.json"
    plan.write_bytes(plan_at(NOW - timedelta(minutes=1), hours=6))
    config = tmp_path / "agent.toml"
    config.write_text(
        f'host = "s1"\nplan = "{plan}"\novsdb = "unix:{tmp_path}/no/db.sock"\n'
        f'insecure_unsigned = true\ntimeout_s = 2\nstate_dir = "{tmp_path / "state"}"\n'
        "run_analysers = false\n"
    )
    return config


def test_a_bounded_agent_run_that_fails_says_why(tmp_path, capsys):
    """``agent run --cycles N`` (a test, a cron job) ends with its last cycle's status."""
    assert main(["agent", "run", "--cycles", "1", "--config", str(no_ovsdb(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert "cosample: agent: the last cycle ended error: " in err and "db.sock" in err


def test_dry_run_fails_when_it_cannot_read_the_host(tmp_path, capsys):
    """Issue 43: with OVSDB unreachable, ``--dry-run`` said "0 command(s) would run", exit 0."""
    config = no_ovsdb(tmp_path)
    assert main(["agent", "apply", "--dry-run", "--config", str(config)]) == 1
    out, err = capsys.readouterr()
    assert "would run" not in out and out.startswith("error:")
    assert "database connection failed" in err
    assert not (tmp_path / "state" / "status.json").exists()  # a dry run writes nothing


def test_validate_warns_in_the_last_tenth_of_a_plans_validity(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    now = datetime.now(timezone.utc)  # not the module's NOW: collection may be minutes earlier
    plan.write_bytes(plan_at(now - timedelta(minutes=95), hours=100 / 60))  # 5 of 100 min left
    assert main(["agent", "validate", str(plan)]) == 0
    out, err = capsys.readouterr()
    assert out.endswith(": valid\n") and "the last tenth of its validity" in err
    plan.write_bytes(plan_at(now - timedelta(minutes=50), hours=100 / 60))  # half left
    assert main(["agent", "validate", str(plan)]) == 0
    assert capsys.readouterr().err == ""
