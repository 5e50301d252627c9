"""Send sFlow datagrams on loopback from the agent address each one names, as an OVS host does.

The collector admits a datagram only when its UDP source is the agent address in its header
(``collector/admission.py``). A test or benchmark on one machine sets each datagram's source
with ``IP_PKTINFO`` on one socket: addresses in 127.0.0.0/8 are all local on Linux's loopback
(no root, no per-agent socket, no address configuration); any other address needs
``IP_TRANSPARENT`` (root: ``CAP_NET_ADMIN``), which ``transparent()`` says is available.
"""

from __future__ import annotations

import socket
import struct

#: ``IP_PKTINFO`` and ``IP_TRANSPARENT`` (Linux ``<linux/in.h>``); ``socket`` lacks them.
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
IP_TRANSPARENT = getattr(socket, "IP_TRANSPARENT", 19)


def transparent() -> str | None:
    """None when datagrams can be sent from any address here; else why not (a skip reason)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
    except OSError as exc:
        return f"sending from non-local agent addresses needs IP_TRANSPARENT ({exc.strerror})"
    finally:
        sock.close()
    return None


class AgentSender:
    """``send(data, target)``: one datagram from the IPv4 agent address in its header."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if transparent() is None:
            self.socket.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
        self._info: dict[bytes, list] = {}

    def send(self, data: bytes, target: tuple[str, int], source: str | None = None) -> None:
        """``source``: send from this address instead (a forgery, in the attack tests); a
        datagram without an IPv4 agent address (garbage) goes from 127.0.0.1."""
        if source is None and (data[4:8] != b"\0\0\0\1" or len(data) < 12):
            source = "127.0.0.1"
        agent = socket.inet_aton(source) if source is not None else data[8:12]
        info = self._info.get(agent)
        if info is None:
            info = self._info[agent] = [
                (socket.IPPROTO_IP, IP_PKTINFO, struct.pack("I4s4s", 0, agent, b"\0" * 4))
            ]
        self.socket.sendmsg([data], info, 0, target)

    def close(self) -> None:
        self.socket.close()

    def __enter__(self) -> "AgentSender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
