"""Plan fetching over HTTP and from files, and metrics over HTTP, against real local servers."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.request

import pytest

from cosample.agents.report import Metrics, serve_metrics
from cosample.plan.errors import PlanFetchError
from cosample.plan.source import Fetched, fetch


@pytest.fixture
def http_dir(tmp_path):
    """A static HTTP server on 127.0.0.1 serving tmp_path; yields (folder, base URL)."""
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(tmp_path), **k
    )
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
            body = response.read()
        assert b"cosample_agent_plan_version 42.0" in body
        assert b"cosample_agent_http_connections 1.0" in body  # the daemons' one server
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()


def test_size_limit_enforced_while_reading(tmp_path):
    """A body without Content-Length is cut at the limit, not read whole first."""

    class Endless(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
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


# --- total deadline on the signature, conditional polls (issues 30 and 25) -------------------


class _SlowSignature(http.server.BaseHTTPRequestHandler):
    """``/plan.json`` at once, ``/plan.json.sig`` one byte every 0.1 s (10 s in all)."""

    def do_GET(self):
        slow = self.path.endswith(".sig")
        body = b"c2ln" * 25 if slow else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if slow:
                    time.sleep(0.1)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_trickled_signature_is_under_the_plans_deadline():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowSignature)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/plan.json"
        assert fetch(url, timeout_s=5).data == b"{}"
        with pytest.raises(
            PlanFetchError,
            match=r"plan\.json\.sig: not fetched within the 1 s "
            r"deadline",
        ):
            fetch(url, timeout_s=1, with_signature=True)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def plan_server():
    from cosample.controller.publish import HttpTarget

    target = HttpTarget("127.0.0.1", 0, dict, lambda: b"")
    yield target
    target.close()


def test_unchanged_plan_costs_a_304_with_the_previous_bytes(plan_server, tmp_path):
    from cosample.controller.publish import render
    from cosample.plan.signing import generate_keypair

    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    plan = {
        "format": "cosample.plan",
        "format_version": 1,
        "plan_id": "p",
        "created": "2030-01-01T00:00:00Z",
        "expires": "2030-01-01T01:00:00Z",
        "hosts": {},
    }
    plan_server.publish(render(plan, 7, str(tmp_path / "k")))
    url = plan_server.describe()
    first = fetch(url, with_signature=True)
    assert not first.unchanged and first.etag and first.signature
    again = fetch(url, with_signature=True, previous=first)
    assert again.unchanged and again.data is first.data and again.signature == first.signature
    plan_server.publish(render(dict(plan, plan_id="q"), 8, str(tmp_path / "k")))
    changed = fetch(url, with_signature=True, previous=again)
    assert not changed.unchanged and b'"q"' in changed.data and changed.etag != first.etag
    # a tag from another location is never sent there
    assert not fetch(url, previous=Fetched("elsewhere", b"x", None, changed.etag)).unchanged


@pytest.mark.ovs
def test_agent_polls_cost_a_304_and_every_check_still_holds(
    sandbox, make_plan, to_bytes, plan_server, tmp_path
):
    """A real agent on a real OVS polling the controller's HTTP target: an unchanged plan is a
    304 (no body, no parse), and still the signature is verified on every poll, the rollback
    floor holds and the plan expires."""
    from datetime import timedelta

    from agentsandbox import agent

    from cosample.controller.publish import Rendered
    from cosample.plan.signing import generate_keypair, sign_bytes
    from cosample.times import utcnow

    ovs, config, _, _ = sandbox
    key, public = tmp_path / "k", tmp_path / "k.pub"
    generate_keypair(key, public)

    def publish(document, signature=None):
        data = to_bytes(document)
        plan_server.publish(
            Rendered(data, signature or sign_bytes(data, key), (document["version"],), document)
        )

    def polls():
        fetches = a.metrics.plan_fetches
        return (
            fetches.labels(result="downloaded")._value.get(),
            fetches.labels(result="unchanged")._value.get(),
        )

    good = make_plan(version=100)
    publish(good)
    clock = [utcnow()]
    a = agent(
        config,
        clock=lambda: clock[0],
        plan=plan_server.describe(),
        public_key=str(public),
        insecure_unsigned=False,
    )
    assert a.cycle().result == "ok"
    state = ovs.vsctl("list", "sFlow")
    for _ in range(2):
        assert a.cycle().result == "ok"
    assert polls() == (1, 2) and ovs.vsctl("list", "sFlow") == state

    publish(good, signature=sign_bytes(b"another plan", key))  # same bytes, wrong signature
    report = a.cycle()
    assert polls() == (1, 3)  # the plan itself was not downloaded again ...
    assert report.result == "rejected" and "does not verify" in report.errors[0]  # ... yet checked
    assert report.plan_version == 100 and ovs.vsctl("list", "sFlow") == state

    publish(make_plan(version=99, sampling=64, local_rate=1 / 64))
    report = a.cycle()
    assert polls() == (2, 3) and report.result == "rejected"
    assert "rollback refused" in report.errors[0] and ovs.vsctl("list", "sFlow") == state

    publish(good)
    assert a.cycle().result == "ok" and polls() == (3, 3)
    clock[0] = clock[0] + timedelta(hours=7)  # past the plan's expiry (6 h)
    report = a.cycle()
    assert polls() == (3, 4) and report.mode == "safe" and "expired" in report.reason


@pytest.mark.ovs
def test_temporary_files_killed_writes_left_are_removed(sandbox, make_plan):
    """Issue 30 item 7: ``.owned.json.*.tmp`` after kills. Old leftovers go at start (and after
    each cycle); a fresh one may be a write in progress beside us (``apply --once``): kept."""
    import os

    from agentsandbox import agent

    ovs, config, _, write_plan = sandbox
    write_plan(make_plan(version=100))
    state = config.parent / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    old = [
        state / ".owned.json.k1ll3d.tmp",
        state / ".last-good-plan.json.x.tmp",
        state / ".status.json.y.tmp",
    ]
    for path in old:
        path.write_text("{")
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    fresh = state / ".owned.json.inflight.tmp"
    fresh.write_text("{")
    a = agent(config)
    assert not any(path.exists() for path in old) and fresh.exists()
    os.utime(fresh, (time.time() - 120, time.time() - 120))  # now it is a leftover too
    assert a.cycle().result == "ok"
    assert sorted(p.name for p in state.glob(".*")) == []


@pytest.mark.ovs
def test_trickled_headers_cannot_hold_the_agent(sandbox, make_plan, capsys):
    """Issue 30 item 2 on a real OVS: headers one byte every 0.1 s (30 s of them) against a
    1-s timeout; the cycle ends at the deadline and the host keeps its plan."""
    from trickle import Trickler

    from cosample.cli import main

    ovs, config, _, write_plan = sandbox
    write_plan(make_plan(version=100))
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 0
    before = ovs.vsctl("list", "sFlow")
    slow = b"X-Padding: " + b"a" * 300 + b"\r\nContent-Length: 2\r\n\r\n{}"
    with Trickler(b"HTTP/1.1 200 OK\r\n", slow, 0.1) as server:
        code = main(
            [
                "agent",
                "apply",
                "--once",
                "--config",
                str(config),
                "--plan",
                server.url + "/plan.json",
                "--timeout",
                "1s",
            ]
        )
    assert code == 1
    # the first request is the host's slice (slices = "auto"), held by the same deadline
    assert "/hosts/s1: not fetched within the 1 s deadline" in capsys.readouterr().err
    assert ovs.vsctl("list", "sFlow") == before


def test_signing_with_a_key_others_can_read_warns_with_the_fix(tmp_path, capsys):
    import os

    from cosample.cli import main
    from cosample.plan.signing import generate_keypair

    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    (tmp_path / "plan.json").write_bytes(b"{}")
    assert main(["agent", "sign", str(tmp_path / "plan.json"), "--key", str(tmp_path / "k")]) == 0
    assert "chmod" not in capsys.readouterr().err
    os.chmod(tmp_path / "k", 0o666)  # the key
    assert main(["agent", "sign", str(tmp_path / "plan.json"), "--key", str(tmp_path / "k")]) == 0
    err = capsys.readouterr().err
    assert "mode 0666" in err and f"fix with: chmod 600 {tmp_path / 'k'}" in err
