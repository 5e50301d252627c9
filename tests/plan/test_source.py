"""Plan fetching over HTTP and from files, and metrics over HTTP, against real local servers."""

from __future__ import annotations

import http.server
import threading
import urllib.request

import pytest

from cosample.plan.errors import PlanFetchError
from cosample.agents.report import Metrics, serve_metrics
from cosample.plan.source import fetch


@pytest.fixture
def http_dir(tmp_path):
    """A static HTTP server on 127.0.0.1 serving tmp_path; yields (folder, base URL)."""
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(tmp_path), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_over_http_with_and_without_signature(http_dir):
    folder, base = http_dir
    (folder / "plan.json").write_bytes(b"{}")
    fetched = fetch(f"{base}/plan.json", with_signature=True)
    assert fetched.data == b"{}" and fetched.signature is None
    (folder / "plan.json.sig").write_bytes(b"c2ln\n")
    assert fetch(f"{base}/plan.json", with_signature=True).signature == b"c2ln\n"
    with pytest.raises(PlanFetchError, match="not found"):
        fetch(f"{base}/missing.json")


def test_fetch_errors_name_the_location(tmp_path):
    with pytest.raises(PlanFetchError, match="cannot fetch"):
        fetch("http://127.0.0.1:9/plan.json", timeout_s=2)  # discard port: refused
    with pytest.raises(PlanFetchError, match="unsupported scheme 'ftp'"):
        fetch("ftp://example.org/plan.json")
    (tmp_path / "plan.json").write_bytes(b"x")
    assert fetch(f"file://{tmp_path / 'plan.json'}").data == b"x"
    assert fetch(str(tmp_path / "plan.json")).data == b"x"


def test_metrics_served_on_loopback():
    metrics = Metrics()
    metrics.plan_version.set(42)
    server = serve_metrics(metrics, 0)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert b"cosample_agent_plan_version 42.0" in response.read()
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()


def test_size_limit_enforced_while_reading(tmp_path):
    """A body without Content-Length is cut at the limit, not read whole first."""
    class Endless(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x" * 1024)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(PlanFetchError, match="larger than 4096 bytes"):
            fetch(f"http://127.0.0.1:{server.server_address[1]}/plan.json", max_bytes=4096)
    finally:
        server.shutdown()
        server.server_close()
    (tmp_path / "big.json").write_bytes(b"y" * 5000)
    with pytest.raises(PlanFetchError, match="larger than 4096 bytes"):
        fetch(str(tmp_path / "big.json"), max_bytes=4096)
