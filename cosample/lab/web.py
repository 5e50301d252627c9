"""A web server with known service times, for the application monitor's ground truth.

Two namespaces joined by one veth pair: the *server* namespace runs nginx (Debian's) in front of a
small Python backend that sleeps a drawn time and answers 200, or 500 at a given rate (both
chosen per request by the URL's query: ``/?mean_ms=20&error=0.1``); the *client* namespace runs
``wrk`` and is where captures are taken (on its end of the veth, which sees every packet of the
connections). nginx's access log, with ``$request_time``, is the reference (the seeds' Tomcat
valve). Everything is created under a name prefix unique to the process (``Lab.unique``) and
removed, by PID and by name, on exit; a crashed run's leftovers are swept before the first
namespace is made. Test rig only; needs root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from cosample.dataplane.run import CommandError, require, run
from cosample.lab.netns import Lab

SERVER_ADDRESS, CLIENT_ADDRESS = "10.77.0.2", "10.77.0.1"
BACKEND_PORT = 8081
LOG_FORMAT = "$msec $request_time $status $remote_port $connection_requests $upstream_response_time"

BACKEND = textwrap.dedent('''\
    """Sleeps an exponential time (plus 1 ms) of the mean the query asks, then 200 or 500 (GET or
    POST; with ``chunked`` in the query, no Content-Length: HTTP/1.0 ends the body by closing)."""
    import random, sys, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    draw, lock = random.Random(int(sys.argv[2])), threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.do_GET()

        def do_GET(self):
            query = parse_qs(urlsplit(self.path).query)
            mean = float(query.get("mean_ms", ["10"])[0]) / 1000
            error = float(query.get("error", ["0"])[0])
            with lock:
                sleep, failed = 0.001 + draw.expovariate(1 / mean), draw.random() < error
            time.sleep(sleep)
            body = b"failed" if failed else b"x" * int(query.get("size", ["100"])[0])
            self.send_response(500 if failed else 200)
            if "chunked" not in query:  # without a length nginx answers HTTP/1.1 clients chunked
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 512  # default 5: SYNs dropped, 1-s retries under load
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
    ''')

NGINX_CONF = textwrap.dedent("""\
    daemon off;
    master_process off;
    worker_processes 1;
    pid {root}/nginx.pid;
    error_log {root}/error.log warn;
    events {{ worker_connections 1024; }}
    http {{
        access_log off;
        log_format timing '{log_format}';
        client_body_temp_path {root}/body;
        proxy_temp_path {root}/proxy;
        fastcgi_temp_path {root}/fastcgi;
        uwsgi_temp_path {root}/uwsgi;
        scgi_temp_path {root}/scgi;
        keepalive_requests 100000;
        server {{
            listen {address}:80;
            access_log {root}/access.log timing;
            location /fast {{ return 200 "ok"; }}
            location / {{ proxy_pass http://127.0.0.1:{backend}; }}
        }}
    {extra}
    }}
    """)


def web_available() -> str | None:
    """None when the rig can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for program, package in (
        ("ip", "iproute2"),
        ("ethtool", "ethtool"),
        ("nginx", "nginx"),
        ("wrk", "wrk"),
        ("tcpdump", "tcpdump"),
    ):
        try:
            require(program, package)
        except CommandError as exc:
            return str(exc)
    return None


@dataclass(frozen=True)
class LogEntry:
    """One access-log line: when the request started (log time less its duration), status."""

    start: float
    request_time: float
    status: int


class WebRig:
    """The two namespaces, nginx and the backend; ``load`` runs wrk; ``tcpdump`` captures."""

    def __init__(self, directory: Path, seed: int = 1) -> None:
        self.directory, self.seed = Path(directory), seed
        self.lab = Lab.unique("am")
        self.link = f"{self.lab.prefix}v"
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> "WebRig":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.client = self.lab.namespace("c")
        self.server = self.lab.namespace("s")
        self.build_network()
        self.start_servers()

    def build_network(self) -> None:
        """Join client and server; a rig with a switch between them replaces this."""
        self.lab.veth(
            self.link,
            namespace=self.server,
            peer="eth0",
            address=f"{SERVER_ADDRESS}/24",
            host_namespace=self.client,
        )
        run(["ip", "-n", self.client, "addr", "add", f"{CLIENT_ADDRESS}/24", "dev", self.link])

    def start_servers(self) -> None:
        """The backend and nginx in the server namespace, answering before this returns."""
        backend = self.directory / "backend.py"
        backend.write_text(BACKEND)
        self._spawn(self.server, [sys.executable, str(backend), str(BACKEND_PORT), str(self.seed)])
        for folder in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.directory / folder).mkdir(exist_ok=True)
        conf = self.directory / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                root=self.directory,
                log_format=LOG_FORMAT,
                address=SERVER_ADDRESS,
                backend=BACKEND_PORT,
                extra=self.extra_servers(),
            )
        )
        self._spawn(
            self.server,
            [
                "nginx",
                "-c",
                str(conf),
                "-p",
                str(self.directory),
                "-e",
                str(self.directory / "error.log"),
            ],
        )
        self._wait_ready()

    def extra_servers(self) -> str:
        """More nginx ``server`` blocks (a subclass's: TLS, HTTP/2)."""
        return ""

    def _spawn(self, namespace: str, argv: list[str], **options) -> subprocess.Popen:
        process = subprocess.Popen(
            self.lab.exec_argv(namespace, argv),
            stdin=subprocess.DEVNULL,
            **({"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE} | options),
        )
        self._processes.append(process)
        return process

    def _wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = run(
                self.lab.exec_argv(
                    self.client,
                    [
                        sys.executable,
                        "-c",
                        "import sys, urllib.request; "
                        "urllib.request.urlopen(sys.argv[1], timeout=1)",
                        self.url(mean_ms=1),
                    ],
                ),
                check=False,
                timeout=5,
            )
            if result.returncode == 0:
                return
            time.sleep(0.1)
        raise CommandError(
            f"nginx in {self.server} did not answer within {timeout_s:g} s "
            f"(see {self.directory / 'error.log'})"
        )

    def url(self, path: str = "/", **query: float) -> str:
        text = "&".join(f"{key}={value}" for key, value in query.items())
        return f"http://{SERVER_ADDRESS}{path}" + (f"?{text}" if text else "")

    def load(
        self,
        url: str,
        duration_s: float = 1.0,
        connections: int = 4,
        threads: int = 1,
        latency: bool = False,
    ) -> str:
        """Run wrk from the client namespace (bounded: ``duration_s``); its report (with the
        latency distribution when ``latency``)."""
        result = run(
            self.lab.exec_argv(
                self.client,
                [
                    "wrk",
                    f"-t{threads}",
                    f"-c{connections}",
                    f"-d{duration_s:g}s",
                    "--timeout",
                    "2s",
                    *(["--latency"] if latency else []),
                    url,
                ],
            ),
            timeout=duration_s + 30,
        )
        return result.stdout

    def tcpdump(
        self,
        path: Path,
        snaplen: int = 0,
        namespace: str | None = None,
        interface: str = "eth0",
    ) -> subprocess.Popen:
        """Start capturing the client's veth end (or ``interface`` of ``namespace``) to
        ``path``; stop with ``stop``."""
        process = self._spawn(
            namespace or self.client,
            [
                "tcpdump",
                "-i",
                interface if namespace else self.link,
                "-U",
                "--immediate-mode",
                "-B",
                "65536",
                "-n",
                "-s",
                str(snaplen),
                "-w",
                str(path),
                "tcp",
            ],
        )
        deadline = time.monotonic() + 10
        assert process.stderr is not None  # (``_spawn`` pipes it)
        while time.monotonic() < deadline:  # tcpdump says "listening on" once capturing
            line = process.stderr.readline().decode(errors="replace")
            if "listening on" in line or not line:
                break
        return process

    def stop(self, process: subprocess.Popen, timeout_s: float = 10.0) -> int:
        """SIGTERM one process we started, and wait for it."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def access_log(self) -> list[LogEntry]:
        entries = []
        path = self.directory / "access.log"
        for line in path.read_text().splitlines():
            msec, request_time, status, _ = line.split(" ", 3)
            entries.append(
                LogEntry(float(msec) - float(request_time), float(request_time), int(status))
            )
        return entries

    def close(self) -> None:
        for process in reversed(self._processes):
            self.stop(process)
        self._processes.clear()
        problems = self.lab.teardown()
        if problems:
            print("web rig: " + "; ".join(problems), file=sys.stderr)
