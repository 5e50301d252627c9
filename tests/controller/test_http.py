"""The HTTP target over a real socket: ETag and If-None-Match, the agents' fetcher, status."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from waiting import wait_for

from cosample.controller.publish import HttpTarget, render
from cosample.plan.signing import generate_keypair, verify
from cosample.plan.source import fetch


@pytest.fixture
def server():
    target = HttpTarget("127.0.0.1", 0, lambda: {"result": "kept"}, lambda: b"m 1\n")
    yield target
    target.close()


def plan(version_hint=1):
    return {
        "format": "cosample.plan",
        "format_version": 1,
        "plan_id": f"p{version_hint}",
        "created": "2030-01-01T00:00:00Z",
        "expires": "2030-01-01T01:00:00Z",
        "hosts": {"a": {"role": "idle", "local_rate": 0.0, "sflow_sampling": None}},
    }


def get(url, etag=None):
    request = urllib.request.Request(url, headers={"If-None-Match": etag} if etag else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get("ETag"), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("ETag"), b""


def test_etag_and_not_modified(server, tmp_path):
    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    url = server.describe()
    assert get(url)[0] == 404  # nothing published yet
    server.publish(render(plan(), 7, str(tmp_path / "k")))
    status, etag, body = get(url)
    assert status == 200 and json.loads(body)["version"] == 7 and etag
    assert get(url, etag)[0] == 304
    assert get(url, '"other", ' + etag)[0] == 304
    fetched = fetch(url, timeout_s=5, with_signature=True)  # the agents' own fetcher
    verify(fetched.data, fetched.signature, tmp_path / "k.pub")
    server.publish(render(plan(2), 8, str(tmp_path / "k")))
    status, new_etag, _ = get(url, etag)
    assert status == 200 and new_etag != etag


def test_status_and_metrics(server):
    base = server.describe().rsplit("/", 1)[0]
    assert json.loads(get(base + "/status")[2]) == {"result": "kept"}
    metrics = wait_for(lambda: _metrics_alone(base), timeout_s=10)
    assert metrics.startswith(b"m 1\n")  # the controller's, then the server's own
    assert get(base + "/nothing")[0] == 404


def _metrics_alone(base):
    """``/metrics`` once the one open connection it counts is its own: the /status request's
    is closed by its handler thread, which may finish just after the next request arrives."""
    body = get(base + "/metrics")[2]
    return body if b"cosample_controller_http_connections 1.0\n" in body else None
