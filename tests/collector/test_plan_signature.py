"""Issue 30, item 4: the collector verifies plan signatures as the agents do, by default.

It followed plans it could not verify: a replaced plan file whose signature no longer verified
(refused by every agent) moved s1's traffic onto s2 in its estimates, which the controller then
planned from. Now the same file is refused, counted, and the last good plan stays.
"""

from __future__ import annotations

import json

import pytest
from collector_daemon import Daemon, counter
from collector_plans import FOUR, plan_document
from waiting import wait_for

from cosample.cli import main
from cosample.collector import planread
from cosample.collector.planread import PlanReader
from cosample.plan.signing import generate_keypair, sign_file

LOOPBACK = "127.29.0"
#: What the replaced file says: s1 mirrors everything to s2 (its traffic would become s2's).
MOVED = {**FOUR, "s1": (64, {"s2": 1.0})}


@pytest.fixture
def keys(tmp_path):
    private, public = tmp_path / "plan.pem", tmp_path / "plan.pub"
    generate_keypair(private, public)
    return private, public


def write(path, hosts=FOUR, version=7):
    path.write_text(json.dumps(plan_document(hosts, version=version, agents=LOOPBACK)))
    return path


def test_a_plan_whose_signature_no_longer_verifies_is_refused(tmp_path, keys):
    private, public = keys
    path = write(tmp_path / "plan.json")
    sign_file(path, private)
    daemon = Daemon(path, "--public-key", str(public))
    try:
        wait_for(lambda: counter(daemon.metrics(), "cosample_collector_plan_version") == 7)
        write(path, MOVED, version=8)  # the old signature stays beside it
        metrics = wait_for(
            lambda: (
                (m := daemon.metrics())
                and counter(m, "cosample_collector_plan_refused_total", reason="signature") >= 2
                and m
            )
        )
        assert counter(metrics, "cosample_collector_plan_version") == 7
        assert counter(metrics, "cosample_collector_insecure_unsigned") == 0
        (tmp_path / "plan.json.sig").unlink()  # no signature at all: refused the same way
        refused = counter(metrics, "cosample_collector_plan_refused_total", reason="signature")
        wait_for(
            lambda: (
                counter(
                    daemon.metrics(), "cosample_collector_plan_refused_total", reason="signature"
                )
                > refused
            )
        )
        sign_file(path, private)  # signed by the operators: followed
        wait_for(lambda: counter(daemon.metrics(), "cosample_collector_plan_version") == 8)
    finally:
        log = daemon.stop()
    assert "does not verify" in log and "keeping the last good plan" in log
    assert "missing" in log


def test_without_a_key_the_daemon_refuses_to_start(tmp_path, capsys):
    path = write(tmp_path / "plan.json")
    assert main(["collector", "run", "--plan", str(path), "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert "--public-key: required" in err and "--insecure-unsigned" in err
    missing = tmp_path / "nowhere.pub"
    assert (
        main(
            [
                "collector",
                "run",
                "--plan",
                str(path),
                "--listen",
                "127.0.0.1:0",
                "--public-key",
                str(missing),
            ]
        )
        == 2
    )
    assert f"--public-key {missing}: cannot read the key" in capsys.readouterr().err


def test_insecure_unsigned_says_so(tmp_path):
    daemon = Daemon(write(tmp_path / "plan.json"), "--insecure-unsigned")
    try:
        metrics = wait_for(
            lambda: (
                (m := daemon.metrics()) and counter(m, "cosample_collector_plan_version") == 7 and m
            )
        )
    finally:
        log = daemon.stop()
    assert counter(metrics, "cosample_collector_insecure_unsigned") == 1
    assert "WARNING: INSECURE: plans are accepted unsigned" in log


def test_unchanged_bytes_are_not_verified_or_parsed_again(tmp_path, keys, monkeypatch):
    private, public = keys
    path = write(tmp_path / "plan.json")
    sign_file(path, private)
    calls = {"parse": 0, "verify": 0}
    for name in ("parse_document", "verify"):
        real = getattr(planread, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls["parse" if _name == "parse_document" else "verify"] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(planread, name, counted)
    reader = PlanReader(str(path), public_key=str(public))
    first, second = reader.read(), reader.read()
    assert first.changed and not second.changed and second.plans is first.plans
    assert calls == {"parse": 1, "verify": 1}
    write(path, version=8)  # new bytes, old signature: verified (and refused), not parsed
    bad, again = reader.read(), reader.read()
    assert bad.kind == again.kind == planread.SIGNATURE and calls == {"parse": 1, "verify": 2}
    sign_file(path, private)
    good = reader.read()
    assert [plan.version for plan in good.plans] == [8] and calls == {"parse": 2, "verify": 3}
    assert set(good.built) == {(8, good.plans[0].plan_id)}  # attribution built off the loop


def test_no_key_and_no_opt_out_refuses_every_read(tmp_path):
    reading = PlanReader(str(write(tmp_path / "plan.json"))).read()
    assert reading.plans is None and reading.kind == planread.SIGNATURE
    assert "--public-key" in reading.error


def test_an_unchanged_plan_is_not_downloaded_again(tmp_path, keys, monkeypatch):
    """Issue 25 item 3: the collector polls the controller's HTTP target conditionally, as the
    agents do: an unchanged plan is a 304 (its body not sent), a new one is downloaded."""
    from cosample.controller.publish import HttpTarget, render

    private, public = keys
    answers = []

    def recorded(*args, _real=planread.fetch, **kwargs):
        answers.append(_real(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(planread, "fetch", recorded)
    target = HttpTarget("127.0.0.1", 0, dict, lambda: b"")
    try:
        document = plan_document(FOUR, version=7, agents=LOOPBACK)
        target.publish(render(document, 7, str(private)))
        reader = PlanReader(target.describe(), public_key=str(public))
        first, second = reader.read(), reader.read()
        assert [a.unchanged for a in answers] == [False, True]
        assert first.changed and not second.changed and second.plans is first.plans
        target.publish(render(document, 8, str(private)))
        third = reader.read()
        assert not answers[-1].unchanged and third.changed
        assert [plan.version for plan in third.plans] == [8]
    finally:
        target.close()
