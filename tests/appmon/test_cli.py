"""``cosample appmon replay`` through the real command line; snapshot, metrics and events."""

from __future__ import annotations

import json

import pytest
from appmon_traffic import Conversation, request, response, run

from cosample.appmon.errors import AppmonError
from cosample.appmon.metrics import AppMetrics, State
from cosample.appmon.pcap import write_pcap
from cosample.appmon.snapshot import event_values, parse_snapshot, snapshot
from cosample.cli import main
from cosample.events import EventDetector


def conversation_frames(rounds=4, status=(200, 500)):
    c = Conversation()
    frames = c.handshake(1000.0)
    for i in range(rounds):
        start = 1000.0 + i * 3
        frames += [c.send(start, request()), c.send(start + 0.02, response(status[i % 2]), False)]
    return frames + c.fin(1000.0 + rounds * 3)


@pytest.fixture
def capture(tmp_path):
    return write_pcap(tmp_path / "http.pcap", conversation_frames())


def test_replay_json_one_snapshot_per_window(capture, capsys):
    assert main(["appmon", "replay", str(capture), "--window", "5s", "--json", "--name", "a1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    snaps = [parse_snapshot(line) for line in lines]
    assert [s.window_start.timestamp() for s in snaps] == [1000.0, 1005.0, 1010.0]
    assert [s.services[0].requests for s in snaps] == [2, 2, 0]
    first = snaps[0].services[0]
    assert first.service == "10.0.0.2:80" and snaps[0].analyser == "a1"
    assert first.status_classes["2xx"] == 1 and first.status_classes["5xx"] == 1
    assert first.success_rate == 0.5 and first.requests_per_s == pytest.approx(0.4)
    assert first.service_time_s.mean == pytest.approx(0.02, abs=2e-6)
    assert first.service_time_s.p95 == pytest.approx(0.02, rel=0.011)
    assert snaps[-1].services[0].service_time_s is None
    assert json.loads(lines[0])["format"] == "cosample.appmon-snapshot"


def test_replay_table(capture, capsys):
    assert main(["appmon", "replay", str(capture), "--window", "1m"]) == 0
    out = capsys.readouterr().out
    assert "10.0.0.2:80" in out and "success 0.5000" in out and "4 req" in out


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file (0 bytes), not a pcap capture"),
        (b"\x0a\x0d\x0d\x0a" + b"\0" * 40, "pcapng is not supported"),
        (None, "cannot read capture"),
    ],
)
def test_bad_captures_are_one_line_naming_the_file(tmp_path, capsys, content, message):
    path = tmp_path / "bad.pcap"
    if content is not None:
        path.write_bytes(content)
    assert main(["appmon", "replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and len(err.splitlines()) == 1


def test_truncated_record_names_the_record(capture, capsys):
    capture.write_bytes(capture.read_bytes()[:-5])
    assert main(["appmon", "replay", str(capture)]) == 2
    assert "record 12: truncated" in capsys.readouterr().err


def test_option_errors(capture, capsys, tmp_path):
    key, open_key, short_key = (tmp_path / name for name in ("k", "open", "short"))
    receive = ("--receive-records", "10.0.0.4:9555", "--records-from", "10.0.0.1")
    for path, text, mode in (
        (key, "ab" * 32, 0o600),
        (open_key, "ab" * 32, 0o644),
        (short_key, "ab" * 31, 0o600),
    ):
        path.write_text(text + "\n")
        path.chmod(mode)
    assert main(["appmon", "replay", str(capture), "--window", "0s"]) == 2
    assert "--window: must be > 0" in capsys.readouterr().err
    assert main(["appmon", "replay", str(capture), "--port", "70000"]) == 2
    assert "--port: expected 1-65535, got 70000" in capsys.readouterr().err
    for argv, message in (
        ([], "give --interface (packets), --receive-records"),
        (
            ["--receive-records", "10.0.0.4:9555", "--send-records", "10.0.0.5:9555"],
            "--send-records: needs --interface",
        ),
        (["--interface", "lo", "--record-rate", "10"], "--record-rate: only with"),
        (
            ["--interface", "lo", "--send-records", "10.0.0.5:9555", "--record-rate", "0"],
            "--record-rate: must be > 0",
        ),
        (
            ["--interface", "lo", "--send-records", "server:9555"],
            "--send-records 'server:9555': expected ADDRESS:PORT",
        ),
        # records are authenticated unless the operator opts out loudly
        (
            ["--interface", "lo", "--send-records", "10.0.0.5:9555"],
            "compact records need --record-key FILE",
        ),
        (["--receive-records", "10.0.0.4:9555"], "compact records need --record-key FILE"),
        (
            ["--receive-records", "10.0.0.4:9555", "--record-key", str(key)],
            "--receive-records: give --records-from ADDRESS",
        ),
        (
            [*receive, "--record-key", str(open_key)],
            "readable by others (mode 644; chmod 600)",
        ),
        (
            [*receive, "--record-key", str(short_key)],
            "expected at least 32 bytes as hexadecimal text",
        ),
        (
            ["--receive-records", "10.0.0.4:9555", "--records-from", "s1", "--insecure-records"],
            "--records-from 's1': expected an IP address",
        ),
        (["--interface", "lo", "--record-key", str(key)], "--record-key: only with"),
        (
            ["--interface", "lo", "--send-records", "10.0.0.5:9555", "--records-from", "10.0.0.1"],
            "--records-from: only with --receive-records",
        ),
    ):
        assert main(["appmon", "run", *argv]) == 2
        assert message in capsys.readouterr().err


def test_snapshot_read_back_rejects_bad_fields():
    analyser, windows = run(conversation_frames(), window_s=60)
    snap = snapshot(
        windows[0],
        analyser="x",
        frames=analyser.frames,
        connections=0,
        dropped=analyser.dropped(),
        ignored=analyser.ignored(),
    )
    data = json.loads(snap.to_json())
    assert parse_snapshot(snap.to_json()) == snap
    data["services"][0]["success_rate"] = 1.5
    with pytest.raises(
        AppmonError, match=r"services\[0\]\.success_rate: .*less than or equal to 1"
    ):
        parse_snapshot(json.dumps(data), "s.json")


def test_metrics_have_a_service_time_histogram():
    analyser, windows = run(conversation_frames(), window_s=60)
    from cosample.appmon.windows import ServiceStats

    totals = {}
    for window in windows:
        for key, stats in window.services.items():
            totals.setdefault(key, ServiceStats()).merge(stats)
    snap = snapshot(windows[0], analyser="x", frames=1, connections=0, dropped={}, ignored={})
    text = (
        AppMetrics(
            lambda: State(
                frames=analyser.frames, totals=totals, snapshot=snap, counters={"stream_gaps": 2}
            )
        )
        .text()
        .decode()
    )
    assert (
        'cosample_appmon_service_time_seconds_bucket{le="0.025",service="10.0.0.2:80"} 4.0' in text
    )
    assert (
        'cosample_appmon_service_time_seconds_bucket{le="0.01",service="10.0.0.2:80"} 0.0' in text
    )
    assert 'cosample_appmon_service_time_seconds_count{service="10.0.0.2:80"} 4.0' in text
    assert 'cosample_appmon_responses_total{class="5xx",service="10.0.0.2:80"} 2.0' in text
    assert 'cosample_appmon_unused_total{reason="stream_gaps"} 2.0' in text
    assert 'cosample_appmon_success_ratio{service="10.0.0.2:80"} 0.5' in text


def test_events_when_a_value_leaves_its_band():
    detector = EventDetector(band=0.1, max_silence_s=300)
    fast = run(conversation_frames(status=(200, 200)), window_s=60)[1][0]
    snap = snapshot(fast, analyser="x", frames=1, connections=0, dropped={}, ignored={})
    first = detector.update_all(event_values(snap), 0.0)
    assert {e.key for e in first} == {
        "10.0.0.2:80." + k for k in ("requests_per_s", "success_rate", "mean_s", "p95_s")
    }
    assert detector.update_all(event_values(snap), 10.0) == []  # same values: silence
    worse = run(conversation_frames(status=(200, 503)), window_s=60)[1][0]
    changed = detector.update_all(
        event_values(
            snapshot(worse, analyser="x", frames=1, connections=0, dropped={}, ignored={})
        ),
        20.0,
    )
    assert [(e.key, e.value, e.previous) for e in changed] == [
        ("10.0.0.2:80.success_rate", 0.5, 1.0)
    ]


def test_replay_with_declared_protocols(capsys):
    """The recorded HTTP/2 and TLS capture (tests/data/appmon/protocols-nginx.pcap): each
    service says what it speaks; over TLS no status, so no success rate (null, never 1)."""
    from pathlib import Path

    capture = Path(__file__).resolve().parents[1] / "data" / "appmon" / "protocols-nginx.pcap"
    argv = ["appmon", "replay", str(capture), "--window", "1h", "--json"]
    assert main([*argv, "--protocol", "8443=h2", "--protocol", "8080=h2c"]) == 0
    services = {
        s["service"].rsplit(":", 1)[1]: s
        for line in capsys.readouterr().out.splitlines()
        for s in json.loads(line)["services"]
    }
    assert {port: s["protocol"] for port, s in services.items()} == {
        "443": "tls",
        "8080": "h2c",
        "8443": "h2",
    }
    assert services["8080"]["success_rate"] is not None and services["8080"]["responses"] == 40
    for port in ("443", "8443"):
        tls = services[port]
        assert tls["success_rate"] is None and tls["responses"] == 0
        assert tls["responses_without_status"] == tls["matched"] == tls["requests"] > 0
        assert tls["handshakes"] >= 1 and tls["handshake_s"]["mean"] > 0
    for bad, message in (("443=smtp", "protocol 'smtp' is not one of"), ("x=h2", "PORT=PROTOCOL")):
        assert main([*argv, "--protocol", bad]) == 2
        assert message in capsys.readouterr().err


def test_the_truncation_command_prints_each_length(capsys):
    from pathlib import Path

    from cosample.experiments.appmon_truncation import main as truncation

    capture = Path(__file__).resolve().parents[1] / "data" / "appmon" / "pipelined-nginx.pcap"
    assert truncation(["cuts", str(capture), "--lengths", "70-96", "--step", "26", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["length"], r["pairs"], r["right"]) for r in rows] == [(70, 0, 0), (96, 60, 60)]
