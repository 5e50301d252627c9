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

3. an agent's poll of a signed ``--plan-hosts``-host plan served by the controller's own HTTP
   target, through a byte-counting relay: bytes received and CPU seconds (fetch, verify,
   parse) of a first poll and of an unchanged poll (``If-None-Match``: 304, signature fetched
   and verified, the parsed plans reused), side by side.

    python -m research.bench_fetch --rounds 500 --trickle-bytes 40 --plan-hosts 10000
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
        def do_GET(self):
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
        clients["urllib3 Timeout(total)"] = lambda url, t: (
            pool.request("GET", url, timeout=urllib3.Timeout(total=t)).data
        )
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


class _Relay:
    """A TCP relay to ``target`` that counts the bytes it passes back to the client."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.down = target, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if count:
                    self.down += len(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _agent_polls(hosts: int) -> None:
    """Bytes and CPU of a first and an unchanged poll, as the agent's cycle does them."""
    from cosample.controller.publish import HttpTarget, render
    from cosample.plan.document import parse_document
    from cosample.plan.formats import PLAN_FORMAT
    from cosample.plan.signing import generate_keypair, verify
    from cosample.plan.source import fetch as agent_fetch

    with tempfile.TemporaryDirectory() as folder:
        key, public = Path(folder) / "k", Path(folder) / "k.pub"
        generate_keypair(key, public)
        plan = {
            "format": PLAN_FORMAT,
            "format_version": 1,
            "plan_id": "p" * 64,
            "created": "2030-01-01T00:00:00Z",
            "expires": "2030-01-01T01:00:00Z",
            "hosts": {
                f"h{k}": {"role": "idle", "local_rate": 0.0, "sflow_sampling": None}
                for k in range(hosts)
            },
        }
        target = HttpTarget("127.0.0.1", 0, dict, lambda: b"")
        try:
            rendered = render(plan, 1, str(key))
            target.publish(rendered)
            relay = _Relay(target.address)
            url = f"http://127.0.0.1:{relay.port}/plan.json"
            previous, parsed = None, None
            for label in ("first poll", "unchanged poll"):
                before_bytes, began = relay.down, time.process_time()
                fetched = agent_fetch(url, timeout_s=30, with_signature=True, previous=previous)
                verify(fetched.data, fetched.signature, public)
                if parsed is None or parsed[0] is not fetched.data:
                    parsed = (fetched.data, parse_document(fetched.data))
                cpu = time.process_time() - began
                time.sleep(0.2)  # the relay's threads finish counting
                print(
                    f"  {label:15s} {relay.down - before_bytes:>10,} bytes received, "
                    f"{cpu * 1e3:8.1f} ms CPU (fetch, verify, parse)"
                )
                previous = fetched
            print(f"  plan: {len(rendered.data):,} bytes, {hosts:,} hosts")
        finally:
            target.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--trickle-bytes", type=int, default=40)
    parser.add_argument("--plan-hosts", type=int, default=10_000)
    args = parser.parse_args(argv)
    clients = _clients()
    with tempfile.TemporaryDirectory() as folder, socket.socket() as probe:
        (Path(folder) / "doc").write_bytes(BODY)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "http.server",
                str(port),
                "--bind",
                "127.0.0.1",
                "--directory",
                folder,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            means = _prompt(clients, f"http://127.0.0.1:{port}/doc", args.rounds)
        finally:
            server.terminate()
            server.wait(10)
    print(
        f"prompt 2-kB answer, mean of {args.rounds}: cosample.fetch "
        f"{means['cosample.fetch'] * 1e3:.3f} ms, http.client "
        f"{means['http.client'] * 1e3:.3f} ms, ratio "
        f"{means['cosample.fetch'] / means['http.client']:.2f}"
    )
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
            print(f"  {name:24s} returned after {time.perf_counter() - began:5.2f} s ({outcome})")
    finally:
        server.shutdown()
        server.server_close()
    print(f"an agent's polls of a signed {args.plan_hosts:,}-host plan (controller --serve):")
    _agent_polls(args.plan_hosts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
