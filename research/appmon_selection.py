"""What each segment selection would copy of a capture: frames and bytes per request.

A selective mirror's flows can match the TCP flags and the direction, not a segment's place in a
message (docs/appmon-mechanisms.md). Given a full capture of a service's traffic (tcpdump on the
server's interface; cut frames count at their length on the wire), this counts per request the frames each selection copies and the bytes on
the underlay (each copy plus 50 bytes of VXLAN, whole or cut to ``--cut`` bytes):

| selection | copies |
|---|---|
| psh | segments with PSH, both directions |
| psh+ends | PSH, FIN or RST |
| server_all | every segment from the server, PSH/FIN/RST from the client |
| all | every segment (a port mirror of the service) |

    python -m research.appmon_selection CAPTURE.pcap [--port 80] [--cut 78]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosample.appmon.decode import FIN, PSH, RST, Segment, decode
from cosample.appmon.errors import AppmonError
from cosample.appmon.pcap import frames, read_link

VXLAN_OVERHEAD = 50
ENDS = PSH | FIN | RST
SELECTIONS = {
    "psh": lambda segment, from_server: bool(segment.flags & PSH),
    "psh+ends": lambda segment, from_server: bool(segment.flags & ENDS),
    "server_all": lambda segment, from_server: from_server or bool(segment.flags & ENDS),
    "all": lambda segment, from_server: True,
}


def count(path: Path, port: int, cut: int) -> tuple[int, dict[str, tuple[int, int, int]]]:
    """Requests in the capture (client segments starting with a method), and per selection the
    frames, underlay bytes whole and underlay bytes cut to ``cut``."""
    link = read_link(path)
    requests, totals = 0, {name: [0, 0, 0] for name in SELECTIONS}
    for _, frame in frames(path):
        segment = decode(frame, link)
        if segment.__class__ is not Segment or port not in (segment.sport, segment.dport):
            continue
        from_server = segment.sport == port
        if not from_server and segment.payload[:4] in (b"GET ", b"POST", b"HEAD", b"PUT "):
            requests += 1
        wire = len(frame) - len(segment.payload) + segment.wire_length  # the capture may cut
        for name, selects in SELECTIONS.items():
            if selects(segment, from_server):
                total = totals[name]
                total[0] += 1
                total[1] += wire + VXLAN_OVERHEAD
                total[2] += min(wire, cut) + VXLAN_OVERHEAD
    return requests, {name: tuple(total) for name, total in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--port", type=int, default=80, help="the service's port (default 80)")
    parser.add_argument("--cut", type=int, default=78, help="truncation, bytes (default 78)")
    args = parser.parse_args(argv)
    try:
        requests, totals = count(args.capture, args.port, args.cut)
    except AppmonError as exc:
        print(f"appmon_selection: {exc}", file=sys.stderr)
        return 2
    if not requests:
        print(f"appmon_selection: {args.capture}: no request to port {args.port}", file=sys.stderr)
        return 2
    print(f"{requests} requests; per request:")
    print(f"{'selection':<12}{'frames':>8}{'bytes whole':>13}{f'cut to {args.cut}':>12}")
    for name, (copies, whole, cut) in totals.items():
        print(f"{name:<12}{copies / requests:8.2f}{whole / requests:13.1f}{cut / requests:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
