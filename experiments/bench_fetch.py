"""What the total deadline costs and what it saves: ``cosample.fetch`` beside the alternatives.

Two measurements, side by side in one run on loopback:

1. a prompt 2-kB answer from a static server in another process (``python -m http.server``,
   so the clients do not share its interpreter lock), fetched ``--rounds`` times, alternating:
   mean wall time per fetch with ``cosample.fetch`` (a worker thread per request) and with bare
   ``http.client`` (no total deadline), and their ratio;
2. a server trickling its headers one byte every 0.1 s (``--trickle-bytes`` of them): how long
   each client waits with a 1-s budget. ``http.client``'s timeout and urllib3's
   ``Timeout(total=1)`` are per read, so they wait for the whole trickle; urllib3 and httpx are
   measured when importable (``PYTHONPATH`` pointing at them is enough: the project does not
   depend on them).

    python -m cosample.experiments.bench_fetch --rounds 500 --trickle-bytes 40
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cosample.fetch import fetch

BODY = b"x" * 2048


def _serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/doc"


def _trickler(count: int):
    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            try:
                for _ in range(count):
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(0.1)
                self.wfile.write(b": b\r\nContent-Length: 2\r\n\r\n{}")
            except OSError:
                pass

        def log_message(self, *args):
            pass
    return Trickle


def _bare(url: str, timeout: float) -> bytes:
    host, port = url.split("/")[2].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("GET", "/doc")
        return connection.getresponse().read()
    finally:
        connection.close()


def _ours(url: str, timeout: float) -> bytes | None:
    return fetch(url, label="bench", timeout_s=timeout, max_bytes=1 << 20).data


def _clients() -> dict:
    clients = {"cosample.fetch": _ours, "http.client": _bare}
    try:
        import urllib3

        pool = urllib3.PoolManager(retries=False)
        clients["urllib3 Timeout(total)"] = lambda url, t: pool.request(
            "GET", url, timeout=urllib3.Timeout(total=t)).data
    except ImportError:
        pass
    try:
        import httpx

        clients["httpx timeout"] = lambda url, t: httpx.get(url, timeout=t).content
    except ImportError:
        pass
    return clients


def _prompt(clients: dict, url: str, rounds: int) -> dict[str, float]:
    """Mean seconds per fetch of each client, alternating rounds (same load on both)."""
    names = ("cosample.fetch", "http.client")
    deadline = time.monotonic() + 10
    while True:  # wait for the server to listen
        try:
            _bare(url, 1.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    spent = dict.fromkeys(names, 0.0)
    for _ in range(rounds):
        for name in names:
            began = time.perf_counter()
            assert clients[name](url, 5.0) == BODY
            spent[name] += time.perf_counter() - began
    return {name: total / rounds for name, total in spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--trickle-bytes", type=int, default=40)
    args = parser.parse_args(argv)
    clients = _clients()
    with tempfile.TemporaryDirectory() as folder, socket.socket() as probe:
        (Path(folder) / "doc").write_bytes(BODY)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                                   "127.0.0.1", "--directory", folder],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            means = _prompt(clients, f"http://127.0.0.1:{port}/doc", args.rounds)
        finally:
            server.terminate()
            server.wait(10)
    print(f"prompt 2-kB answer, mean of {args.rounds}: cosample.fetch "
          f"{means['cosample.fetch'] * 1e3:.3f} ms, http.client "
          f"{means['http.client'] * 1e3:.3f} ms, ratio "
          f"{means['cosample.fetch'] / means['http.client']:.2f}")
    server, url = _serve(_trickler(args.trickle_bytes))
    try:
        print(f"headers trickled over {args.trickle_bytes * 0.1:.1f} s, budget 1 s:")
        for name, client in clients.items():
            began = time.perf_counter()
            try:
                client(url, 1.0)
                outcome = "answer read"
            except Exception as exc:  # noqa: BLE001 - what each library raises differs
                outcome = type(exc).__name__
            print(f"  {name:24s} returned after {time.perf_counter() - began:5.2f} s "
                  f"({outcome})")
    finally:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
