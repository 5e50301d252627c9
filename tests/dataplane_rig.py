"""The real-OVS agent rigs' shared pieces (tests/agents/test_dataplane.py,
test_mirror_and_receive.py): the test traffic's sender, how its ids are read back from sFlow
headers, the collector's link into a host namespace, an agent's config and command line."""

from __future__ import annotations

import sys

from cosample.dataplane.run import run
from cosample.lab.netns import Lab

#: UDP port of the test packets.
PORT = 9999

SENDER = r"""
import socket, struct, sys, time
dst, port, count, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
size = int(sys.argv[5]) if len(sys.argv) > 5 else 40
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic()
for i in range(count):
    sock.sendto(struct.pack("!Q", i) + bytes(size - 8), (dst, port))
    if i % 100 == 99:
        delay = start + (i + 1) / pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
"""


def udp_payload_id(frame: bytes) -> int | None:
    """The test id of an Ethernet/IPv4/UDP frame to PORT (from an sFlow header), else None."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    udp = 14 + (frame[14] & 15) * 4
    if len(frame) < udp + 16 or int.from_bytes(frame[udp + 2 : udp + 4], "big") != PORT:
        return None
    return int.from_bytes(frame[udp + 8 : udp + 16], "big")


def collector_link(lab: Lab, root_end: str, ns: str, net: str) -> None:
    lab.veth(root_end, ns, peer="col", address=f"{net}.2/24")
    run(["ip", "addr", "add", f"{net}.1/24", "dev", root_end])


def write_config(path, host: str, plan, ovs, state, collector, agent_ip) -> str:
    path.write_text(
        f'host = "{host}"\nplan = "{plan}"\novsdb = "{ovs.remote}"\n'
        f'state_dir = "{state}"\ncollector = "{collector.target}"\n'
        f'sflow_agent = "{agent_ip}"\ninsecure_unsigned = true\n'
    )
    return str(path)


def agent_cli(lab: Lab, host_ns: str, *args: str) -> str:
    result = run(
        lab.exec_argv(host_ns, [sys.executable, "-m", "cosample", "agent", *args]),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr
