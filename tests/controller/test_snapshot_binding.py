"""Issue 41, item 5: a signed snapshot is bound to its collector's name, its time and its place in
the collector's sequence, against real collector daemons on loopback (and a real analyser).

What the attacker did: a snapshot signed by the right key and dated an hour ahead was planned
from and kept (no lower bound on age); a genuine snapshot frozen and served again was planned
from until it went stale; with both collectors' keys trusted, A's URL serving B's signed
snapshot was taken as A. Now the controller takes from ``NAME=URL`` only snapshots naming NAME,
refuses one dated more than ``MAX_SKEW_S`` ahead of its clock, and uses each (``started``,
``serial``) once; signed snapshots without a serial are refused.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from controller_helpers import inventory_doc, snapshot_doc
from waiting import serves, wait_for

from cosample.authenticity import HEADER, Signer
from cosample.cli import main
from cosample.collector.service import Service
from cosample.collector.service import Settings as CollectorSettings
from cosample.controller.appsource import AnalyserReader, analyser_url
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings
from cosample.controller.source import MAX_SKEW_S
from cosample.plan.signing import generate_keypair

BUSY = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}


@pytest.fixture
def keys(tmp_path):
    for name in ("c1", "c2", "app"):
        generate_keypair(tmp_path / f"{name}.pem", tmp_path / f"{name}.pub")
    return lambda name, kind="pub": str(tmp_path / f"{name}.{kind}")


@pytest.fixture
def collectors(tmp_path, keys):
    """Real collector daemons signing their snapshots with keys of their own, exporting every
    50 ms: ``start(name, ahead_s=0)`` (``ahead_s``: its clock that far ahead) -> its URL."""
    running = []

    def start(name: str, ahead_s: float = 0.0) -> str:
        service = Service(
            CollectorSettings(
                listen=("127.0.0.1", 0),
                plan=str(tmp_path / "none.json"),
                name=name,
                metrics_port=0,
                export_s=0.05,
                snapshot_key=keys(name, "pem"),
                insecure_unsigned=True,
            ),
            clock=lambda: time.time() + ahead_s,
            log=lambda line: None,
        ).start()
        thread = threading.Thread(target=service.run, daemon=True)
        thread.start()
        running.append((service, thread))
        host, port = service.http_address
        return f"http://{host}:{port}/snapshot"

    yield start
    for service, thread in running:
        service.stop()
        thread.join(timeout=10)


class Frozen:
    """Serves one recorded answer (body and signature header) again and again."""

    def __init__(self, body: bytes, signature: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header(HEADER, signature)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/snapshot"

    @classmethod
    def recording(cls, url: str) -> "Frozen":
        with urllib.request.urlopen(url, timeout=5) as response:
            return cls(response.read(), response.headers[HEADER])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def controller(tmp_path, collectors, keys):
    settings = Settings(collectors, interval_s=1.0, tau_s=1.0, collector_keys=keys)
    inventory = inventory_from_dict(inventory_doc([3000, 3000, 3000]))
    return Controller(inventory, settings, DirectoryTarget(tmp_path / "pub"), tmp_path / "state")


def test_a_url_serving_another_collectors_snapshot_is_refused(tmp_path, collectors, keys):
    """Both collectors' keys trusted: c1's location answering with c2's signed snapshots (what
    whoever holds c1's address can arrange) is refused; c2's own location is read."""
    collectors("c1")
    c2 = collectors("c2")
    trusted = (keys("c1"), keys("c2"))
    status = controller(tmp_path, (f"c1={c2}",), trusted).cycle()
    assert status.collectors_up == 0
    assert (
        f"snapshot {c2}: from collector 'c2', not 'c1' as its location says" in (status.problems[0])
    ), status.problems
    assert controller(tmp_path / "own", (f"c2={c2}",), trusted).cycle().collectors_up == 1


def test_a_snapshot_dated_ahead_of_the_controllers_clock_is_refused(tmp_path, collectors, keys):
    """The collector's clock an hour ahead: its signed snapshots are refused, not planned from
    and kept; one within the stated skew is read."""
    ahead = collectors("c1", ahead_s=3600.0)
    status = controller(tmp_path, (f"c1={ahead}",), (keys("c1"),)).cycle()
    assert status.collectors_up == 0
    assert re.search(
        rf"dated 3\d\d\d s ahead of this controller's clock \(limit {MAX_SKEW_S:g} s\); refused",
        status.problems[0],
    ), status.problems
    near = collectors("c2", ahead_s=MAX_SKEW_S / 2)
    assert controller(tmp_path / "near", (f"c2={near}",), (keys("c2"),)).cycle().collectors_up == 1


def test_a_frozen_snapshot_is_used_once(tmp_path, collectors, keys):
    """One genuine answer of c1 (body and signature), recorded and served again by another
    server at c1's location: the controller uses it in its first cycle and refuses it in every
    later one; c1's own location gives a new snapshot every cycle."""
    live = collectors("c1")
    wait_for(lambda: serves(live))
    frozen = Frozen.recording(live)
    try:
        replayed = controller(tmp_path, (f"c1={frozen.url}",), (keys("c1"),))
        genuine = controller(tmp_path / "genuine", (f"c1={live}",), (keys("c1"),))
        statuses = []
        for _ in range(3):
            statuses.append((replayed.cycle(), genuine.cycle()))
            time.sleep(0.2)
    finally:
        frozen.close()
    assert [s.collectors_up for s, _ in statuses] == [1, 0, 0]
    assert [g.collectors_up for _, g in statuses] == [1, 1, 1]
    for status, _ in statuses[1:]:
        assert (
            "already used: a replay, or the collector is not exporting" in (status.problems[0])
        ), status.problems


def test_a_signed_snapshot_without_a_serial_is_refused_unless_unsigned_ones_are_taken(
    tmp_path, keys
):
    """Snapshots of collectors before ``started`` and ``serial``: refused with the fix when
    signatures are checked (they could be replayed unseen); taken as before with
    --insecure-unsigned-snapshots, where nothing is authenticated anyway."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    body = json.dumps(snapshot_doc(now, BUSY)).encode()
    old = Frozen(body, Signer(keys("c1", "pem")).sign(body))
    try:
        signed = controller(tmp_path, (f"c1={old.url}",), (keys("c1"),)).cycle()
        unsigned = controller(tmp_path / "unsigned", (f"c1={old.url}",), ()).cycle()
    finally:
        old.close()
    assert signed.collectors_up == 0
    assert signed.problems[0] == (
        f"snapshot {old.url}: no serial (a collector older than this controller); refused: "
        "upgrade the collector"
    )
    assert unsigned.collectors_up == 1


def test_signed_locations_must_be_named_on_the_command_line(tmp_path, keys, capsys):
    (tmp_path / "dc.json").write_text(json.dumps(inventory_doc([3000, 3000, 3000])))
    argv = [
        "controller",
        "run",
        "--inventory",
        str(tmp_path / "dc.json"),
        "--collector",
        "http://127.0.0.1:1/",
        "--publish",
        str(tmp_path / "pub"),
        "--insecure-unsigned",
        "--collector-key",
        keys("c1"),
        "--state-dir",
        str(tmp_path / "state"),
        "--cycles",
        "1",
    ]
    assert main(argv) == 2
    assert "--collector http://127.0.0.1:1/: give it as NAME=URL" in (capsys.readouterr().err)


class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.mark.root
def test_analyser_windows_are_bound_to_their_name_time_and_order(tmp_path, keys):
    """The real analyser (``appmon run`` on lo, signing): its windows are taken from
    ``live=URL`` and refused from ``other=URL``; a window ending ahead of the controller's
    clock (the controller's clock an hour behind) is refused; a window recorded and served
    again is used once."""
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "cosample", "appmon", "run", "--interface", "lo", "--port",
         str(port), "--window", "1s", "--metrics-port", "0", "--snapshot-key",
         keys("app", "pem"), "--name", "live", "--duration", "60s"],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    frozen = None
    try:
        base = "http://{}:{}".format(
            *re.search(r"HTTP on ([\d.]+):(\d+)", process.stderr.readline()).groups()
        )
        url = analyser_url(base)

        def served() -> bool:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5).close()
            return serves(url)

        wait_for(served, timeout_s=20.0)
        trusted = (keys("app"),)
        now = datetime.now(timezone.utc)
        assert AnalyserReader(trusted)((f"live={url}",), now, 60.0).analysers_up == 1
        wrong = AnalyserReader(trusted)((f"other={url}",), now, 60.0)
        assert wrong.analysers_up == 0
        assert "from analyser 'live', not 'other' as its location says" in wrong.problems[0]
        behind = AnalyserReader(trusted)((f"live={url}",), now - timedelta(hours=1), 7200.0)
        assert behind.analysers_up == 0 and "after this controller's clock" in behind.problems[0]
        frozen = Frozen.recording(url)
        reader = AnalyserReader(trusted)
        ups = []
        for _ in range(3):
            reading = reader((f"live={frozen.url}",), datetime.now(timezone.utc), 60.0)
            ups.append(reading.analysers_up)
        assert ups == [1, 0, 0] and "a replay, or no window closed since" in reading.problems[0]
    finally:
        if frozen is not None:
            frozen.close()
        process.terminate()
        process.wait(timeout=20)
        server.shutdown()
        server.server_close()
