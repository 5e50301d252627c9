"""The controller reads a real analyser (``cosample appmon run`` on lo, signing its snapshots):
over HTTP and from its state directory, verified with its public key, refused with another, and
the service's request rate is what was sent."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from cosample.controller.appmeasure import measure
from cosample.controller.appsource import AnalyserReader, analyser_url
from cosample.controller.errors import SnapshotError
from cosample.plan.signing import generate_keypair

pytestmark = pytest.mark.root
REQUESTS = 40


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_signed_analyser_snapshots_are_read_and_verified(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    generate_keypair(tmp_path / "a.pem", tmp_path / "a.pub")
    generate_keypair(tmp_path / "b.pem", tmp_path / "b.pub")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    state = tmp_path / "state"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "appmon",
            "run",
            "--interface",
            "lo",
            "--port",
            str(port),
            "--window",
            "2s",
            "--metrics-port",
            "0",
            "--state-dir",
            str(state),
            "--snapshot-key",
            str(tmp_path / "a.pem"),
            "--name",
            "live",
            "--duration",
            "40s",
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        line = process.stderr.readline().decode()
        http = re.search(r"HTTP on ([\d.]+):(\d+)", line)
        assert http, line
        base = f"http://{http.group(1)}:{http.group(2)}"
        time.sleep(2.2 - time.time() % 2)  # all requests inside one 2-s window
        for _ in range(REQUESTS):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5).close()
        reader = AnalyserReader((str(tmp_path / "a.pub"),))
        name = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        seen = None
        while time.monotonic() < deadline and seen is None:
            try:
                snap = reader.read(analyser_url(base), 5.0)
            except SnapshotError:
                time.sleep(0.3)
                continue
            rates = {s.service: s for s in snap.services}
            if name in rates and rates[name].requests:
                seen = snap
            time.sleep(0.3)
        assert seen is not None, "no signed window with the requests"
        entry = next(s for s in seen.services if s.service == name)
        assert entry.requests == REQUESTS
        measurement, _, intervals = measure([("live", seen)], (name,), np.ones(1))
        assert intervals[name] == [REQUESTS / seen.window_s] * 2  # share 1: counted
        assert measurement.own_pps[0] == pytest.approx(REQUESTS / seen.window_s)
        # the state directory's file and its .sig verify too (a window may close between the
        # two reads of a pair: retry once)
        for attempt in range(3):
            try:
                reader.read(str(state / "snapshot.json"), 5.0)
                break
            except SnapshotError:
                if attempt == 2:
                    raise
                time.sleep(0.5)
        other = AnalyserReader((str(tmp_path / "b.pub"),))
        with pytest.raises(SnapshotError, match="signature"):
            other.read(analyser_url(base), 5.0)
        reading = other((analyser_url(base),), datetime.now(timezone.utc), 60.0, 5.0)
        assert reading.analysers_up == 0 and "signature" in reading.problems[0]
    finally:
        process.terminate()
        process.wait(timeout=20)
        server.shutdown()
