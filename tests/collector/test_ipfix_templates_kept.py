"""The collector keeps learned IPFIX templates across restarts (``collector/ipfixtemplates.py``).

OVS re-sends its templates only every 600 s, so without this a restarted collector dropped a
``sample`` host's records for up to ten minutes. The file is checked as input: corrupt,
oversized or inconsistent files are refused with one message and the daemon starts as on a
first start. The daemon test restarts a real ``collector run --ipfix --state-dir`` and sends
records only (no template) to the second instance, and as a control to one without the file.
"""

from __future__ import annotations

import json
import os
import socket
import stat

import pytest
from collector_daemon import Daemon
from ipfix_messages import record_message, sample_plan, template_message
from waiting import wait_for

from cosample.collector import ipfixtemplates
from cosample.collector.errors import CollectorError
from cosample.collector.ipfix import TEMPLATE_LIFETIME_S, Templates
from cosample.collector.snapshot import parse_snapshot

P, DOMAIN, EXPORTER = 13107, 11, "127.29.0.1"
NOW = 1.9e9  # a fixed wall-clock time (seconds); nothing compares it with today's


def learned(now: float = NOW) -> Templates:
    templates = Templates()
    templates.decode(template_message(DOMAIN), EXPORTER, now)
    return templates


def test_saved_templates_decode_records_after_a_restart(tmp_path):
    ipfixtemplates.save(ipfixtemplates.encode(learned()), tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "ipfix").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ipfixtemplates.path_in(tmp_path)).st_mode) == 0o600
    restarted = Templates()
    assert ipfixtemplates.load(tmp_path, restarted, NOW + 60) == 2
    message = restarted.decode(record_message(DOMAIN, 1, 3, P), EXPORTER, NOW + 61)
    assert message.unknown_sets == 0 and message.records[0]["packetDeltaCount"] == 3 * 5
    assert (
        message.records
        == learned().decode(record_message(DOMAIN, 1, 3, P), EXPORTER, NOW + 61).records
    )
    # expiry counts from when OVS last sent them, not from the restart
    late = Templates()
    assert ipfixtemplates.load(tmp_path, late, NOW + TEMPLATE_LIFETIME_S + 1) == 0
    assert late.decode(record_message(DOMAIN, 1, 3, P), EXPORTER, NOW).unknown_sets == 1


def test_no_file_is_a_first_start(tmp_path):
    templates = Templates()
    assert ipfixtemplates.load(tmp_path, templates, NOW) == 0 and len(templates) == 0


def _document(tmp_path) -> dict:
    ipfixtemplates.save(ipfixtemplates.encode(learned()), tmp_path)
    return json.loads(ipfixtemplates.path_in(tmp_path).read_bytes())


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["sessions"][0]["templates"][0]["fields"][1].update(kind=2),
            "sessions[0].templates[0].fields[1] ('packetDeltaCount'): 'packetDeltaCount' with kind 2",
        ),
        (lambda d: d["sessions"][0]["templates"][0].update(id=3), "sessions[0].templates[0].id"),
        (lambda d: d["sessions"][0].update(exporter="not an address"), "sessions[0].exporter"),
        (
            lambda d: d["sessions"][0]["templates"][0].update(fields=[]),
            "sessions[0].templates[0].fields",
        ),
        (lambda d: d.update(format_version=2), "format_version"),
        (lambda d: d["sessions"][0].update(extra=1), "sessions[0].extra"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field_and_changes_nothing(tmp_path, change, message):
    document = _document(tmp_path)
    change(document)
    ipfixtemplates.path_in(tmp_path).write_text(json.dumps(document))
    templates = learned(NOW - 5)
    before = templates.sessions()
    with pytest.raises(CollectorError) as caught:
        ipfixtemplates.load(tmp_path, templates, NOW)
    assert str(caught.value).startswith(str(ipfixtemplates.path_in(tmp_path)))
    assert message.lower() in str(caught.value).lower(), str(caught.value)
    assert templates.sessions() == before


def test_garbage_and_oversized_files_are_refused(tmp_path, monkeypatch):
    path = ipfixtemplates.path_in(tmp_path)
    path.parent.mkdir()
    path.write_bytes(b"\x00{not json")
    with pytest.raises(CollectorError, match="not valid JSON"):
        ipfixtemplates.load(tmp_path, Templates(), NOW)
    monkeypatch.setattr(ipfixtemplates, "MAX_FILE_BYTES", 8)
    path.write_bytes(b"{" + b" " * 20 + b"}")
    with pytest.raises(CollectorError, match="larger than 8 bytes"):
        ipfixtemplates.load(tmp_path, Templates(), NOW)


def _records_only(daemon: Daemon, count: int) -> None:
    host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host.bind((EXPORTER, 0))  # s1's agent address: its exporter
    for sequence in range(count):
        host.sendto(record_message(DOMAIN, 100 + sequence, 3, P), daemon.ipfix)
    host.close()


def test_a_restarted_daemon_reads_records_without_new_templates(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(sample_plan(P, DOMAIN).raw))
    state = tmp_path / "state"
    options = ("--insecure-unsigned", "--ipfix", "127.0.0.1:0", "--state-dir", str(state))
    first = Daemon(plan, *options)
    try:
        host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        host.bind((EXPORTER, 0))
        host.sendto(template_message(DOMAIN), first.ipfix)
        host.sendto(record_message(DOMAIN, 0, 3, P), first.ipfix)
        host.close()
        wait_for(lambda: ipfixtemplates.path_in(state).exists(), timeout_s=20)
    finally:
        first.stop()
    second = Daemon(plan, *options)
    control = Daemon(plan, *options[:-1], str(tmp_path / "empty"))
    try:
        _records_only(second, 10)
        _records_only(control, 10)
        wait_for(lambda: second.samples_of("s1") == 30, timeout_s=20)
        wait_for(lambda: control.dropped().get("ipfix_unknown_template", 0) == 10, timeout_s=20)
        assert parse_snapshot(control.get("/snapshot")).servers["s1"].samples == 0
        assert not parse_snapshot(second.get("/snapshot")).dropped.get("ipfix_unknown_template")
    finally:
        log = second.stop()
        control.stop()
    assert "2 IPFIX template(s) restored from" in log


def test_a_corrupt_file_does_not_stop_the_daemon(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(sample_plan(P, DOMAIN).raw))
    state = tmp_path / "state"
    ipfixtemplates.path_in(state).parent.mkdir(parents=True)
    ipfixtemplates.path_in(state).write_bytes(b'{"format": "cosample.ipfix-templates", "ses')
    daemon = Daemon(
        plan, "--insecure-unsigned", "--ipfix", "127.0.0.1:0", "--state-dir", str(state)
    )
    try:
        host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        host.bind((EXPORTER, 0))
        host.sendto(template_message(DOMAIN), daemon.ipfix)
        host.sendto(record_message(DOMAIN, 0, 3, P), daemon.ipfix)
        host.close()
        wait_for(lambda: daemon.samples_of("s1") == 3, timeout_s=20)
        # the good templates learned since replace the refused file
        wait_for(
            lambda: b"packetDeltaCount" in ipfixtemplates.path_in(state).read_bytes(), timeout_s=20
        )
        assert daemon.process.poll() is None
    finally:
        log = daemon.stop()
    assert "not valid JSON" in log and "starting without the saved IPFIX templates" in log
