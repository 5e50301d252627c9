"""Issue 41, item 6, against the real controller daemon on loopback: slow and endless peers.

An endless ``/snapshot`` body took the controller's peak memory to 5,247 MB against its 512 MiB
snapshot limit: every refused read's bytes stayed alive in the error's traceback, in a cycle the
garbage collector (paused during a cycle) reclaimed late, and the blocks ``read1`` returned left
the heap holey. Now the body is read into full blocks and refused past the limit while streaming
(``cosample.fetch``). The plan server (``--serve``) keeps answering while hundreds of
connections drip their heads (``cosample.httpserver``).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from controller_helpers import inventory_doc, snapshot_doc
from waiting import wait_for

from cosample.controller.source import MAX_BYTES
from cosample.fetch import FetchError, fetch
from cosample.lab.slowpeers import Drippers, Endless, peak_mb
from cosample.plan.signing import generate_keypair

BUSY = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}


def controller(tmp_path, name, collector, *extra):
    (tmp_path / "dc.json").write_text(json.dumps(inventory_doc([3000, 3000, 3000])))
    argv = [
        sys.executable,
        "-m",
        "cosample",
        "controller",
        "run",
        "--inventory",
        str(tmp_path / "dc.json"),
        "--collector",
        collector,
        "--insecure-unsigned-snapshots",
        "--state-dir",
        str(tmp_path / f"state-{name}"),
        "--interval",
        "1s",
        "--tau",
        "1s",
        "--max-age",
        "1h",
        *extra,
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(process) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[1]


@pytest.mark.parametrize("chunked", [False, True], ids=["close-delimited", "chunked"])
def test_an_endless_snapshot_body_costs_at_most_the_snapshot_limit(tmp_path, chunked):
    """Side by side: a controller reading a snapshot file (its baseline) and one whose
    collector answers an endless body, for five of its cycles or more. The second's peak
    stays within the first's plus the 512 MiB limit."""
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(snapshot_doc(datetime.now(timezone.utc), BUSY)))
    publish = ("--publish", str(tmp_path / "pub"), "--insecure-unsigned")
    with Endless(chunked=chunked) as endless:
        baseline = controller(tmp_path, "baseline", str(snapshot), *publish)
        attacked = controller(tmp_path, "attacked", f"{endless.url}/snapshot", *publish)
        try:
            wait_for(lambda: endless.served >= 5, timeout_s=120.0)
            peaks = [peak_mb(process.pid) for process in (baseline, attacked)]
            alive = attacked.poll() is None
        finally:
            stop(baseline)
            log = stop(attacked)
    status = json.loads((tmp_path / "state-attacked" / "status.json").read_text())
    assert alive, log
    assert any(f"larger than {MAX_BYTES} bytes" in p for p in status["problems"]), status
    assert peaks[1] < peaks[0] + 1.25 * MAX_BYTES / 1e6, peaks


def test_the_plan_server_answers_while_hundreds_of_connections_drip(tmp_path):
    """300 connections (more than the server's 256) each sending a byte every 5 s: the plan
    is fetched every second meanwhile, within the agents' own 5 s deadline."""
    generate_keypair(tmp_path / "plan.pem", tmp_path / "plan.pub")
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(snapshot_doc(datetime.now(timezone.utc), BUSY)))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/plan.json"
    process = controller(
        tmp_path, "serve", str(snapshot), "--serve", f"127.0.0.1:{port}", "--key",
        str(tmp_path / "plan.pem"),
    )  # fmt: skip
    answered, failed = 0, []
    try:
        wait_for(lambda: _fetched(url), timeout_s=60.0)
        with Drippers(("127.0.0.1", port), 300, every_s=5.0) as drippers:
            time.sleep(1.0)
            began = time.monotonic()
            while time.monotonic() - began < 12.0:
                try:
                    fetch(url, label="plan", timeout_s=5.0, max_bytes=1 << 20)
                    answered += 1
                except FetchError as exc:
                    failed.append(str(exc))
                time.sleep(1.0)
        metrics = fetch(
            f"http://127.0.0.1:{port}/metrics", label="m", timeout_s=5.0, max_bytes=1 << 22
        ).data.decode()
    finally:
        log = stop(process)
    assert failed == [] and answered >= 8, (failed, log)
    assert drippers.replaced >= 1
    assert 'cosample_controller_http_evicted_total{reason="slow"}' in metrics


def _fetched(url: str) -> bool:
    try:
        return fetch(url, label="plan", timeout_s=5.0, max_bytes=1 << 20).status == "ok"
    except FetchError:
        return False
