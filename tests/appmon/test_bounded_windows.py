"""Issue 41, item 6: ``appmon run`` keeps a bounded number of windows in memory.

It kept every closed window's snapshot in a list nobody read: with 300 services at 1 s windows
its memory grew from 65 to 175 MB in 120 s, linearly. It now keeps the last window's snapshot
(what ``/snapshot`` serves) and the one open window. Here the real analyser captures on ``lo``
while 300 services (one port on 300 loopback addresses) answer a request each every second; its
peak memory after 10 windows and after 35 is the same within allocator noise (before: about
0.9 MB more per window).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from cosample.lab.slowpeers import peak_mb

pytestmark = pytest.mark.root

SERVICES = 300
ADDRESSES = [f"127.41.{1 + k // 250}.{1 + k % 250}" for k in range(SERVICES)]
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Services:
    """One asyncio server answering 200 on ``port`` of every address, on a thread of its own."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind((ADDRESSES[0], 0))
            self.port = probe.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        assert ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        async def answer(reader, writer):
            try:
                while await reader.readuntil(b"\r\n\r\n"):
                    writer.write(ANSWER)
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        async def main():
            self.server = await asyncio.start_server(answer, ADDRESSES, self.port)
            ready.set()
            async with self.server:
                await self.server.serve_forever()

        try:
            self.loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)


def clients(port: int, stop: threading.Event) -> None:
    """A kept-alive connection per service, one request on each every second."""
    socks = [socket.create_connection((address, port), timeout=5) for address in ADDRESSES]
    try:
        while not stop.is_set():
            began = time.monotonic()
            for sock in socks:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: s\r\n\r\n")
            for sock in socks:
                got = b""
                while not got.endswith(b"ok"):
                    got += sock.recv(4096)
            stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))
    finally:
        for sock in socks:
            sock.close()


def test_memory_stays_flat_over_windows_of_300_services(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (packet socket)")
    services = Services()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cosample",
            "appmon",
            "run",
            "--interface",
            "lo",
            "--port",
            str(services.port),
            "--window",
            "1s",
            "--metrics-port",
            "0",
            "--name",
            "bounded",
            "--duration",
            "60s",
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    stop = threading.Event()
    traffic = threading.Thread(target=clients, args=(services.port, stop), daemon=True)
    try:
        line = process.stderr.readline()
        assert re.search(r"HTTP on", line), line
        traffic.start()
        time.sleep(10.0)
        early = peak_mb(process.pid)
        time.sleep(25.0)
        late = peak_mb(process.pid)
        alive = process.poll() is None
    finally:
        stop.set()
        traffic.join(10)
        process.terminate()
        process.communicate(timeout=30)
        services.close()
    assert alive
    print(f"appmon run, {SERVICES} services, 1 s windows: peak {early:.1f} MB after 10 s, "
          f"{late:.1f} MB after 35 s")  # fmt: skip
    assert late - early < 8.0, (early, late)  # 25 windows kept would be about 22 MB
