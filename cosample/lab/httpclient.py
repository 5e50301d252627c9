"""A small HTTP/1.1 client over plain sockets that pipelines and splits requests (what wrk never
does), for the analyser's ground truth on truncated copies.

Each connection follows one pattern, chosen by its kind:

- ``pipelined``: requests written back to back in groups of ``depth`` (one ``send`` each, so one
  segment each with ``TCP_NODELAY``), then the group's responses read;
- ``split``: each request written in two parts at a random byte, ``pause`` apart (two segments);
- ``serial``: one request at a time (keep-alive);
- ``mixed``: one at a time, cycling through a POST whose body follows its header block in a
  second segment, a HEAD (its answer has no body) and a GET answered ``chunked``.

Requests go to the web rig's paths (``cosample.lab.web``): the backend (``/?mean_ms=..``) and
nginx's own ``/fast``. Responses are read with ``http.client``'s parser over one buffered reader
per connection (pipelined answers share it). Prints one JSON line per request: connection kind,
local port, index on its connection, method, status. Bounded: a socket timeout of 5 s.

    python -m cosample.lab.httpclient HOST [--port 80] [--rounds 12] [--seed 1] [--kinds ...]
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time

KINDS = ("pipelined", "pipelined", "pipelined", "split", "split", "serial", "mixed")


class _Reader:
    """What ``http.client.HTTPResponse`` reads through: one shared buffered file, so bytes of
    the next pipelined response are not lost with the previous one's reader (each response
    closes its file when read: here that closes nothing)."""

    def __init__(self, conn: socket.socket) -> None:
        self.file = conn.makefile("rb")

    def makefile(self, mode: str) -> "_Reader":
        return self

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        return getattr(self.file, name)


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: rig\r\nUser-Agent: cosample-lab\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\nContent-Type: text/plain\r\n"
    return (head + "\r\n").encode() + body


def _read(reader: _Reader, method: str) -> int:
    # any object with ``makefile`` will do (the standard library reads only that); the stub
    # names a socket
    response = http.client.HTTPResponse(reader, method=method)  # type: ignore[arg-type]
    response.begin()
    response.read()
    return response.status


class Connection:
    """One client connection of one kind; ``results`` gets a dict per request."""

    def __init__(self, host: str, port: int, kind: str, rounds: int, seed: int, results: list):
        self.kind, self.rounds, self.results = kind, rounds, results
        self.draw = random.Random(seed)
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _Reader(self.sock)
        self.local_port = self.sock.getsockname()[1]
        self.index = 0

    def path(self) -> str:
        size = self.draw.choice((60, 100, 1200, 3000))
        if self.draw.random() < 0.25:
            return f"/fast?i={self.index}"
        return f"/?mean_ms={self.draw.choice((1, 3, 8))}&size={size}&i={self.index}"

    def note(self, method: str, status: int) -> None:
        self.results.append(
            {
                "kind": self.kind,
                "port": self.local_port,
                "index": self.index,
                "method": method,
                "status": status,
            }
        )
        self.index += 1

    def run(self) -> None:
        try:
            getattr(self, "_" + self.kind)()
        finally:
            self.sock.close()

    def _pipelined(self, depth: int = 4) -> None:
        for _ in range(0, self.rounds, depth):
            sent = [_request("GET", self.path() + f"&p={k}") for k in range(depth)]
            for data in sent:
                self.sock.sendall(data)
                time.sleep(self.draw.choice((0.0005, 0.002)))
            for _ in sent:
                self.note("GET", _read(self.reader, "GET"))

    def _split(self) -> None:
        for _ in range(self.rounds):
            data = _request("GET", self.path())
            at = self.draw.randrange(1, len(data))
            self.sock.sendall(data[:at])
            time.sleep(0.002)
            self.sock.sendall(data[at:])
            self.note("GET", _read(self.reader, "GET"))

    def _serial(self) -> None:
        for _ in range(self.rounds):
            self.sock.sendall(_request("GET", self.path()))
            self.note("GET", _read(self.reader, "GET"))

    def _mixed(self) -> None:
        for round_ in range(self.rounds):
            step = round_ % 3
            if step == 0:
                body = b"b" * self.draw.choice((10, 700))
                data = _request("POST", self.path(), body)
                self.sock.sendall(data[: len(data) - len(body)])
                time.sleep(0.002)
                self.sock.sendall(body)
                method = "POST"
            elif step == 1:
                method = "HEAD"
                self.sock.sendall(_request(method, f"/fast?i={self.index}"))
            else:
                method = "GET"
                self.sock.sendall(_request(method, f"/?mean_ms=2&size=2500&chunked=1&i={round_}"))
            self.note(method, _read(self.reader, method))


def run_connections(host: str, port: int, kinds: tuple, rounds: int, seed: int) -> list[dict]:
    results: list[dict] = []
    connections = [
        Connection(host, port, kind, rounds, seed * 1000 + k, results)
        for k, kind in enumerate(kinds)
    ]
    threads = [threading.Thread(target=connection.run) for connection in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host")
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=12, help="requests per connection")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kinds", nargs="+", choices=sorted(set(KINDS)), default=list(KINDS))
    args = parser.parse_args(argv)
    results = run_connections(args.host, args.port, tuple(args.kinds), args.rounds, args.seed)
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
