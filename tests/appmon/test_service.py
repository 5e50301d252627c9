"""``cosample appmon run`` as a process on lo: HTTP endpoints, events, state files, clean stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.root


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status = 404 if self.path == "/missing" else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_run_serves_metrics_snapshot_and_events(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    events = tmp_path / "events.jsonl"
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
            "1s",
            "--metrics-port",
            "0",
            "--state-dir",
            str(tmp_path / "s"),
            "--events",
            str(events),
            "--name",
            "t1",
            "--duration",
            "30s",
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        line = process.stderr.readline().decode()
        http = re.search(r"HTTP on ([\d.]+):(\d+)", line)
        assert http, line
        base = f"http://{http.group(1)}:{http.group(2)}"
        with pytest.raises(urllib.error.HTTPError, match="503"):
            urllib.request.urlopen(base + "/snapshot", timeout=5)
        for path in ("/a", "/b"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).close()
        _expect_404(f"http://127.0.0.1:{port}/missing")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            metrics = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
            if f'cosample_appmon_requests_total{{service="127.0.0.1:{port}"}} 3.0' in metrics:
                break
            time.sleep(0.3)
        assert (
            f'cosample_appmon_responses_total{{class="4xx",service="127.0.0.1:{port}"}} 1.0'
            in metrics
        )
        assert (
            f'cosample_appmon_service_time_seconds_count{{service="127.0.0.1:{port}"}} 3.0'
            in metrics
        )
        snap = json.loads(urllib.request.urlopen(base + "/snapshot", timeout=5).read())
        assert snap["analyser"] == "t1" and snap["format"] == "cosample.appmon-snapshot"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        server.shutdown()
    windows = [
        json.loads(line) for line in (tmp_path / "s" / "windows.jsonl").read_text().splitlines()
    ]
    served = [s for w in windows for s in w["services"] if s["requests"]]
    assert sum(s["requests"] for s in served) == 3
    assert sum(s["status_classes"]["4xx"] for s in served) == 1
    keys = {json.loads(line)["key"] for line in events.read_text().splitlines()}
    assert f"127.0.0.1:{port}.requests_per_s" in keys and f"127.0.0.1:{port}.success_rate" in keys


def _expect_404(url):
    try:
        urllib.request.urlopen(url, timeout=5)
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    else:
        raise AssertionError(f"{url}: expected 404")
