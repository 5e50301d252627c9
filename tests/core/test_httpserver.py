"""The daemons' one HTTP server (``cosample.httpserver``) on loopback: deadlines per phase, the
rule at the connection limit, heads and bodies refused, keep-alive. The daemons' own attack
tests (tests/collector/test_slow_peers.py, tests/controller/test_slow_peers.py) run it in
the real processes."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest
from waiting import wait_for

from cosample.httplimits import Limits
from cosample.httpserver import BoundedHTTPServer, ServerMetrics

BIG = b"x" * (64 << 20)  # more than the kernel's socket buffers take from a reader that stalls


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self):
        body = BIG if self.path == "/big" else b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(**limits):
        server = BoundedHTTPServer(("127.0.0.1", 0), Handler, Limits(**limits))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(5)


def get(server, path="/"):
    host, port = server.server_address
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
        return response.status, response.read()


def connect(server) -> socket.socket:
    sock = socket.create_connection(server.server_address, timeout=5)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has shut the connection (end of file, or a reset)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(1 << 16) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_a_trickled_head_is_shut_at_its_deadline_not_kept_alive_by_each_byte(serve):
    """One byte every 0.2 s never leaves the socket silent for the idle timeout (1 s): only
    the head's own deadline (1 s, counted from its first byte) ends it."""
    server = serve(idle_s=1.0, head_s=1.0)
    sock = connect(server)
    began = time.monotonic()
    request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100
    shut = False
    for byte in request:
        try:
            sock.send(bytes([byte]))
        except OSError:
            shut = True
            break
        if closed_by_server(sock):
            shut = True
            break
        time.sleep(0.15)
    held = time.monotonic() - began
    sock.close()
    assert shut and held < 5.0, held  # the whole trickle would take 20 s
    assert server.counts.evicted["slow"] == 1 and server.counts.evicted["idle"] == 0


def test_at_the_limit_a_newcomer_shuts_the_stalled_sender_and_is_answered(serve):
    server = serve(max_connections=4, head_s=60.0, idle_s=60.0)
    held = [connect(server) for _ in range(4)]
    for sock in held:
        sock.send(b"GET / HT")  # heads begun, never finished
    wait_for(lambda: server.counts.open == 4)
    assert get(server) == (200, b"ok\n")
    assert server.counts.evicted["slow"] == 1
    assert sum(closed_by_server(sock) for sock in held) == 1  # the oldest went
    for sock in held:
        sock.close()


def test_when_every_connection_is_being_answered_a_newcomer_is_refused(serve):
    server = serve(max_connections=2, answer_s=60.0, idle_s=60.0)
    readers = [connect(server) for _ in range(2)]
    for sock in readers:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read the answer
    for sock in readers:  # the first bytes of its answer came: a thread is answering it
        assert sock.recv(1, socket.MSG_PEEK) == b"H"
    with pytest.raises(OSError):  # closed unserved (the module's rule): no answer, an EOF or reset
        get(server)
    assert server.counts.refused["busy"] >= 1
    for sock in readers:
        sock.close()
    # each answering thread finds its reader gone and hands the connection back to be closed;
    # until then the two still count, and a newcomer would be refused again
    wait_for(lambda: server.counts.open == 0)
    assert get(server) == (200, b"ok\n")


def test_a_reader_that_stalls_is_shut_at_the_answer_deadline(serve):
    server = serve(answer_s=1.0, idle_s=30.0)
    sock = connect(server)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_for(lambda: server.counts.evicted["slow"] == 1, timeout_s=10.0)
    sock.close()
    assert wait_for(lambda: server.counts.open == 0)
    assert get(server) == (200, b"ok\n")


def test_idle_connections_close_and_keep_alive_serves_pipelined_requests(serve):
    server = serve(idle_s=0.5)
    sock = connect(server)
    sock.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answers = b""
    while answers.count(b"ok\n") < 2:
        answers += sock.recv(4096)
    assert answers.count(b"HTTP/1.1 200") == 2
    assert wait_for(lambda: closed_by_server(sock), timeout_s=5.0)  # idle past 0.5 s
    assert server.counts.evicted["idle"] == 1
    sock.close()


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20_000 + b"\r\n\r\n", b"431"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", b"413"),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"413"),
    ],
    ids=["head-too-large", "body", "chunked-body"],
)
def test_heads_above_the_limit_and_bodies_are_refused(serve, request_bytes, status):
    server = serve()
    sock = connect(server)
    sock.sendall(request_bytes)
    answer = b""
    while b"\r\n" not in answer:
        answer += sock.recv(4096)
    assert answer.split(b" ")[1] == status
    assert wait_for(lambda: closed_by_server(sock))
    sock.close()


def test_the_counts_are_exposed_with_prometheus_client(serve):
    from prometheus_client import CollectorRegistry, generate_latest

    server = serve(idle_s=0.3)
    connect(server).close()
    get(server)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerMetrics("cosample_test", lambda: server))
    text = generate_latest(registry).decode()
    for line in (
        'cosample_test_http_refused_total{reason="busy"} 0.0',
        'cosample_test_http_evicted_total{reason="slow"} 0.0',
        "cosample_test_http_descriptor_exhaustion_total 0.0",
        "# TYPE cosample_test_http_connections gauge",
    ):
        assert line in text, text
