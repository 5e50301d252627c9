"""The controller's snapshot fetch against real loopback HTTP servers: one total deadline."""

from __future__ import annotations

import http.server
import socketserver
import threading
import time
from datetime import datetime, timezone

import pytest

from cosample.controller.errors import SnapshotError
from cosample.controller.source import fetch, read_collectors


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


@pytest.fixture
def trickling():
    """A collector that answers 200 and then sends its body one byte every 0.1 s (20 s in all);
    yields (URL, the number of bytes it managed to send)."""
    body = b'{"format": "cosample.snapshot"' + b" " * 170 + b"}"
    sent = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    sent[0] += 1
                    time.sleep(0.1)
            except OSError:  # the controller hung up
                pass

        def log_message(self, *args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/snapshot", sent, len(body)
    server.shutdown()
    server.server_close()


def test_trickling_collector_cannot_hold_the_controller(trickling):
    """Every read gets a byte within its timeout, so a per-read timeout (urllib's) would wait
    for the whole 20 s body; the fetch gives up at its one total deadline instead."""
    url, sent, size = trickling
    with pytest.raises(
        SnapshotError,
        match=r"^snapshot http://127\.0\.0\.1:\d+/snapshot: not "
        r"fetched within the 1 s deadline$",
    ):
        fetch(url, timeout_s=1.0)
    assert 0 < sent[0] < size  # it was sending, and the controller left before the end


def test_trickling_collector_is_a_problem_not_a_crash(trickling):
    url, _, _ = trickling
    reading = read_collectors((url,), datetime.now(timezone.utc), max_age_s=60, timeout_s=1.0)
    assert reading.snapshot is None and reading.collectors_up == 0
    assert reading.problems == (f"snapshot {url}: not fetched within the 1 s deadline",)


def test_fetch_errors_name_the_collector(tmp_path):
    with pytest.raises(SnapshotError, match="snapshot http://127.0.0.1:9/snapshot: cannot fetch"):
        fetch("http://127.0.0.1:9/snapshot", timeout_s=2)  # discard port: refused
    with pytest.raises(SnapshotError, match=f"snapshot {tmp_path}/none.json: not found"):
        fetch(str(tmp_path / "none.json"), timeout_s=2)
    with pytest.raises(SnapshotError, match="unsupported scheme 'ftp'"):
        fetch("ftp://example.org/snapshot", timeout_s=2)


def test_trickled_headers_and_signature_header_cannot_hold_the_controller(tmp_path):
    """Issue 30 item 2: the headers (here the signature header itself) one byte at a time;
    the controller's cycle was held 20 s against a 3 s deadline."""
    from trickle import Trickler

    from cosample.controller.source import SnapshotReader
    from cosample.plan.signing import generate_keypair

    generate_keypair(tmp_path / "c.pem", tmp_path / "c.pub")
    slow = b"X-Cosample-Signature: " + b"A" * 88 + b"\r\nContent-Length: 2\r\n\r\n{}"
    with Trickler(b"HTTP/1.1 200 OK\r\n", slow, 0.1) as server:
        url = server.url + "/snapshot"
        reading = SnapshotReader((str(tmp_path / "c.pub"),))(
            (url,), datetime.now(timezone.utc), max_age_s=60, timeout_s=1.0
        )
    assert reading.snapshot is None
    assert reading.problems == (f"snapshot {url}: not fetched within the 1 s deadline",)


@pytest.mark.parametrize(
    "location, expected",
    [
        ("c1=http://h:9478/snapshot", ("c1", "http://h:9478/snapshot")),
        ("rack-7.dc_2=/var/lib/c/snapshot.json", ("rack-7.dc_2", "/var/lib/c/snapshot.json")),
        ("http://h:9478/snapshot?a=b", (None, "http://h:9478/snapshot?a=b")),
        ("/tmp/a=b/snapshot.json", (None, "/tmp/a=b/snapshot.json")),
        ("=http://h", (None, "=http://h")),
    ],
)
def test_a_location_names_its_collector_before_an_equals_sign(location, expected):
    from cosample.controller.source import named

    assert named(location) == expected


def test_the_base_url_means_the_binary_form_and_keeps_its_name():
    from cosample.controller.appsource import analyser_url
    from cosample.controller.source import snapshot_url

    assert snapshot_url("c1=http://h:9478") == "c1=http://h:9478/snapshot.bin"
    assert snapshot_url("http://h:9478/") == "http://h:9478/snapshot.bin"
    assert analyser_url("a1=http://h:9480") == "a1=http://h:9480/snapshot"
