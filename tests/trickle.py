"""A loopback TCP server that answers HTTP slowly, byte by byte, to test total deadlines.

``Trickler(fast, slow, pause_s)``: for each connection it reads the request head, sends
``fast`` at once and then ``slow`` one byte every ``pause_s`` seconds (``fast=None``: it says
nothing at all, not even a TLS handshake). It records the request heads it read and how many
slow bytes it sent before the client hung up, so a test can tell that the client left while
the server was still sending.
"""

from __future__ import annotations

import socket
import time

from cosample.lab.slowpeers import LoopbackServer


class Trickler(LoopbackServer):
    def __init__(self, fast: bytes | None, slow: bytes = b"", pause_s: float = 0.1) -> None:
        self.fast, self.slow, self.pause_s = fast, slow, pause_s
        self.requests: list[bytes] = []
        self.slow_sent: list[int] = []
        super().__init__()

    def _answer(self, conn: socket.socket) -> None:
        sent = 0
        with conn:
            try:
                if self.fast is None:
                    self.stop.wait(60)
                    return
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                self.requests.append(head)
                conn.sendall(self.fast)
                for byte in self.slow:
                    if self.stop.is_set():
                        break
                    conn.sendall(bytes([byte]))
                    sent += 1
                    time.sleep(self.pause_s)
            except OSError:  # the client hung up
                pass
            finally:
                self.slow_sent.append(sent)
