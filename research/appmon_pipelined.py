"""Record the pipelined capture that tests/appmon/test_pipelining.py builds its lossy streams from.

Real nginx and its backend (``cosample.lab.web``, root); a client in the client namespace opens
three connections that pipeline 12 requests each (one write per request, 2 ms apart, before any
answer) and two that send 12 requests one at a time; bodies of 100 or 3000 bytes (one or three
segments). tcpdump on the client's veth end keeps each frame's first 256 bytes (every header
block whole), which ``editcap`` would give too.

    python -m research.appmon_pipelined tests/data/appmon/pipelined-nginx.pcap
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

CLIENT = """\
import random, socket, sys, threading, time
host, draw = sys.argv[1], random.Random(5)

def connect():
    conn = socket.create_connection((host, 80))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(5)
    return conn

def pipelined(index, count):
    conn = connect()
    for i in range(count):
        size = draw.choice((100, 100, 3000))
        conn.sendall(f"GET /?mean_ms=4&size={size}&c={index}&i={i} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
        time.sleep(0.002)
    data = b""
    while data.count(b"HTTP/1.1 ") < count:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    conn.close()

def serial(index, count):
    conn = connect()
    for i in range(count):
        size = draw.choice((100, 3000))
        conn.sendall(f"GET /?mean_ms=2&size={size}&s={index}&i={i} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
        data = b""
        while True:
            data += conn.recv(65536)
            head, sep, body = data.partition(b"\\r\\n\\r\\n")
            if sep and len(body) >= int(head.lower().split(b"content-length:")[1].split(b"\\r\\n")[0]):
                break
    conn.close()

threads = [threading.Thread(target=pipelined, args=(i, 12)) for i in range(3)]
threads += [threading.Thread(target=serial, args=(i, 12)) for i in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def record(out: Path, snaplen: int = 256) -> int:
    """Run the client against the web rig while tcpdump writes ``out``; log entries served."""
    from cosample.dataplane.run import run
    from cosample.lab.web import SERVER_ADDRESS, WebRig

    with tempfile.TemporaryDirectory(prefix="appmon-pipelined-") as scratch:
        client = Path(scratch) / "client.py"
        client.write_text(CLIENT)
        with WebRig(Path(scratch) / "web", seed=3) as rig:
            before = len(rig.access_log())
            dump = rig.tcpdump(out, snaplen=snaplen)
            time.sleep(0.5)
            run(
                rig.lab.exec_argv(rig.client, [sys.executable, str(client), SERVER_ADDRESS]),
                timeout=60,
            )
            time.sleep(0.5)
            rig.stop(dump)
            return len(rig.access_log()) - before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="pcap to write")
    args = parser.parse_args(argv)
    from cosample.lab.web import web_available

    reason = web_available()
    if reason:
        print(f"appmon_pipelined: cannot run here: {reason}", file=sys.stderr)
        return 2
    print(f"{record(args.out)} requests served; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
