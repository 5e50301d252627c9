"""``cosample.fetch`` against loopback servers that trickle: the deadline covers everything.

Each trickling server would finish its answer long after the deadline (tens of seconds), and
a fetch that waited for it would then *succeed*: so a test that sees the deadline error proves
the deadline held, without timing anything.
"""

from __future__ import annotations

import os
import threading

import pytest
from trickle import Trickler

from cosample.fetch import MISSING, OK, UNCHANGED, FetchError, fetch, fetch_bytes

BODY = b'{"format": "cosample.plan"}'
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n"
)
DEADLINE = r"not fetched within the 1 s deadline$"


def _fetch(url: str, **kwargs):
    return fetch(url + "/plan.json", label="plan", timeout_s=1.0, max_bytes=1 << 20, **kwargs)


def test_trickled_status_line_and_headers_hit_the_deadline():
    """The issue's attack: headers one byte at a time (each read gets a byte within any
    per-read timeout; 300 header bytes at 0.1 s each would finish after 30 s)."""
    slow = b"X-Padding: " + b"a" * 280 + b"\r\n\r\n" + BODY
    with Trickler(b"HTTP/1.1 200 OK\r\n", slow, 0.1) as server:
        with pytest.raises(
            FetchError, match=r"^plan http://127\.0\.0\.1:\d+/plan\.json: " + DEADLINE
        ):
            _fetch(server.url)
        server.stop.wait(0.5)  # the server notices the hang-up at its next byte
    assert server.slow_sent and 0 < server.slow_sent[0] < len(slow)


def test_trickled_status_line_from_its_first_byte():
    with Trickler(b"", b"HTTP/1.1 200 OK\r\n" * 20, 0.1) as server:
        with pytest.raises(FetchError, match=DEADLINE):
            _fetch(server.url)


def test_trickled_body_hits_the_deadline():
    slow_body = b" " * 300 + BODY
    head = b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(slow_body)).encode() + b"\r\n\r\n"
    with Trickler(head, slow_body, 0.1) as server:
        with pytest.raises(FetchError, match=DEADLINE):
            _fetch(server.url)


def test_silent_server_holds_neither_http_nor_the_tls_handshake():
    """A server that accepts and says nothing: the TLS handshake is under the deadline too."""
    with Trickler(None) as server:
        with pytest.raises(FetchError, match=DEADLINE):
            _fetch(server.url)
        with pytest.raises(FetchError, match=DEADLINE):
            _fetch(server.url.replace("http:", "https:"))


def test_shared_deadline_already_spent_fails_at_once():
    with Trickler(HEAD + b"\r\n" + BODY) as server:
        with pytest.raises(FetchError, match=DEADLINE):
            _fetch(server.url, deadline=0.0)


def test_a_prompt_answer_is_read_with_its_tag_and_headers():
    head = HEAD + b'ETag: "v1"\r\nX-Cosample-Signature: c2ln\r\n\r\n'
    with Trickler(head + BODY) as server:
        response = _fetch(server.url)
    assert response.status == OK and response.data == BODY and response.etag == '"v1"'
    assert response.headers["x-cosample-signature"] == "c2ln"
    assert b"If-None-Match" not in server.requests[0]


def test_conditional_fetch_sends_the_tag_and_a_304_is_unchanged():
    with Trickler(b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n') as server:
        response = _fetch(server.url, etag='"v1"')
    assert response.status == UNCHANGED and response.data is None
    assert b'If-None-Match: "v1"' in server.requests[0]


def test_not_found_and_errors_name_the_location(tmp_path):
    with Trickler(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n") as server:
        assert _fetch(server.url).status == MISSING
        assert (
            fetch_bytes(server.url + "/x", label="plan", timeout_s=2, max_bytes=10, missing_ok=True)
            is None
        )
        with pytest.raises(FetchError, match=r"plan http://127\.0\.0\.1:\d+/x: not found"):
            fetch_bytes(server.url + "/x", label="plan", timeout_s=2, max_bytes=10)
    with Trickler(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n") as server:
        with pytest.raises(FetchError, match="HTTP 500 Oops"):
            _fetch(server.url)
    with pytest.raises(FetchError, match="cannot fetch"):
        fetch_bytes("http://127.0.0.1:9/x", label="plan", timeout_s=2, max_bytes=10)
    with pytest.raises(FetchError, match="bad URL"):
        fetch_bytes("http://127.0.0.1:99999/x", label="plan", timeout_s=2, max_bytes=10)


def test_file_tag_makes_an_unchanged_file_unread(tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(BODY)
    first = fetch(str(path), label="plan", timeout_s=2, max_bytes=100)
    assert first.status == OK and first.data == BODY and first.etag
    again = fetch(f"file://{path}", label="plan", timeout_s=2, max_bytes=100, etag=first.etag)
    assert again.status == UNCHANGED and again.data is None
    replacement = tmp_path / "new.json"
    replacement.write_bytes(BODY)  # same bytes, a new file renamed over: a new tag
    os.replace(replacement, path)
    changed = fetch(str(path), label="plan", timeout_s=2, max_bytes=100, etag=first.etag)
    assert changed.status == OK and changed.etag != first.etag
    assert fetch(str(tmp_path / "none"), label="plan", timeout_s=2, max_bytes=1).status == MISSING


def test_workers_end_after_a_deadline():
    """The abandoned request is shut down, so its worker thread does not linger."""
    with Trickler(HEAD, b"X: " + b"a" * 600, 0.05) as server:
        with pytest.raises(FetchError, match=DEADLINE):
            _fetch(server.url)
        workers = [t for t in threading.enumerate() if t.name == "cosample-fetch"]
        for worker in workers:
            worker.join(5)
        assert not any(worker.is_alive() for worker in workers)


def test_the_benchmark_runs_and_tells_the_clients_apart(capsys):
    """``research/bench_fetch`` at a small size: the deadline held only by ours, and an
    unchanged poll far smaller than the plan."""
    from research import bench_fetch

    assert bench_fetch.main(["--rounds", "3", "--trickle-bytes", "15", "--plan-hosts", "200"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if "returned after" in line}
    assert "(FetchError)" in lines["cosample.fetch"]
    assert "(answer read)" in lines["http.client"]
    first, unchanged = (
        int(line.split()[2].replace(",", ""))
        for line in out.splitlines()
        if line.strip().startswith(("first poll", "unchanged poll"))
    )
    assert unchanged < 1000 < first
