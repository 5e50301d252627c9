"""Synthetic TCP conversations for the appmon unit tests: frames with chosen sequence numbers.

Only for tests of the pure logic (decode, reassembly, matching); the real-traffic tests beside
them (tests/appmon/test_ground_truth.py) use nginx and wrk.
"""

from __future__ import annotations

from cosample.appmon.decode import ACK, FIN, PSH, SYN
from cosample.appmon.pcap import tcp_frame


class Conversation:
    """One client connection to ``server:port``; methods return ``(time, frame)`` lists."""

    def __init__(
        self,
        client="10.0.0.1",
        server="10.0.0.2",
        cport=40000,
        port=80,
        client_isn=1000,
        server_isn=5000,
        vlan=None,
    ):
        self.client, self.server, self.cport, self.port, self.vlan = (
            client,
            server,
            cport,
            port,
            vlan,
        )
        self.cseq, self.sseq = client_isn + 1, server_isn + 1
        self.client_isn, self.server_isn = client_isn, server_isn

    def handshake(self, time):
        return [
            (
                time,
                tcp_frame(
                    self.client,
                    self.server,
                    self.cport,
                    self.port,
                    self.client_isn,
                    SYN,
                    vlan=self.vlan,
                ),
            ),
            (
                time,
                tcp_frame(
                    self.server,
                    self.client,
                    self.port,
                    self.cport,
                    self.server_isn,
                    SYN | ACK,
                    vlan=self.vlan,
                ),
            ),
        ]

    def send(self, time, data, from_client=True, advance=True):
        """One data segment (the next bytes of that side)."""
        if from_client:
            frame = tcp_frame(
                self.client,
                self.server,
                self.cport,
                self.port,
                self.cseq,
                PSH | ACK,
                data,
                vlan=self.vlan,
                ack=self.sseq,
            )
            if advance:
                self.cseq += len(data)
        else:
            frame = tcp_frame(
                self.server,
                self.client,
                self.port,
                self.cport,
                self.sseq,
                PSH | ACK,
                data,
                vlan=self.vlan,
                ack=self.cseq,
            )
            if advance:
                self.sseq += len(data)
        return (time, frame)

    def segments(self, time, data, size, from_client=True):
        """``data`` cut into segments of ``size`` bytes, all at ``time``."""
        return [self.send(time, data[i : i + size], from_client) for i in range(0, len(data), size)]

    def ack(self, time, from_client=True):
        src, dst, sport, dport, seq = (
            (self.client, self.server, self.cport, self.port, self.cseq)
            if from_client
            else (self.server, self.client, self.port, self.cport, self.sseq)
        )
        return (time, tcp_frame(src, dst, sport, dport, seq, ACK, vlan=self.vlan))

    def fin(self, time):
        return [
            (
                time,
                tcp_frame(
                    self.client,
                    self.server,
                    self.cport,
                    self.port,
                    self.cseq,
                    FIN | ACK,
                    vlan=self.vlan,
                ),
            ),
            (
                time,
                tcp_frame(
                    self.server,
                    self.client,
                    self.port,
                    self.cport,
                    self.sseq,
                    FIN | ACK,
                    vlan=self.vlan,
                ),
            ),
        ]


def request(path="/", method="GET", body=b""):
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def response(status=200, body=b"hello", chunked=False):
    if chunked:
        chunks = (
            b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:3], body[3:]) if part)
            + b"0\r\n\r\n"
        )
        return (f"HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n").encode() + chunks
    return (f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def run(frames, window_s=10.0, **options):
    """An analyser fed ``frames`` and finished; returns it with its closed windows."""
    from cosample.appmon.analyser import Analyser

    analyser = Analyser(window_s, **options)
    for time, frame in frames:
        analyser.ingest(frame, time)
    windows = analyser.finish()
    return analyser, windows


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113 section 4.1)."""
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + payload


def h2_request_block(path: str) -> bytes:
    """A request's header block, HPACK-encoded by a fresh encoder."""
    from hpack import Encoder

    return Encoder().encode(
        [(":method", "GET"), (":scheme", "http"), (":path", path), (":authority", "rig")]
    )
