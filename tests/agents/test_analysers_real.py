"""The analyser supervisor with real ``cosample appmon run`` processes on lo: started with the
spec's arguments, counting a real HTTP exchange (requests per connection too), restarted after
a SIGKILL, replaced when its arguments change, stopped by PID on SIGTERM, found again by a
restarted supervisor. Needs root (packet socket); no fixed device names (no lock)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import stat
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cosample.agents.analyser_procs import LOG_FILE, PID_FILE, RealProcesses, Supervisor
from cosample.agents.analysers import wanted_analysers

pytestmark = pytest.mark.root
REQUESTS = 12


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def until(condition, seconds=20.0, what=""):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out: {what}")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def windows(directory: str) -> list[dict]:
    path = Path(directory) / "windows.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_real_analysers_are_started_restarted_replaced_and_stopped(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    item = {
        "service": {"address": "127.0.0.1", "port": port, "protocol": "http"},
        "mechanism": "sniffer",
        "from": "h1",
        "interface": "lo",
        "share": 1.0,
    }
    state = tmp_path / "state"
    table = RealProcesses()
    sup = Supervisor(table, state, stop_s=5.0, backoff_s=0.2, backoff_max_s=1.0)
    started = []
    try:
        want = wanted_analysers((item,), host="h1", state_dir=state, window_s=1.0)
        ((name, analyser),) = want.items()
        done, failed = sup.step(want)
        assert len(done) == 1 and not failed
        pid = sup.children[name].pid
        started.append(pid)
        log = Path(analyser.state_dir) / LOG_FILE
        until(lambda: "capturing on lo" in log.read_text(), what="analyser start")
        assert stat.S_IMODE(Path(analyser.state_dir).stat().st_mode) == 0o700
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [
            a.encode() for a in analyser.argv
        ]
        # one keep-alive connection: its requests are one sampling unit
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for _ in range(REQUESTS):
            connection.request("GET", "/x")
            connection.getresponse().read()
        connection.close()
        seen = until(
            lambda: (
                [
                    s
                    for w in windows(analyser.state_dir)
                    for s in w["services"]
                    if s["service"] == f"127.0.0.1:{port}" and s["requests"]
                ]
                if sum(s["requests"] for w in windows(analyser.state_dir) for s in w["services"])
                >= REQUESTS
                else None
            ),
            what="the requests in the analyser's windows",
        )
        assert sum(s["requests"] for s in seen) == REQUESTS
        assert all(s["request_connections"] == 1 for s in seen)
        assert sum(s["request_squares"] for s in seen) <= REQUESTS**2
        assert all(s["requests_per_s_ci95"] == [s["requests_per_s"]] * 2 for s in seen)
        assert all(
            s["success_rate_ci95"]
            == (None if s["success_rate"] is None else [s["success_rate"]] * 2)
            for s in seen
        )
        # killed: restarted after its back-off, with a new PID
        os.kill(pid, signal.SIGKILL)
        until(lambda: not alive(pid), what="the kill")
        assert sup.step(want) == ([], [])  # the exit is seen; the back-off starts
        assert sup.status()[0]["state"] == "waiting"
        assert sup.status()[0]["last_exit"] == -signal.SIGKILL
        time.sleep(0.3)
        done, _ = sup.step(want)
        assert done == [f"restart analyser {name} (sniffer 127.0.0.1:{port})"]
        restarted = sup.children[name].pid
        started.append(restarted)
        assert restarted != pid and alive(restarted)
        assert sup.status()[0]["restarts"] == 1
        # a changed spec (a share of connections): the old process stops, a new one starts
        changed = wanted_analysers(
            ({**item, "share": 0.5},), host="h1", state_dir=state, window_s=1.0
        )
        done, _ = sup.step(changed)
        assert [d.split()[0] for d in done] == ["stop", "start"]
        assert not alive(restarted)
        replaced = sup.children[name].pid
        started.append(replaced)
        assert "--share-residues" in Path(f"/proc/{replaced}/cmdline").read_text()
        # a new supervisor (the agent restarted) finds it by its pid.json and command line
        again = Supervisor(RealProcesses(), state, stop_s=5.0)
        assert again.step(changed) == ([], [])
        assert again.children[name].pid == replaced
        # the plan drops it: SIGTERM, gone, no pid.json left
        done, _ = again.step({})
        assert done == [f"stop analyser {name} (pid {replaced}: the plan no longer asks for it)"]
        assert table.poll(replaced)[0] and not alive(replaced)
        assert not (Path(analyser.state_dir) / PID_FILE).exists()
    finally:
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
            table.poll(pid)
        server.shutdown()


def test_the_off_site_sniffer_and_its_receiver_run_as_a_pair(tmp_path):
    """The compact-records mechanism: the sender host's supervisor runs the sniffer with
    ``--send-records``, the analysis host's runs the receiver; the receiver counts the requests
    (its windows name no connection: no per-connection counts)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    import socket

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a free UDP port
        probe.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{probe.getsockname()[1]}"
    service = {"address": "127.0.0.1", "port": port, "protocol": "http"}
    sender = {
        "service": service,
        "mechanism": "sniffer",
        "from": "h1",
        "interface": "lo",
        "send_to": "h2",
        "send_records": endpoint,
        "send_records_from": "127.0.0.1",
        "share": 1.0,
    }
    receiver = {
        "service": service,
        "mechanism": "sniffer",
        "from": "h1",
        "interface": None,
        "receive_records": endpoint,
        "records_from": "127.0.0.1",
        "share": 1.0,
    }
    table = RealProcesses()
    hosts = {"h1": (sender, tmp_path / "h1"), "h2": (receiver, tmp_path / "h2")}
    sups = {host: Supervisor(table, state, stop_s=5.0) for host, (_, state) in hosts.items()}
    pids: list[int] = []
    secret = bytes(range(32))  # the site's record secret: each agent derives the pair's key
    wants = {
        host: wanted_analysers(
            (item,), host=host, state_dir=state, window_s=1.0, record_secret=secret
        )
        for host, (item, state) in hosts.items()
    }
    try:
        for host in ("h2", "h1"):  # the receiver first, as the agents' plan order has it
            sups[host].step(wants[host])
            (analyser,) = wants[host].values()
            until(
                lambda: "appmon" in (Path(analyser.state_dir) / LOG_FILE).read_text(),
                what=f"{host}'s analyser start",
            )
        pids = [child.pid for sup in sups.values() for child in sup.children.values()]
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        roles = {host: next(iter(w.values())).role for host, w in wants.items()}
        assert roles == {"h1": "sender", "h2": "receiver"}
        keys = [
            next(Path(w.state_dir).glob("record-*.key")) for a in wants.values() for w in a.values()
        ]
        assert keys[0].read_bytes() == keys[1].read_bytes()  # one pair, one key, 0600
        assert all(k.stat().st_mode & 0o777 == 0o600 for k in keys)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for _ in range(REQUESTS):
            connection.request("GET", "/y")
            connection.getresponse().read()
        connection.close()
        (received,) = wants["h2"].values()

        def counted():
            return sum(
                s["requests"]
                for w in windows(received.state_dir)
                for s in w["services"]
                if s["service"] == f"127.0.0.1:{port}"
            )

        until(lambda: counted() >= REQUESTS, what="the records counted by the receiver")
        assert counted() == REQUESTS
        seen = [s for w in windows(received.state_dir) for s in w["services"] if s["requests"]]
        assert all(s["request_squares"] is None for s in seen)  # records name no connection
        assert all(s["final_squares"] is None for s in seen)
    finally:
        for sup in sups.values():
            sup.stop_all()
        server.shutdown()
    assert pids and not any(alive(pid) for pid in pids)


def test_a_receiver_without_a_record_secret_refuses_to_start(tmp_path):
    """Secure by default: no secret and no ``insecure_records``, no listening receiver."""
    item = {
        "service": {"address": "127.0.0.1", "port": 8080, "protocol": "http"},
        "mechanism": "sniffer",
        "from": "h1",
        "interface": None,
        "receive_records": "127.0.0.1:9",
        "records_from": "127.0.0.1",
        "share": 1.0,
    }
    (analyser,) = wanted_analysers((item,), host="h2", state_dir=tmp_path, window_s=1.0).values()
    assert "--record-key" not in analyser.argv and "--insecure-records" not in analyser.argv
    result = subprocess.run(list(analyser.argv), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "compact records need --record-key FILE" in result.stderr
