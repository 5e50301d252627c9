"""Snapshots authenticated from collector to controller, against the real collector daemon.

The collector signs every snapshot it serves (``--snapshot-key``); a controller given the
collectors' public keys plans only from snapshots that verify. An impostor answering for the
collector's URL, with or without a key of its own, changes no plan.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
from controller_helpers import inventory_doc, snapshot_doc
from waiting import serves, wait_for

from cosample.authenticity import HEADER, Signer
from cosample.cli import main
from cosample.collector.service import Service
from cosample.collector.service import Settings as CollectorSettings
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings
from cosample.controller.source import SnapshotReader
from cosample.plan.signing import generate_keypair, key_permission_warning

BUSY_S1 = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}
FORGED = {"s1": {"s1": 3.1e9}, "s2": {"s2": 200}, "s3": {"s3": 100}}


@pytest.fixture
def keys(tmp_path):
    pairs = {}
    for name in ("collector", "attacker", "plans"):
        generate_keypair(tmp_path / f"{name}.pem", tmp_path / f"{name}.pub")
        pairs[name] = (str(tmp_path / f"{name}.pem"), str(tmp_path / f"{name}.pub"))
    return pairs


@pytest.fixture
def collector(tmp_path, keys):
    """The real collector daemon, signing its snapshots, exporting every 20 ms."""
    service = Service(
        CollectorSettings(
            listen=("127.0.0.1", 0),
            plan=str(tmp_path / "none.json"),
            name="c1",
            metrics_port=0,
            export_s=0.02,
            snapshot_key=keys["collector"][0],
            insecure_unsigned=True,
        ),  # no plan at all here
        log=lambda line: None,
    ).start()
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    host, port = service.http_address
    url = f"http://{host}:{port}/snapshot"
    try:
        wait_for(lambda: serves(url), timeout_s=30.0)  # 503 until its first export
        yield service, url
    finally:
        service.stop()
        thread.join(timeout=10)


class Impostor:
    """Answers for a collector URL with a snapshot of its choosing, signed or not."""

    def __init__(self, body: bytes, signature: str | None) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                if signature is not None:
                    self.send_header(HEADER, signature)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/snapshot"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_every_snapshot_served_verifies_while_the_collector_exports(collector, keys):
    """Body and signature are swapped in one reference: reads during 50-per-second exports
    never pair one snapshot with another's signature."""
    service, url = collector
    reader = SnapshotReader((keys["collector"][1],))
    times, reads = set(), 0
    while len(times) < 20 and reads < 5000:  # until the snapshot changed under the reads
        times.add(reader.read(url, 5.0).time)  # raises unless the pair verifies
        reads += 1
    assert len(times) == 20
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers[HEADER]


def test_wrong_key_missing_signature_and_impostors_are_problems(collector, keys, tmp_path):
    service, url = collector
    now = datetime.now(timezone.utc)
    wrong = SnapshotReader((keys["attacker"][1],))((url,), now, 60.0, 5.0)
    assert wrong.snapshot is None
    assert wrong.problems[0].endswith(
        f"snapshot signature does not verify with {keys['attacker'][1]}; refused"
    )
    body = json.dumps(snapshot_doc(now, FORGED)).encode()
    for signature, problem in (
        (None, "unsigned snapshot"),
        (Signer(keys["attacker"][0]).sign(body), "does not verify"),
        ("not base64!", "not base64"),
    ):
        impostor = Impostor(body, signature)
        try:
            reading = SnapshotReader((keys["collector"][1],))((impostor.url,), now, 60.0, 5.0)
        finally:
            impostor.close()
        assert reading.snapshot is None and problem in reading.problems[0], reading.problems
    # either of two collectors' keys
    both = SnapshotReader((keys["attacker"][1], keys["collector"][1]))((url,), now, 60.0, 5.0)
    assert both.snapshot is not None and both.problems == ()


def test_an_impostor_snapshot_changes_no_plan(tmp_path, keys):
    """A controller with a plan in force, its collector URL now answered by an impostor
    claiming 3.1e9 pps for s1: the plan stays, the status says why."""
    snapshot = tmp_path / "snap.json"
    clock = [datetime.now(timezone.utc).replace(microsecond=0)]
    started = clock[0]

    def write(traffic, key):
        serial = int((clock[0] - started).total_seconds()) + 1
        document = snapshot_doc(
            clock[0], traffic, servers=["s1", "s2", "s3"], serial=serial, started=started
        )
        data = json.dumps(document).encode()
        snapshot.write_bytes(data)
        (tmp_path / "snap.json.sig").write_text(Signer(key).sign(data) + "\n")

    settings = Settings(
        (f"c1={snapshot}",),
        interval_s=30,
        tau_s=30,
        settle_s=60,
        collector_keys=(keys["collector"][1],),
        key=keys["plans"][0],
    )
    controller = Controller(
        inventory_from_dict(inventory_doc([3000, 3000, 3000])),
        settings,
        DirectoryTarget(tmp_path / "pub"),
        tmp_path / "state",
        clock=lambda: clock[0],
    )
    write(BUSY_S1, keys["collector"][0])  # a file snapshot, signed beside it
    first = controller.cycle()
    assert first.result == "published"
    published = (tmp_path / "pub" / "plan.json").read_bytes()
    for _ in range(3):
        clock[0] += timedelta(seconds=30)
        write(FORGED, keys["attacker"][0])
        status = controller.cycle()
        assert status.result == "stale" and "does not verify" in status.problems[0], status
    assert (tmp_path / "pub" / "plan.json").read_bytes() == published
    assert controller.store.last_version() == first.plan_version
    clock[0] += timedelta(seconds=30)
    write(BUSY_S1, keys["collector"][0])
    assert controller.cycle().result == "kept"  # the real collector again: back to normal


def test_key_permissions_warn_with_the_fix(tmp_path, keys, capsys):
    key = keys["plans"][0]
    assert key_permission_warning(key) is None  # 0600 as keygen writes it
    os.chmod(key, 0o644)
    warning = key_permission_warning(key)
    assert f"chmod 600 {key}" in warning and "0644" in warning
    inventory = tmp_path / "dc.json"
    inventory.write_text(json.dumps(inventory_doc([3000, 3000, 3000])))
    snapshot = tmp_path / "snap.json"
    data = json.dumps(snapshot_doc(datetime.now(timezone.utc), BUSY_S1, serial=1)).encode()
    snapshot.write_bytes(data)
    (tmp_path / "snap.json.sig").write_text(Signer(keys["collector"][0]).sign(data))
    argv = [
        "controller",
        "run",
        "--inventory",
        str(inventory),
        "--collector",
        f"c1={snapshot}",
        "--publish",
        str(tmp_path / "pub"),
        "--key",
        key,
        "--collector-key",
        keys["collector"][1],
        "--state-dir",
        str(tmp_path / "state"),
        "--cycles",
        "1",
        "--tau",
        "1s",
    ]
    assert main(argv) == 0  # accepted, with the warning naming the fix
    assert f"fix with: chmod 600 {key}" in capsys.readouterr().err
    os.chmod(key, 0o600)
    assert main(argv) == 0 and "chmod" not in capsys.readouterr().err
    # neither --collector-key nor --insecure-unsigned-snapshots: one line, exit 2
    assert main([a for a in argv if a not in ("--collector-key", keys["collector"][1])]) == 2
    assert "one of --collector-key or --insecure-unsigned-snapshots is required" in (
        capsys.readouterr().err
    )


def test_the_binary_form_is_signed_and_verified_the_same_way(collector, keys):
    """``/snapshot.bin`` (what a collector's base URL means to the controller) carries its own
    signature: reads during 50-per-second exports verify, and the wrong key refuses it."""
    from cosample.controller.source import snapshot_url

    service, url = collector
    binary = snapshot_url(url.removesuffix("/snapshot"))
    assert binary.endswith("/snapshot.bin")
    reader = SnapshotReader((keys["collector"][1],))
    times, reads = set(), 0
    while len(times) < 10 and reads < 5000:
        snapshot = reader.read(binary, 5.0)  # raises unless the pair verifies
        times.add(snapshot.time)
        reads += 1
    assert len(times) == 10 and snapshot.collector == "c1"
    wrong = SnapshotReader((keys["attacker"][1],))((binary,), datetime.now(timezone.utc), 60.0, 5.0)
    assert wrong.snapshot is None and "does not verify" in wrong.problems[0]
